"""Entry point that autotuned_py_test puts in front of a test's own main, when needed.

Three jobs, chosen by the environment the macro sets:

- `<name>.dump` (AUTOTUNE_DUMP_TARGET set): a dump must see every kernel in one process, so it
  refuses to run as one of several shards. `--test_sharding_strategy=forced=K` overrides the
  `shard_count = 1` that the macro sets, so this is checked at run time.
- a sharded load test (TEST_TOTAL_SHARDS > 1): a plain `unittest` main gets Bazel's sharding
  protocol: it runs only this shard's share of the test cases (round-robin over sorted test
  ids) and touches TEST_SHARD_STATUS_FILE. A framework that shards by itself (absltest touches
  the status file and filters in its own loader before unittest collects the tests) is left
  alone, so cases are never split twice. With AUTOTUNE_SHARD_TEST_CASES=0 (the macro's
  `shard_test_cases = False`) nothing is split: the main shards its work itself.
  After the main, a shard fails with a clear message (exit 2) when nothing claimed the
  protocol (every shard would run everything; Bazel 7+ fails it anyway), or when the main
  split its work itself on top of the wrapper's split (most work would be skipped).

- `runner = "pytest"` (AUTOTUNE_TEST_RUNNER=pytest): the main is a pytest-style file. It is
  run with pytest (see `run_pytest`), with the macro's AUTOTUNE_FLAGS as the autotune_cache
  plugin's options; a sharded test gets every N-th test item by sorted node id.

- backend "xla" (RULES_AUTOTUNE_MACRO_XLA_FLAGS set): XLA reads XLA_FLAGS itself, so before the
  main runs XLA_FLAGS becomes the user's XLA_FLAGS (e.g. from `--test_env`) followed by the
  macro's flags; a flag both set differently fails the test naming both (`merge_xla_flags`).
  (AUTOTUNE_FLAGS needs nothing here: the library reads RULES_AUTOTUNE_MACRO_FLAGS itself.)

- `env = select(...)` (leading `--rules_autotune_env=NAME=VALUE` arguments): the macro could not
  add its variables to a select() env, so it passed them as arguments; they are set in the
  environment and removed from sys.argv before anything else (`apply_env_arguments`).

- `all_kernels = True` (`--autotune_all_kernels` in the flags), or a strict load, runner
  "main": every `triton.autotune` is routed through the cache, and Triton's own tuners are
  watched, from the main's own `import triton` on (`autotune_cache.startup.at_runner_start`:
  Triton is never imported before the main); pytest's plugin does it for runner "pytest".

Otherwise it runs the user's main (AUTOTUNE_TEST_MAIN, a runfiles path) as `__main__`.
Standard library only at import time: this file is also used when rules_autotune is an external
repository. The pytest branch imports pytest and the plugin, which `runner = "pytest"` targets
get through //rules/private:pytest_runner.

Why not pytest-bazel (PyPI): it delegates sharding to pytest-shard (last release 2020, hashes
node ids, so shards are unbalanced or empty) and passes its options even when that is not
installed. The argument list below follows pytest-bazel's; docs/pytest.md records the choice.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
import unittest
from collections.abc import Iterator, Mapping, MutableMapping
from pathlib import Path
from types import ModuleType

# Exit code for a test that cannot run as configured (distinct from a failing test's 1).
EXIT_BAD_SETUP = 2

# The variables the macro sets (rules/private/constants.bzl; tests/rules/test_constants.py
# checks that the names agree).
TEST_MAIN_ENV = "AUTOTUNE_TEST_MAIN"
DUMP_TARGET_ENV = "AUTOTUNE_DUMP_TARGET"
SHARD_TEST_CASES_ENV = "AUTOTUNE_SHARD_TEST_CASES"
RUNNER_ENV = "AUTOTUNE_TEST_RUNNER"
MACRO_FLAGS_ENV = "RULES_AUTOTUNE_MACRO_FLAGS"
MACRO_XLA_FLAGS_ENV = "RULES_AUTOTUNE_MACRO_XLA_FLAGS"
XLA_FLAGS_ENV = "XLA_FLAGS"
AUTOTUNE_FLAGS_ENV = "AUTOTUNE_FLAGS"
ENV_ARG_PREFIX = "--rules_autotune_env="
ALL_KERNELS_FLAG = "--autotune_all_kernels"
REQUIRE_COMPLETE_FLAG = "--require_complete_autotune_results"


def apply_env_arguments(argv: list[str], environ: MutableMapping[str, str]) -> list[str]:
    """Sets the leading `--rules_autotune_env=NAME=VALUE` arguments (the macro's variables of a
    target whose `env` is a select()) in `environ`; returns argv without them."""
    rest = list(argv[1:])
    while rest and rest[0].startswith(ENV_ARG_PREFIX):
        name, separator, value = rest.pop(0)[len(ENV_ARG_PREFIX):].partition("=")
        if not name or not separator:
            raise SystemExit(f"autotuned test: malformed {ENV_ARG_PREFIX}NAME=VALUE argument "
                             f"{name!r}; autotuned_py_test writes these, do not pass them.")
        environ[name] = value
    return [argv[0], *rest]


def wants_flag(env: Mapping[str, str], flag: str) -> bool:
    """Whether the flags (AUTOTUNE_FLAGS, then the macro's) switch the boolean `flag` on."""
    for variable in (AUTOTUNE_FLAGS_ENV, MACRO_FLAGS_ENV):
        for token in env.get(variable, "").split():
            name, _, value = token.partition("=")
            if name == flag:
                from autotune_cache.foundation.env import parse_bool  # the one bool parser

                return value == "" or parse_bool(value) is True
    return False


def wants_all_kernels(env: Mapping[str, str]) -> bool:
    """Whether the flags (AUTOTUNE_FLAGS, then the macro's) say --autotune_all_kernels."""
    return wants_flag(env, ALL_KERNELS_FLAG)


def merge_xla_flags(env: Mapping[str, str]) -> str | None:
    """XLA_FLAGS for the test: the user's XLA_FLAGS, then the macro's flags
    (RULES_AUTOTUNE_MACRO_XLA_FLAGS); None when the macro set none.

    `bazel test --test_env=XLA_FLAGS=...` would otherwise replace the macro's flags, and the
    test would silently stop loading its committed cache. A flag that both set to different
    values raises SystemExit naming both, since XLA would silently keep only one of them.
    """
    macro = env.get(MACRO_XLA_FLAGS_ENV)
    if macro is None:
        return None
    user = env.get(XLA_FLAGS_ENV, "")
    macro_tokens = {token.split("=", 1)[0]: token for token in macro.split()}
    for token in user.split():
        theirs = macro_tokens.get(token.split("=", 1)[0])
        if theirs is not None and theirs != token:
            raise SystemExit(
                f"autotuned test: {token.split('=', 1)[0]} is set twice, differently: XLA_FLAGS "
                f"has {token!r} (from the environment, e.g. bazel test --test_env=XLA_FLAGS=...) "
                f"and the autotuned_py_test target has {theirs!r} ({MACRO_XLA_FLAGS_ENV}, from "
                "its cache, require_complete, xla_per_fusion_cache_dir and env attributes, or "
                "its .dump mode). XLA would keep only one: drop the flag from XLA_FLAGS, or "
                "change the target's attributes.")
    return " ".join(part for part in (user.strip(), macro.strip()) if part)


def _total_shards(env: Mapping[str, str]) -> int:
    """TEST_TOTAL_SHARDS as a number (1 when unset)."""
    raw = env.get("TEST_TOTAL_SHARDS", "") or "1"
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"autotuned test: TEST_TOTAL_SHARDS={raw!r} is not a number.") from None


