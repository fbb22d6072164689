"""Run code right after the program's own first `import triton`, never importing Triton first.

Triton reads settings at its import (`TRITON_INTERPRET`, `TRITON_DEBUG`), and programs set them
in code before they import it. So the package asks for what it needs of Triton through
`when_triton_imported(action)`:

- Triton already imported: the action runs now.
- Otherwise it runs right after Triton's own module has executed: a one-shot finder on
  `sys.meta_path` hands out Triton's spec as the other finders give it, with a loader that runs
  Triton's loader and then the pending actions, and removes itself. Triton's module keeps its
  own loader (`__loader__`, `__spec__.loader`).

`engage(settings)`: what a configured cache asks of the engines above it (cache.py calls it for
every cache it installs; autotune_cache/__init__.py points it at startup.engage).
`compile_at_start(settings)`: what a run that will load files asks before it configures a cache
(the pytest plugin, before conftest.py files run; startup.compile_at_start). They sit here so
that the cache and the plugin, lower layers, name no engine.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

_lock = threading.Lock()
_pending: list[Callable[[], None]] = []
_finder: _AfterTritonImport | None = None


def triton_imported() -> bool:
    """Whether Triton's package has finished importing in this process."""
    module = sys.modules.get("triton")
    return module is not None and not still_importing(module)


def still_importing(module: ModuleType | None) -> bool:
    """Whether `module` is being imported now (its body still running: what it defines further
    down does not exist yet)."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def triton_installed() -> bool:
    """Whether Triton is imported, or importable (looked up, not imported)."""
    if "triton" in sys.modules:
        return True
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        return False


def when_triton_imported(action: Callable[[], None]) -> None:
    """Run `action` now if Triton is imported, else right after the program imports it."""
    global _finder
    with _lock:
        if not triton_imported():
            _pending.append(action)
            if _finder is None:
                _finder = _AfterTritonImport()
                sys.meta_path.insert(0, _finder)
            return
    action()


class _AfterTritonImport(importlib.abc.MetaPathFinder):
    """A one-shot finder: the spec of `triton` as the other finders give it, with a loader that
    runs the pending actions once Triton's own module has executed."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "triton":
            return None
        _remove_finder()
        spec = importlib.util.find_spec("triton")
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader)
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # Triton's own loader again, for whoever reads module.__loader__ / __spec__.loader.
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        _run_pending()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


def _remove_finder() -> None:
    global _finder
    with _lock:
        if _finder is not None and _finder in sys.meta_path:
            sys.meta_path.remove(_finder)
        _finder = None


def _run_pending() -> None:
    with _lock:
        actions = list(_pending)
        _pending.clear()
    for action in actions:
        try:
            action()
        except Exception as e:  # noqa: BLE001 - the program's `import triton` must go on
            first = (str(e).splitlines() or [""])[0]
            print(f"autotune_cache: after `import triton`: {type(e).__name__}: {first}",
                  file=sys.stderr)


_engage: Callable[[Any], None] | None = None
_at_start: Callable[[Any], None] | None = None


def set_engage(action: Callable[[Any], None],
               at_start: Callable[[Any], None] | None = None) -> None:
    """Who acts on a configured cache's settings, and on a configuration known before it is
    configured (autotune_cache/__init__.py: startup.engage, startup.compile_at_start)."""
    global _engage, _at_start
    _engage = action
    _at_start = at_start


def compile_at_start(settings: Any) -> None:
    """Tell the engines the files a run will load, before its cache is configured (the pytest
    plugin, before conftest.py files import the libraries): triton/early.py."""
    if _at_start is not None:
        _at_start(settings)


def engage(settings: Any) -> None:
    """Tell the engines about a configured cache's settings (cache.py)."""
    if _engage is not None:
        _engage(settings)
