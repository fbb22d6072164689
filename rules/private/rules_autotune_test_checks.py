"""Checks the autotuned_py_test wrapper (rules_autotune_test_wrapper.py) makes before the
user's main runs: the committed cache is readable (a load test fails naming its workspace path
and the regen command; a `.dump` does not load a broken file, so the regen replaces it), a
`.dump` says where its results go (and refuses `bazel run`, where they would go nowhere), and a
`runner = "main"` test whose main defines tests and runs none fails naming the runner to set.
Standard library only at import time, as the wrapper.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path

# The variables the macro sets (rules/private/constants.bzl; tests/rules/test_constants.py
# checks that the names agree).
DUMP_TARGET_ENV = "AUTOTUNE_DUMP_TARGET"
MACRO_FLAGS_ENV = "RULES_AUTOTUNE_MACRO_FLAGS"
MACRO_XLA_FLAGS_ENV = "RULES_AUTOTUNE_MACRO_XLA_FLAGS"

_LOAD_FLAGS = {MACRO_FLAGS_ENV: "--load_autotune_results_from",
               MACRO_XLA_FLAGS_ENV: "--xla_gpu_load_autotune_results_from"}
WORKSPACE_PREFIX = "TEST_WORKSPACE/"
REGEN_HINT_ENV = "AUTOTUNE_REGEN_HINT"
_CONFLICT_MARKER = re.compile(rb"^(<{7} |={7}$|>{7} )", re.MULTILINE)


def committed_cache(env: Mapping[str, str]) -> tuple[str, str] | None:
    """(the macro's flag variable, the committed cache's TEST_WORKSPACE/ path) of this target,
    or None when it loads no committed file (it does not exist yet)."""
    for variable, flag in _LOAD_FLAGS.items():
        for token in env.get(variable, "").split():
            name, _, value = token.partition("=")
            paths = [v for v in value.split(",") if v.startswith(WORKSPACE_PREFIX)]
            if name == flag and paths:
                return variable, paths[-1]  # the macro's `cache` comes after the user's loads
    return None


def cache_problem(path: Path, full: bool) -> str | None:
    """What makes a committed results file unreadable, or None. Without `full` only a cheap
    scan for merge-conflict markers (the library parses the file itself); with it, the
    library's own reader when the target depends on it."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None  # not in the runfiles: the loader names the missing file itself
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    found = _CONFLICT_MARKER.search(data)
    if found:
        line = data.count(b"\n", 0, found.start()) + 1
        return f"line {line} holds an unresolved merge-conflict marker"
    if not full:
        return None
    try:
        from autotune_cache.errors import AutotuneCacheError
        from autotune_cache.resultsets.registry import load_any
    except ImportError:  # a target without @rules_autotune//:autotune_cache in its deps
        return None
    try:
        load_any(path)
    except AutotuneCacheError as e:
        return str(e).replace(str(path), "").lstrip(": ")
    return None


def check_committed_cache(env: MutableMapping[str, str]) -> str | None:
    """Checks the committed cache before the main runs. A load test whose file is broken gets
    the message that fails it (its workspace path and the regen command): on a CPU machine
    XLA would otherwise ignore the file and pass. A `.dump` does not load a broken file (its
    load flag is dropped, and said so), so that the regen replaces it."""
    found = committed_cache(env)
    if found is None:
        return None
    variable, flag_path = found
    relative = flag_path[len(WORKSPACE_PREFIX):]
    path = Path(env.get("TEST_SRCDIR", "")) / env.get("TEST_WORKSPACE", "") / relative
    dump = bool(env.get(DUMP_TARGET_ENV))
    problem = cache_problem(path, full=dump or variable == MACRO_XLA_FLAGS_ENV)
    if problem is None:
        return None
    hint = env.get(REGEN_HINT_ENV, "bazel run //<package>:<test>.regen")
    if dump:
        tokens = []
        for token in env[variable].split():
            name, _, value = token.partition("=")
            if name == _LOAD_FLAGS[variable]:
                kept = [v for v in value.split(",") if v != flag_path]
                token = f"{name}={','.join(kept)}" if kept else ""
            tokens.append(token)
        env[variable] = " ".join(t for t in tokens if t)
        print(f"autotune dump: the committed cache {relative} is broken ({problem}); this "
              f"dump does not load it, and `{hint}` replaces it", file=sys.stderr)
        return None
    return (f"autotuned test: the committed cache {relative} is not a readable results file: "
            f"{problem}. Regenerate it (the regen replaces a broken file):\n  {hint}")


def dump_note(env: Mapping[str, str]) -> tuple[str, bool]:
    """For a `.dump` (else ("", True)): where its results go and what writes them into the
    source tree, and whether it can run here (not under `bazel run`, which gives it no test
    outputs directory, so the results would go nowhere)."""
    target = env.get(DUMP_TARGET_ENV, "")
    if not target:
        return "", True
    regen = target.removesuffix(".dump") + ".regen"
    if not env.get("TEST_UNDECLARED_OUTPUTS_DIR"):
        return (f"autotune dump: {target} is a test, and `bazel run` gives it no test outputs "
                f"directory: its results would go nowhere. `bazel run {regen}` tunes and writes "
                "the committed cache in the source tree."), False
    package, _, name = target.lstrip("@").partition("//")[2].partition(":")
    return (f"autotune dump: the results go to bazel-testlogs/{package}/{name}/test.outputs/ "
            "(in outputs.zip there under `bazel test` before Bazel 8), not into the source tree; "
            f"`bazel run {regen}` runs this dump and writes them into the committed cache"), True


def uncalled_tests(source: str) -> list[str]:
    """The tests a main run as `__main__` defines and never runs: top-level `test*` functions
    and `Test*` classes (a pytest-style file) in a file with no `__name__` check and no
    top-level call of them or of a `main()` (unittest.main, pytest.main, absltest.main)."""
    tree = ast.parse(source)
    defined = [n.name for n in tree.body
               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
               and n.name.startswith("test")
               or isinstance(n, ast.ClassDef) and n.name.startswith("Test")]
    statements = [n for n in tree.body
                  if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    if not defined or any(isinstance(n, ast.If) and "__name__" in ast.unparse(n.test)
                          for n in statements):
        return []
    for node in ast.walk(ast.Module(body=statements, type_ignores=[])):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if called in defined or called == "main":
                return []
    return defined


def no_test_runs(user_main: Path) -> str | None:
    """The message that fails a `runner = "main"` test whose main defines tests and runs
    none (it would pass with an empty log), naming the runner to set."""
    try:
        names = uncalled_tests(user_main.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None  # Python reports a bad main itself
    if not names:
        return None
    target = os.environ.get("TEST_TARGET", str(user_main))
    return (f"autotuned test: {target}: its main {user_main.name} defines tests "
            f"({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}) and runs none of "
            "them: it runs as `__main__` (runner = \"main\", the default), so this test would "
            "pass having tested nothing. Set `runner = \"pytest\"` on the autotuned_py_test "
            "for a pytest-style file, or run the tests from an `if __name__ == \"__main__\":` "
            "block (unittest.main()).")
