"""`install()`: route every `triton.autotune` in the process through the results cache.

Kernels a user writes change one import (`autotune_cache.triton.autotune`); kernels of installed
libraries (Liger-Kernel, FlagGems, ...) are reached by this switch instead. While installed, each
spelling of Triton's decorator (`triton.autotune`, `triton.runtime.autotune`,
`triton.runtime.autotuner.autotune`, and `from triton import autotune` executed afterwards) is
`routed_autotune`: our decorator, whose kernels are keyed by their module-qualified name
(`liger_kernel.ops.rms_norm._rms_norm_fwd_kernel`), so two libraries' `_fwd_kernel`s never
share entries. Kernels decorated with `autotune_cache.triton.autotune` keep their plain name, so
committed caches of the user's own kernels stay valid.

Kernels that a library decorated before the switch (real Triton `Autotuner` objects) are not
adopted, only named in an UnroutedKernelsWarning with the fix
(docs/decisions/0018-no-adoption-of-built-tuners.md). The same places are scanned for modules
that imported Triton's decorator itself by name before the switch (`from triton import
autotune`): kernels they decorate later stay on Triton's autotuner too.

`cache_results=True` (or TRITON_CACHE_AUTOTUNING=1), with which a library asked Triton to keep
its results on disk, is honoured for routed kernels as for any tuner of ours: unless the flags
give the process a persistent tier of their own, the process cache gains the directory tier
`<Triton's cache dir>/autotune_cache` (engine.honour_cache_results).

Three ways to switch it on: `install()` / `uninstall()` / `with installed():` from Python;
`AUTOTUNE_FLAGS=--autotune_all_kernels` in any process (and its subprocesses), installed at
start-up by the package's `autotune_cache_all_kernels.pth` or at the first import of
autotune_cache where that hook cannot run (autotune_cache/startup.py); and
runners (the pytest plugin, a Bazel test's main) that call `install_from_settings()` with the
Settings they resolved.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from triton.runtime import autotuner as _triton_autotuner

from autotune_cache.config.flags import Settings
from autotune_cache.foundation.urls import docs_url
from autotune_cache.triton import classroute, hooks
from autotune_cache.triton.autotuner import Autotuner, autotune
from autotune_cache.triton.fingerprint import python_function, qualified_name

log = logging.getLogger(__name__)

FLAG = "--autotune_all_kernels"
FIX = (f"import autotune_cache.triton and call install() before importing them, or set "
       f"AUTOTUNE_FLAGS={FLAG} so that it is installed at interpreter start-up "
       f"({docs_url('triton.md')}#third-party-kernels-install-and---autotune_all_kernels)")

# The modules whose `autotune` attribute is Triton's decorator in Triton 3.6 to 3.9; any other
# triton.* module holding the same function is patched too (see _triton_holders).
SPELLINGS = ("triton.runtime.autotuner", "triton.runtime", "triton")

# Triton's own decorator, as triton.runtime.autotuner defines it (captured once, at import).
TRITON_AUTOTUNE: Callable[..., Any] = _triton_autotuner.autotune

# Modules whose `autotune` is Triton's decorator by design, not a library's early import.
_OWN_PREFIXES = ("triton.", "autotune_cache.")

_lock = threading.RLock()
_patched: list[tuple[types.ModuleType, Any]] = []  # (module, its previous `autotune`)
_warned: set[str] = set()  # modules already named in an UnroutedKernelsWarning


class UnroutedKernelsWarning(UserWarning):
    """Kernels built by Triton's own `triton.autotune` before install(): they stay uncached."""


def routed_autotune(*args: Any, **kwargs: Any) -> Callable[[Any], Autotuner]:
    """`triton.autotune` while install() is in effect: `autotune_cache.triton.autotune` (same
    arguments) whose tuner keys its entries by the kernel's module-qualified name. A kernel with
    `cache_results=True` (or TRITON_CACHE_AUTOTUNING=1) keeps results on disk, as any tuner of
    ours does (engine.honour_cache_results)."""
    decorate = autotune(*args, **kwargs)

    def decorator(fn: Any) -> Autotuner:
        # The key's kernel name, set before any launch and before its compiles start ahead.
        return decorate(fn, kernel_name=qualified_name(fn))  # type: ignore[call-arg]

    return decorator


_AUTOTUNE_SIGNATURE = inspect.signature(autotune)
routed_autotune.__signature__ = _AUTOTUNE_SIGNATURE  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Unrouted:
    """Something of Triton's own autotuner in a module's namespace: a Triton Autotuner (`kernel`
    is its module-qualified name, `module` the module it is defined in) or Triton's decorator
    imported by name (`kernel` is empty, `module` the module holding it as `attribute`)."""

    module: str
    attribute: str
    kernel: str = ""
    why: str = ""  # set when the switch cannot route it (classroute.why_unrouted)

    def describe(self) -> str:
        if self.kernel:
            return f"{self.kernel} ({self.why})" if self.why else self.kernel
        return (f"{self.module}.{self.attribute}: Triton's decorator, imported by name, so "
                "kernels it decorates from now on are not routed either")


def _module_items(module: Any) -> list[tuple[str, Any]]:
    """A module's attributes, or none for objects in sys.modules that are not plain modules."""
    try:
        namespace = vars(module)
    except TypeError:
        return []
    try:
        return list(namespace.items())
    except RuntimeError:  # changed size while another thread imports into it
        return []