def sharding_error(env: Mapping[str, str]) -> str | None:
    """The message to print when a `.dump` target runs as one of several shards, else None."""
    target = env.get(DUMP_TARGET_ENV)
    total = _total_shards(env)
    if not target or total <= 1:
        return None
    return (
        f"autotune dump: {target} is running as shard {env.get('TEST_SHARD_INDEX', '?')} of "
        f"{total}, but a dump must see every kernel in one process or the written cache would "
        "be incomplete. Sharding was forced from the command line (for example "
        "--test_sharding_strategy=forced=K); rerun without it, or with "
        "--test_sharding_strategy=disabled."
    )


def resolve_main(env: Mapping[str, str]) -> Path:
    """The user's test main from AUTOTUNE_TEST_MAIN (a `$(rootpath)`), checked to exist."""
    raw = env.get(TEST_MAIN_ENV, "")
    if not raw:
        raise SystemExit(
            "autotuned test: AUTOTUNE_TEST_MAIN is not set. autotuned_py_test sets it; run the "
            "target through Bazel (bazel test //pkg:name)."
        )
    candidates = [Path(raw)]
    for root in (env.get("TEST_SRCDIR"), env.get("RUNFILES_DIR")):
        if root and env.get("TEST_WORKSPACE"):
            candidates.append(Path(root) / env["TEST_WORKSPACE"] / raw)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise SystemExit(
        f"autotuned test: the test main {raw!r} (AUTOTUNE_TEST_MAIN) is not in the runfiles "
        f"(looked at {', '.join(str(c) for c in candidates)}). Set `main` on the "
        "autotuned_py_test to a file listed in its srcs."
    )


