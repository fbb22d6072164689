"""The package's import graph: one-way layers and no cycle (tests/core/test_structure.py checks
the sizes, the environment read in one place and the fork handler).

docs/architecture.md shows the same order. The graph is read from the source (every import,
including those inside functions, except `if TYPE_CHECKING:` blocks), and every module is also
imported on its own in a fresh interpreter, where a cycle would fail with a partially
initialised module.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "autotune_cache"

# Lowest layer first; a module may import only from its own layer or lower ones, and within a
# layer only without a cycle. A module's layer is that of its longest matching prefix. The
# internal modules of layers 0 to 2 live in one folder per layer (foundation/, config/, store/);
# the other layers are public modules and subpackages (PUBLIC_ROOT below).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("autotune_cache.errors", "autotune_cache.proto", "autotune_cache.foundation",
     "autotune_cache.version"),
    ("autotune_cache.config", "autotune_cache.formats"),
    ("autotune_cache.store",),
    ("autotune_cache.tiers", "autotune_cache.resultsets.base", "autotune_cache.resultsets.ours"),
    ("autotune_cache.xla",),
    ("autotune_cache.resultsets.registry", "autotune_cache.cache"),
    ("autotune_cache.report",),
    ("autotune_cache.cli", "autotune_cache.triton", "autotune_cache.pytest",
     "autotune_cache.pytest_plugin"),
    ("autotune_cache", "autotune_cache.__main__", "autotune_cache.startup"),
)

# What sits at the package root: the public surface (autotune_cache/__init__.py's exports and the
# modules and subpackages users, docs and entry points name), whatever its layer. Every other
# module lives in the folder of its layer (docs/decisions/0023-layer-folders.md).
PUBLIC_ROOT = {
    "__init__", "__main__", "errors", "formats", "cache", "cli", "pytest_plugin", "pytest",
    "startup", "proto", "tiers", "resultsets", "xla", "report", "triton", "version",
}
LAYER_FOLDERS = {"foundation": 0, "config": 1, "store": 2}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "_pb2" not in p.name}


def _layer(module: str) -> int:
    best, rank = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
    assert rank >= 0, f"{module} is in no layer; add it to LAYERS (and docs/architecture.md)"
    return rank


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _imports(module: str, path: Path, *, type_only: bool = False) -> set[str]:
    """The package modules `module` imports at run time (and, with `type_only`, in its
    `if TYPE_CHECKING:` blocks too)."""
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child) and not type_only:
                continue
            if isinstance(child, ast.Import):
                out.update(a.name for a in child.names if a.name.startswith("autotune_cache"))
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module \
                    and child.module.startswith("autotune_cache"):
                for alias in child.names:
                    sub = f"{child.module}.{alias.name}"
                    out.add(sub if sub in MODULES else child.module)
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    out.discard(module)
    return {m for m in out if m in MODULES and not module.startswith(m + ".")}


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}
# With the imports only a type checker follows: a cycle there is still two modules that cannot be
# read, moved or tested one without the other (issue 37).
FULL_GRAPH = {m: _imports(m, p, type_only=True) for m, p in MODULES.items()}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_the_layers(module: str) -> None:
    upward = [m for m in GRAPH[module] if _layer(m) > _layer(module)]
    assert not upward, f"{module} imports the higher layer(s) {upward}"


def test_the_root_holds_only_the_public_surface_and_the_layer_folders() -> None:
    entries = {p.stem for p in PACKAGE.glob("*.py")}
    entries |= {p.name for p in PACKAGE.iterdir() if p.is_dir() and any(p.rglob("*.py"))}
    stray = sorted(entries - PUBLIC_ROOT - set(LAYER_FOLDERS))
    folders = ", ".join(f"{f}/" for f in LAYER_FOLDERS)
    assert not stray, (f"autotune_cache/ holds {stray}: move each into the folder of its layer "
                       f"({folders}), or, if it is public, add it to PUBLIC_ROOT and say so in "
                       "docs/architecture.md")
    assert not sorted(PUBLIC_ROOT - entries), "PUBLIC_ROOT names what autotune_cache/ lacks"


@pytest.mark.parametrize("folder", sorted(LAYER_FOLDERS))
def test_a_layer_folder_is_one_layer(folder: str) -> None:
    """LAYERS names the folder, not its modules: every module in it has the folder's layer."""
    package = f"autotune_cache.{folder}"
    assert package in LAYERS[LAYER_FOLDERS[folder]], f"LAYERS must name {package} itself"
    inside = [m for m in MODULES if m == package or m.startswith(package + ".")]
    assert len(inside) > 1, f"{package} holds no module"
    elsewhere = [m for m in inside if _layer(m) != LAYER_FOLDERS[folder]]
    assert not elsewhere, f"{elsewhere} sit in {folder}/ but LAYERS gives them another layer"