def unrouted() -> list[Unrouted]:
    """Everything in the namespaces of sys.modules that stays on Triton's own autotuner: Triton
    Autotuner objects that are not ours (each once, named by the module its kernel is defined
    in), and modules outside Triton and this package that hold Triton's decorator as
    `autotune` (`from triton import autotune` before the switch).

    Kernels reachable only through other objects (class attributes, dicts, closures) are not
    found; they stay on Triton's autotuner all the same."""
    found: dict[int, Unrouted] = {}
    holders: list[Unrouted] = []
    for name, module in list(sys.modules.items()):
        if module is None:
            continue
        for attribute, value in _module_items(module):
            try:
                if value is TRITON_AUTOTUNE:
                    if attribute == "autotune" and name != "triton" \
                            and not name.startswith(_OWN_PREFIXES):
                        holders.append(Unrouted(name, attribute))
                    continue
                # type(), not isinstance(): isinstance reads `__class__`, which some module
                # attributes (deprecated lazy aliases) turn into a warning or an import.
                kind = type(value)
                if not issubclass(kind, _triton_autotuner.Autotuner) \
                        or issubclass(kind, Autotuner) or classroute.is_routed(value):
                    continue
                base = python_function(value.fn)
            except Exception:  # noqa: BLE001 - odd objects must not break the scan
                continue
            if id(value) not in found or name == base.__module__:
                why = classroute.why_unrouted(value) if classroute.is_blocked(value) else ""
                found[id(value)] = Unrouted(base.__module__, attribute,
                                            f"{base.__module__}.{base.__qualname__}", why)
    return sorted([*found.values(), *holders], key=lambda u: (u.module, u.kernel, u.attribute))


def _triton_holders() -> list[types.ModuleType]:
    """The loaded modules whose `autotune` is Triton's decorator: the SPELLINGS (imported here
    if need be) and any other triton.* module that re-exports it."""
    import importlib

    modules = [importlib.import_module(name) for name in SPELLINGS]
    for name, module in list(sys.modules.items()):
        if (name.startswith("triton.") and module is not None and module not in modules
                and getattr(module, "autotune", None) is TRITON_AUTOTUNE):
            modules.append(module)
    return modules


def is_installed() -> bool:
    """Whether install() is in effect."""
    return bool(_patched)


def install() -> list[Unrouted]:
    """Make every spelling of `triton.autotune` our cached decorator, for kernels decorated from
    now on; returns what stays on Triton's own autotuner (see `unrouted`).

    Idempotent and thread-safe: a second call patches nothing again. What stays unrouted is named
    in one UnroutedKernelsWarning per call for modules not named before (with the fix), and
    recorded in the process cache's stats (`kernels_on_triton` of the report)."""
    with _lock:
        if not _patched:
            for module in _triton_holders():
                previous = module.autotune  # type: ignore[attr-defined]
                if previous is TRITON_AUTOTUNE:
                    hooks.set_attribute(module, "autotune", routed_autotune)
                    _patched.append((module, previous))
            classroute.patch()  # Triton's own class: its tuners are routed too (classroute.py)
            classroute.set_capturing(True)
            log.debug("autotune_cache: triton.autotune routed through the cache in %s",
                      ", ".join(m.__name__ for m, _ in _patched))
        return check_unrouted(stacklevel=3)


def check_unrouted(stacklevel: int = 2) -> list[Unrouted]:
    """unrouted(), with what it finds in modules not named before named in one
    UnroutedKernelsWarning (with the fix), and its kernels recorded in the process cache's stats
    (`kernels_on_triton`). install() calls it; so may a report at the end of a run."""
    left = unrouted()
    kernels = sorted({u.kernel for u in left if u.kernel})
    if kernels:
        from autotune_cache.cache import get_cache

        get_cache().stats.left_on_triton(kernels)
    with _lock:
        new = [u for u in left if u.module not in _warned]
        _warned.update(u.module for u in new)
    if not new:
        return left
    modules = sorted({u.module for u in new})
    lines = "\n".join(f"  {u.describe()}" for u in new)
    warnings.warn(
        f"autotune_cache: {', '.join(modules)} used Triton's own triton.autotune before "
        f"autotune_cache.triton.install(); these stay on Triton's autotuner, uncached:\n{lines}\n"
        f"Fix: {FIX}.", UnroutedKernelsWarning, stacklevel=stacklevel)
    return left


def uninstall() -> None:
    """Restore Triton's decorator wherever install() replaced it (and where nothing replaced
    ours since). Kernels decorated meanwhile keep our tuner. Idempotent and thread-safe."""
    with _lock:
        classroute.set_capturing(False)
        while _patched:
            module, previous = _patched.pop()
            if getattr(module, "autotune", None) is routed_autotune:
                hooks.set_attribute(module, "autotune", previous)


@contextlib.contextmanager
def installed() -> Iterator[list[Unrouted]]:
    """install() inside the block, yielding what stays unrouted; on leaving, uninstall() unless
    the switch was already on when the block began."""
    with _lock:
        was_on = is_installed()
        left = install()
    try:
        yield left
    finally:
        if not was_on:
            uninstall()


def install_from_settings(settings: Settings) -> bool:
    """install() when `settings.all_kernels` (--autotune_all_kernels) is set; returns whether
    the switch is on. What the pytest plugin calls with its resolved settings."""
    if settings.all_kernels:
        install()
    return is_installed()