def _flatten(suite: unittest.TestSuite) -> Iterator[unittest.TestCase]:
    """Every test case in a (nested) suite."""
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _flatten(item)
        else:
            yield item


def shard_suite(suite: unittest.TestSuite, index: int, total: int) -> unittest.TestSuite:
    """This shard's share of `suite`: every `total`-th case by sorted test id, from `index`."""
    cases = sorted(_flatten(suite), key=lambda case: case.id())
    return unittest.TestSuite(cases[index::total])


class Sharding:
    """One shard of a sharded load test, and what happened to the sharding protocol in it.

    (A plain class, not a dataclass: this file is also loaded outside sys.modules.)
    """

    def __init__(self, index: int, total: int, status_file: Path | None,
                 split_cases: bool = True) -> None:
        self.index = index
        self.total = total
        self.status_file = status_file
        # Whether the wrapper may split unittest test cases (AUTOTUNE_SHARD_TEST_CASES, from
        # the macro's `shard_test_cases`).
        self.split_cases = split_cases
        # Set while running: the wrapper split the cases itself / found them already split by
        # the test framework (absltest shards in its own loader).
        self.split_here = False
        self.split_by_framework = False
        # How many test cases the wrapper's split left this shard (None before splitting).
        self.cases_here: int | None = None

    @property
    def touched(self) -> bool:
        """Whether TEST_SHARD_STATUS_FILE exists (someone claimed sharding support)."""
        return self.status_file is not None and self.status_file.exists()


def sharding_from_env(env: Mapping[str, str]) -> Sharding | None:
    """This process's shard when the test is sharded (TEST_TOTAL_SHARDS > 1), else None."""
    total = _total_shards(env)
    if total <= 1:
        return None
    raw_index = env.get("TEST_SHARD_INDEX", "0") or "0"
    try:
        index = int(raw_index)
    except ValueError:
        raise SystemExit(
            f"autotuned test: TEST_SHARD_INDEX={raw_index!r} is not a number.") from None
    status = env.get("TEST_SHARD_STATUS_FILE")
    return Sharding(
        index=index,
        total=total,
        status_file=Path(status) if status else None,
        split_cases=env.get(SHARD_TEST_CASES_ENV, "1") != "0",
    )


def _loader_is_sharded(loader: object) -> bool:
    """Whether a test loader already filters test names per shard. absltest's loader does: it
    replaces getTestCaseNames on the loader *instance* with its shard filter."""
    return "getTestCaseNames" in getattr(loader, "__dict__", {})