@pytest.mark.parametrize("graph", [GRAPH, FULL_GRAPH], ids=["run time", "with type-only"])
def test_no_import_cycle(graph: dict[str, set[str]]) -> None:
    done: set[str] = set()

    def walk(module: str, stack: list[str]) -> None:
        if module in stack:
            raise AssertionError("import cycle: " + " -> ".join([*stack[stack.index(module):],
                                                                 module]))
        if module in done:
            return
        for dep in sorted(graph[module]):
            # A package's __init__ is imported before its submodules; edges to the package a
            # module lives in are not cycles.
            if not module.startswith(dep + "."):
                walk(dep, [*stack, module])
        done.add(module)

    for module in sorted(graph):
        walk(module, [])


THREAD_MAKERS = {"Thread", "ThreadPoolExecutor", "ProcessPoolExecutor"}


def test_the_triton_engine_makes_its_threads_in_one_place() -> None:
    """One compile scheduler (triton/scheduler.py) runs every background compile: no other
    module of autotune_cache/triton builds a thread or a pool (docs/architecture.md)."""
    sites = []
    for module, path in MODULES.items():
        if not module.startswith("autotune_cache.triton"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in THREAD_MAKERS:
                    sites.append(f"{module}:{node.lineno}")
    assert [s.rsplit(":", 1)[0] for s in sites] == ["autotune_cache.triton.scheduler"], sites


def test_every_module_imports_alone_in_a_fresh_interpreter() -> None:
    script = (
        "import subprocess, sys\n"
        "bad = []\n"
        "for m in sys.argv[1:]:\n"
        "    r = subprocess.run([sys.executable, '-c', f'import {m}'], capture_output=True,"
        " text=True)\n"
        "    if r.returncode:\n"
        "        bad.append(f'{m}: {r.stderr.strip().splitlines()[-1]}')\n"
        "print('\\n'.join(bad))\n"
        "sys.exit(1 if bad else 0)\n"
    )
    modules = [m for m in sorted(MODULES) if m != "autotune_cache.__main__"]
    result = subprocess.run([sys.executable, "-c", script, *modules], capture_output=True,
                            text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


# Only the cache and the tiers themselves touch a Cache's tiers; backends (triton/, xla/) and the
# front ends go through Cache's methods (docs/decisions/0020-tiers-deal-in-keys-and-entries.md).
TIER_OWNERS = ("autotune_cache.cache", "autotune_cache.tiers")


def test_only_the_cache_touches_its_tiers() -> None:
    reaching = set()
    for module, path in MODULES.items():
        if module.startswith(TIER_OWNERS):
            continue
        tree = ast.parse(path.read_text(), str(path))
        if any(isinstance(node, ast.Attribute) and node.attr in ("memory", "tiers")
               for node in ast.walk(tree)):
            reaching.add(module)
    assert not reaching, (f"{sorted(reaching)} reach into a Cache's `memory` or `tiers`; add a "
                          "Cache method instead (as Cache.loaded_entries)")
