"""The repository stays lean: size limits, the environment read in one place, one fork handler.

Issue 48's limits, checked here rather than promised: `bench/` holds at most 12 scripts,
`bench/results/` at most 30 files and docs/benchmarks.md at most 300 lines (older runs live in
git history); no module of autotune_cache/ is over 600 lines and no test file over 450; only
autotune_cache/foundation/env.py reads the process environment; and the package forks nowhere
itself and registers one fork handler (tests/core/test_layering.py checks the import graph).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "autotune_cache"
BENCH = ROOT / "bench"
TESTS = ROOT / "tests"

MAX_BENCH_SCRIPTS = 12
MAX_BENCH_RESULTS = 30
MAX_BENCHMARKS_DOC_LINES = 300
MAX_MODULE_LINES = 600
MAX_TEST_FILE_LINES = 450

# The one module that reads the environment (docs: its docstring). The `.pth` start-up hook is
# not a module and reads AUTOTUNE_FLAGS before anything is imported.
ENVIRONMENT_MODULE = PACKAGE / "foundation" / "env.py"
# Being rewritten by the engine work of issue 48: their sub-checks are apart from the rest's.
ENGINE = (PACKAGE / "triton", PACKAGE / "pytest_plugin.py")
# Where the one fork handler lives once the engine rewrite is done (issue 48: one engine object).
FORK_HANDLER_MODULE = PACKAGE / "triton" / "process.py"


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _inside(path: Path, roots: tuple[Path, ...]) -> bool:
    return any(path == root or root in path.parents for root in roots)


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "_pb2" not in p.name)


def bench_scripts() -> list[str]:
    """What counts as a script of bench/: every `*.py` file directly in it, and every folder
    directly in it but results/ (a script's package or data, such as suite_fake/)."""
    return sorted(p.name for p in BENCH.iterdir()
                  if (p.is_file() and p.suffix == ".py")
                  or (p.is_dir() and p.name not in ("results", "__pycache__")))


def test_bench_holds_at_most_12_scripts() -> None:
    scripts = bench_scripts()
    assert len(scripts) <= MAX_BENCH_SCRIPTS, (
        f"bench/ holds {len(scripts)} scripts (over {MAX_BENCH_SCRIPTS}): {scripts}; merge a "
        "helper into the script that uses it, or delete a benchmark docs/benchmarks.md no "
        "longer cites")


def test_bench_results_hold_at_most_30_files() -> None:
    files = sorted(_rel(p) for p in (BENCH / "results").rglob("*") if p.is_file())
    assert len(files) <= MAX_BENCH_RESULTS, (
        f"bench/results/ holds {len(files)} files (over {MAX_BENCH_RESULTS}); keep the latest "
        "run of each benchmark docs/benchmarks.md cites, and leave older runs to git history")


def test_the_benchmarks_page_is_at_most_300_lines() -> None:
    lines = len((ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_BENCHMARKS_DOC_LINES, (
        f"docs/benchmarks.md has {lines} lines (over {MAX_BENCHMARKS_DOC_LINES}): replace old "
        "figures by the latest ones instead of adding sections")


def _line_counts(paths: list[Path]) -> dict[str, int]:
    return {_rel(p): len(p.read_text(encoding="utf-8").splitlines()) for p in paths}


def test_no_module_is_over_600_lines() -> None:
    """A module past MAX_MODULE_LINES does more than one job: split it by role (issue 37)."""
    large = {p: n for p, n in _line_counts(MODULES).items() if n > MAX_MODULE_LINES}
    assert not large, f"{large} are over {MAX_MODULE_LINES} lines; split them by role"


def _large_test_files(inside: bool) -> dict[str, int]:
    files = [p for p in sorted(TESTS.rglob("*.py"))
             if _inside(p, (TESTS / "triton",)) == inside]
    return {p: n for p, n in _line_counts(files).items() if n > MAX_TEST_FILE_LINES}


def test_no_test_file_is_over_450_lines() -> None:
    large = _large_test_files(inside=False)
    assert not large, (f"{large} are over {MAX_TEST_FILE_LINES} lines; split each into "
                       "thematically named files (shared fixtures in conftest.py)")


def test_no_test_file_of_the_triton_engine_is_over_450_lines() -> None:
    large = _large_test_files(inside=True)
    assert not large, (f"{large} are over {MAX_TEST_FILE_LINES} lines; split each into "
                       "thematically named files (shared fixtures in conftest.py)")


def _environment_reads(path: Path) -> list[str]:
    """Where `path` reads the process environment itself: `os.environ`, `os.getenv` (and
    `putenv`/`unsetenv`), `from os import environ`, and `.get` on anything named `environ`
    (a mapping taken from env.environ() and read here is a read outside env.py too)."""
    reads = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        what = None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "os" \
                and node.attr in ("environ", "environb", "getenv", "putenv", "unsetenv"):
            what = f"os.{node.attr}"
        elif isinstance(node, ast.ImportFrom) and node.module == "os" \
                and any(a.name in ("environ", "environb", "getenv") for a in node.names):
            what = "from os import environ"
        elif isinstance(node, ast.Attribute) and node.attr == "get" and (
                (isinstance(node.value, ast.Name) and node.value.id == "environ")
                or (isinstance(node.value, ast.Attribute) and node.value.attr == "environ")):
            what = "environ.get"
        if what:
            reads.append(f"{_rel(path)}:{node.lineno} {what}")
    return reads


def _readers(engine: bool) -> list[str]:
    return [read for path in MODULES
            if path != ENVIRONMENT_MODULE and _inside(path, ENGINE) == engine
            for read in _environment_reads(path)]


def test_only_the_environment_module_reads_the_environment() -> None:
    reads = _readers(engine=False)
    assert not reads, (f"{reads} read the environment; add an accessor to "
                       "autotune_cache/foundation/env.py (its VARIABLES lists each variable)")


def test_the_triton_engine_reads_the_environment_only_through_env() -> None:
    reads = _readers(engine=True)
    assert not reads, (f"{reads} read the environment; add an accessor to "
                       "autotune_cache/foundation/env.py (its VARIABLES lists each variable)")


def _fork_sites() -> dict[str, list[str]]:
    """Every `os.fork` and `os.register_at_fork` of the package, by name."""
    sites: dict[str, list[str]] = {"fork": [], "register_at_fork": []}
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in sites \
                    and isinstance(node.value, ast.Name) and node.value.id == "os":
                sites[node.attr].append(_rel(path))
    return sites


def test_the_package_forks_nowhere_and_has_one_fork_handler() -> None:
    """Issue 48: nothing of ours forks the user's process, and one handler (the engine's, in
    triton/process.py) makes a forked child forget its parent's process-wide state."""
    sites = _fork_sites()
    assert sites["fork"] == [], f"os.fork in {sites['fork']}: the library starts no process"
    assert sites["register_at_fork"] == [_rel(FORK_HANDLER_MODULE)], (
        f"os.register_at_fork in {sites['register_at_fork']}: there is one fork handler, in "
        f"{_rel(FORK_HANDLER_MODULE)}")


# What the package may write into Triton (triton/hooks.py's docstring lists each write), and the
# one module that writes it.
TRITON_GLOBALS = {"jit_cache_hook", "autotune", "__init__", "run", "_bench", "compile"}
TRITON_WRITER = PACKAGE / "triton" / "hooks.py"


def _triton_writes(path: Path) -> list[str]:
    """Where `path` assigns one of TRITON_GLOBALS as an attribute of something not its own
    (`knobs.jit_cache_hook = …`, `module.autotune = …`; `self.run = …` is its own), or sets one
    with `setattr(x, "name", …)`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        targets: list[ast.AST] = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr in TRITON_GLOBALS and not (
                    isinstance(target.value, ast.Name) and target.value.id in ("self", "cls")):
                found.append(f"{_rel(path)}:{node.lineno}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "setattr" and len(node.args) >= 2:
            name = node.args[1]
            if not isinstance(name, ast.Constant) or name.value in TRITON_GLOBALS:
                found.append(f"{_rel(path)}:{node.lineno}")
    return found


def test_one_module_writes_triton_globals() -> None:
    """Issue 48: every write into Triton goes through triton/hooks.py (one jit_cache_hook
    dispatcher, the class watch, the routed decorator), so that what is written, and when, is
    read in one place. A setattr with a computed name counts as a write: name it there."""
    writes = {str(p): _triton_writes(p) for p in MODULES if p != TRITON_WRITER}
    assert not [w for found in writes.values() for w in found], (
        f"{[w for found in writes.values() for w in found]} write Triton globals; do it through "
        f"{_rel(TRITON_WRITER)}")
    assert _triton_writes(TRITON_WRITER), "the check found no write in hooks.py: it is broken"


MAX_TUNER_SIBLINGS = 8


def test_the_tuner_names_few_parts_of_the_engine() -> None:
    """Issue 48: the tuner (triton/autotuner.py) reaches everything process-wide through
    triton/engine.py; it imports at most MAX_TUNER_SIBLINGS modules of autotune_cache.triton."""
    tuner = PACKAGE / "triton" / "autotuner.py"
    siblings: set[str] = set()
    for node in ast.walk(ast.parse(tuner.read_text(encoding="utf-8"), str(tuner))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "autotune_cache.triton":
                siblings.update(f"{node.module}.{a.name}" for a in node.names)
            elif node.module.startswith("autotune_cache.triton."):
                siblings.add(node.module)
    assert len(siblings) <= MAX_TUNER_SIBLINGS, sorted(siblings)