def install_unittest_sharding(sharding: Sharding) -> None:
    """Makes unittest.main() run only this shard's test cases, unless the test framework has
    already sharded them (absltest touches TEST_SHARD_STATUS_FILE and filters in its loader
    before unittest.TestProgram collects the tests: splitting again would skip most cases)."""
    original = unittest.TestProgram.createTests

    def create_sharded_tests(self: unittest.TestProgram, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        if sharding.split_here or sharding.split_by_framework:
            return  # a second unittest.main() in the same process: decided already
        if sharding.touched or _loader_is_sharded(getattr(self, "testLoader", None)):
            sharding.split_by_framework = True
            print(f"autotuned test: shard {sharding.index + 1} of {sharding.total}: the test "
                  "framework shards the test cases itself; running its selection unchanged",
                  file=sys.stderr)
            return
        self.test = shard_suite(self.test, sharding.index, sharding.total)
        sharding.split_here = True
        sharding.cases_here = self.test.countTestCases()
        print(f"autotuned test: shard {sharding.index + 1} of {sharding.total} runs "
              f"{self.test.countTestCases()} test case(s)", file=sys.stderr)

    unittest.TestProgram.createTests = create_sharded_tests  # type: ignore[method-assign]


def finish_sharding(sharding: Sharding, target: str) -> str | None:
    """After the user's main: acknowledges the sharding protocol for the wrapper's own split, or
    returns the message to fail the shard with when the shard did not (or did twice) split its
    work."""
    touched = sharding.touched
    if sharding.split_here and touched:
        return (
            f"autotuned test: {target} is sharded (shard {sharding.index + 1} of "
            f"{sharding.total}) and rules_autotune_test_wrapper.py split its unittest test cases, "
            "but the test also splits its work itself (it touched TEST_SHARD_STATUS_FILE while "
            "its cases ran, e.g. by filtering on TEST_SHARD_INDEX): shards would skip most of "
            "the work. Set `shard_test_cases = False` on the autotuned_py_test so that only the "
            "test splits its work."
        )
    if sharding.split_here:
        if sharding.status_file is not None:
            sharding.status_file.touch()
        return None
    if touched or sharding.status_file is None:
        # The main (or its framework) implements the protocol; or Bazel did not ask for the
        # acknowledgement, so there is nothing to check.
        return None
    return (
        f"autotuned test: {target} is sharded (shard {sharding.index + 1} of "
        f"{sharding.total}), but its main did not implement Bazel's test sharding protocol: "
        "it did not go through unittest.main() / absltest.main() and never touched "
        "TEST_SHARD_STATUS_FILE, so every shard would run the whole test (Bazel 7+ fails "
        "such shards: --incompatible_check_sharding_support). Remove shard_count, run the "
        "tests with unittest.main() or absltest.main(), or split the work by "
        "TEST_SHARD_INDEX / TEST_TOTAL_SHARDS and touch TEST_SHARD_STATUS_FILE (then set "
        "`shard_test_cases = False`)."
    )


# unittest's exit status when no test ran (Python >= 3.12).
EXIT_NO_TESTS_RAN = 5


def empty_shard_is_success(sharding: Sharding | None, exit_request: SystemExit | None) -> bool:
    """Whether unittest's "no tests ran" exit only means the wrapper gave this shard no case
    (more shards than test cases): that shard passed, it had nothing to do."""
    return (sharding is not None and sharding.split_here and sharding.cases_here == 0
            and exit_request is not None and exit_request.code == EXIT_NO_TESTS_RAN)


def script_path_entry(user_main: Path) -> str | None:
    """The sys.path[0] Python would give the user's main run as a script, or None to leave
    sys.path alone.

    None under safe-path mode (-P / PYTHONSAFEPATH, rules_python's default): the script's
    directory is then not importable. Otherwise the main's directory *inside the runfiles*,
    not resolved through the symlink into the source tree, so that undeclared sibling modules
    stay invisible as they are to the unwrapped test.
    """
    if getattr(sys.flags, "safe_path", False):
        return None
    return os.path.abspath(user_main.parent)


# ----- runner = "pytest" ------------------------------------------------------------------------

# pytest's exit status when it collected (or kept) no test item.
PYTEST_NO_TESTS_COLLECTED = 5


def pytest_args(user_main: Path, env: Mapping[str, str], extra: list[str],
                plugin_args: list[str]) -> list[str]:
    """pytest's command line under Bazel: the main, the plugin's options (from AUTOTUNE_FLAGS),
    Bazel's test environment (pytest-bazel's list: JUnit XML to XML_OUTPUT_FILE, temp dirs
    under TEST_TMPDIR, no .pytest_cache in the runfiles, --test_filter as -k, fail-fast), then
    the target's `args` (`extra`), which may override any of them."""
    args = [str(user_main), "-p", "autotune_cache.pytest_plugin", *plugin_args,
            "-p", "no:cacheprovider", "-o", "console_output_style=classic"]
    workspace = Path(env.get("TEST_SRCDIR", "")) / env.get("TEST_WORKSPACE", "")
    if env.get("TEST_SRCDIR") and env.get("TEST_WORKSPACE") and workspace.is_dir():
        # Node ids relative to the workspace (pkg/t_test.py::test_a), whatever ini file pytest
        # finds above the runfiles.
        args.append(f"--rootdir={workspace}")
    if env.get("XML_OUTPUT_FILE"):
        args.append(f"--junitxml={env['XML_OUTPUT_FILE']}")
    if env.get("TEST_TMPDIR"):
        args.append(f"--basetemp={Path(env['TEST_TMPDIR']) / 'pytest'}")
    if env.get("TESTBRIDGE_TEST_ONLY"):
        args += ["-k", env["TESTBRIDGE_TEST_ONLY"]]
    if env.get("TESTBRIDGE_TEST_RUNNER_FAIL_FAST", "0") not in ("", "0"):
        args.append("--exitfirst")
    return args + extra


def shard_items(items: list, index: int, total: int) -> tuple[list, list]:
    """This shard's share of pytest's collected items, and the rest.

    Items are sorted by node id and dealt round-robin, so every item runs in exactly one shard
    and the shards differ by at most one item. The kept items stay in pytest's own order.
    """
    ordered = sorted(items, key=lambda item: item.nodeid)
    mine = {id(item) for item in ordered[index::total]}
    return ([item for item in items if id(item) in mine],
            [item for item in items if id(item) not in mine])


def run_pytest(user_main: Path, sharding: Sharding | None) -> int:
    """Runs the pytest-style main with pytest; its exit status (an empty shard's 5 is 0)."""
    import pytest  # from //rules/private:pytest_runner

    from autotune_cache.config.flags import ENV_VAR, flags_text
    from autotune_cache.errors import AutotuneCacheError
    from autotune_cache.pytest_plugin import args_from_flags

    try:
        # The plugin reads AUTOTUNE_FLAGS only: it gets the user's flags and the macro's, in one.
        text = flags_text(os.environ)
        plugin_args = args_from_flags(text, os.environ)
    except AutotuneCacheError as e:
        print(f"autotuned test: AUTOTUNE_FLAGS: {e}", file=sys.stderr)
        return EXIT_BAD_SETUP
    os.environ[ENV_VAR] = text
    os.environ.pop(MACRO_FLAGS_ENV, None)
    # `-p autotune_cache.pytest_plugin` below imports the plugin afresh, so that pytest can
    # rewrite its asserts as for any plugin (it warns about a module imported before it).
    sys.modules.pop("autotune_cache.pytest_plugin", None)

    class ShardItems:
        """Keeps this shard's items; runs after -k / -m (--test_filter) have deselected, so a
        filtered selection is split evenly too."""

        @pytest.hookimpl(trylast=True)
        def pytest_collection_modifyitems(self, config: pytest.Config,
                                          items: list[pytest.Item]) -> None:
            assert sharding is not None
            mine, others = shard_items(items, sharding.index, sharding.total)
            items[:] = mine
            if others:
                config.hook.pytest_deselected(items=others)
            sharding.split_here = True
            sharding.cases_here = len(mine)
            print(f"autotuned test: shard {sharding.index + 1} of {sharding.total} runs "
                  f"{len(mine)} of {len(mine) + len(others)} test item(s)", file=sys.stderr)

    plugins: list[object] = []
    if sharding is not None and sharding.split_cases:
        # The wrapper claims the protocol up front, so a collection error is reported as
        # itself, not as a shard that ignored sharding.
        if sharding.status_file is not None:
            sharding.status_file.touch()
        plugins.append(ShardItems())
    args = pytest_args(user_main, os.environ, sys.argv[1:], plugin_args)
    print("autotuned test: pytest " + " ".join(args), file=sys.stderr)
    code = int(pytest.main(args, plugins=plugins))
    if (code == PYTEST_NO_TESTS_COLLECTED and sharding is not None and sharding.split_here
            and sharding.cases_here == 0):
        print("autotuned test: this shard has no test items (shard_count is larger than the "
              "number of items); nothing to run", file=sys.stderr)
        return 0
    return code


def _load_checks() -> ModuleType:
    """rules_autotune_test_checks.py: from //rules/private:test_checks (`imports = ["."]`),
    else the file beside this one (a wrapper run outside Bazel, or in safe-path mode)."""
    try:
        import rules_autotune_test_checks

        return rules_autotune_test_checks
    except ImportError:
        path = Path(__file__).with_name("rules_autotune_test_checks.py")
        spec = importlib.util.spec_from_file_location("rules_autotune_test_checks", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


def main() -> None:
    """Checks or installs sharding, then runs the user's main as py_test would have (or with
    pytest, for `runner = "pytest"`)."""
    sys.argv = apply_env_arguments(sys.argv, os.environ)
    checks = _load_checks()
    check_committed_cache, dump_note, no_test_runs = (
        checks.check_committed_cache, checks.dump_note, checks.no_test_runs)
    problem = sharding_error(os.environ)
    note, can_run = dump_note(os.environ)
    if problem or not can_run:
        print(problem or note, file=sys.stderr)
        sys.exit(EXIT_BAD_SETUP)
    if note:
        print(note, file=sys.stderr)
    problem = check_committed_cache(os.environ)
    if problem:
        print(problem, file=sys.stderr)
        sys.exit(1)
    xla_flags = merge_xla_flags(os.environ)
    if xla_flags is not None:
        os.environ[XLA_FLAGS_ENV] = xla_flags
        del os.environ[MACRO_XLA_FLAGS_ENV]
    user_main = resolve_main(os.environ)
    sharding = sharding_from_env(os.environ)
    entry = script_path_entry(user_main)
    if entry is not None:
        # Python put this wrapper's directory first; the user's main gets its own instead.
        sys.path[0] = entry
    if os.environ.get(RUNNER_ENV) == "pytest":
        if sharding is not None and sharding.status_file is not None:
            sharding.status_file.unlink(missing_ok=True)
        code = run_pytest(user_main, sharding)
        if (sharding is not None and not sharding.split_cases and not sharding.touched
                and sharding.status_file is not None):
            # shard_test_cases = False: the tests split their work themselves, and say so.
            target = os.environ.get("TEST_TARGET", str(user_main))
            print(f"autotuned test: {target} is sharded (shard {sharding.index + 1} of "
                  f"{sharding.total}) with runner = \"pytest\" and shard_test_cases = False, "
                  "but no test touched TEST_SHARD_STATUS_FILE, so every shard would run every "
                  "item. Remove shard_test_cases = False (the wrapper then deals pytest's items "
                  "to the shards), or split the work by TEST_SHARD_INDEX / TEST_TOTAL_SHARDS "
                  "and touch TEST_SHARD_STATUS_FILE.", file=sys.stderr)
            sys.exit(EXIT_BAD_SETUP)
        sys.exit(code)
    problem = no_test_runs(user_main)
    if problem:
        print(problem, file=sys.stderr)
        sys.exit(EXIT_BAD_SETUP)
    if sharding is not None:
        # Start from a clean slate, so that the file existing later means this process claimed
        # the protocol (absltest touches it before collecting the tests).
        if sharding.status_file is not None:
            sharding.status_file.unlink(missing_ok=True)
        if sharding.split_cases:
            install_unittest_sharding(sharding)
    # (A strict test whose deps lack the library cannot tune through it: nothing to watch.)
    strict = importlib.util.find_spec("autotune_cache") is not None and wants_flag(
        os.environ, REQUIRE_COMPLETE_FLAG)
    if wants_all_kernels(os.environ) or strict:
        # The switch (all_kernels = True) and the watch on Triton's own tuners (a strict load:
        # a tuning there fails the test instead of passing unseen), installed right after the
        # main's own `import triton`, before it imports the libraries whose kernels they route;
        # never by importing Triton here, which would build Triton's language helpers before
        # the main sets TRITON_INTERPRET (autotune_cache/startup.py). A bad flag fails the test
        # here.
        from autotune_cache import startup
        from autotune_cache.config.flags import settings_from_env

        settings_from_env()
        startup.at_runner_start("the autotuned_py_test wrapper")
    # The test's log shows the cache's one-line summary (hits, misses, what bypassed it).
    os.environ.setdefault("AUTOTUNE_VERBOSE", "1")
    sys.argv[0] = str(user_main)
    exit_request: SystemExit | None = None
    try:
        runpy.run_path(str(user_main), run_name="__main__")
    except SystemExit as e:
        exit_request = e
    except BaseException:
        # A crash: still acknowledge the wrapper's split, so Bazel reports the crash itself.
        if sharding is not None and sharding.split_here and sharding.status_file is not None:
            sharding.status_file.touch()
        raise
    if sharding is not None:
        target = os.environ.get("TEST_TARGET", str(user_main))
        problem = finish_sharding(sharding, target)
        if problem:
            print(problem, file=sys.stderr)
            sys.exit(EXIT_BAD_SETUP)
    if empty_shard_is_success(sharding, exit_request):
        print("autotuned test: this shard has no test cases (shard_count is larger than the "
              "number of test cases); nothing to run", file=sys.stderr)
        sys.exit(0)
    if exit_request is not None:
        raise exit_request


if __name__ == "__main__":
    main()
