"""`autotune_cache.triton.autotune`: a drop-in replacement for `triton.autotune`.

Change `@triton.autotune(...)` to `@autotune_cache.triton.autotune(...)` (same arguments) and the
kernel's tuning results are looked up in, and recorded to, the tiers AUTOTUNE_FLAGS configures.
`install()` routes every `triton.autotune` (third-party libraries' kernels) through the same
cache; see docs/triton.md.
"""

from autotune_cache.triton.autotuner import (
    AllConfigsFailedError,
    Autotuner,
    ConflictingMetaParametersError,
    autotune,
)
from autotune_cache.triton.bench import fake_benchmark, set_fake_benchmark
from autotune_cache.triton.deferred import finish_all as tune_deferred
from autotune_cache.triton.device import INTERPRETER_DEVICE, current_device, interpreter_active
from autotune_cache.triton.routing import (
    UnroutedKernelsWarning,
    install,
    installed,
    is_installed,
    uninstall,
)
from autotune_cache.triton.sandbox import ensure_triton_cache_dir


def _engage_from_flags() -> None:
    """Importing this package writes nothing into Triton (hooks.py). A process configured by
    AUTOTUNE_FLAGS alone makes its cache at its first autotuned launch; what those flags ask of
    Triton (startup.engage) is asked for now instead, so that plain kernels compiled before that
    launch are recorded or compiled ahead too. A bad flag is left to that launch to report."""
    from autotune_cache.cache import installed_cache
    from autotune_cache.config.flags import settings_from_env
    from autotune_cache.errors import AutotuneCacheError
    from autotune_cache.foundation import import_hook

    if installed_cache() is not None:
        return  # engaged when it was made
    try:
        settings = settings_from_env()
    except AutotuneCacheError:
        return
    import_hook.engage(settings)
    import_hook.compile_at_start(settings)  # triton/early.py, where it can help


_engage_from_flags()

__all__ = [
    "INTERPRETER_DEVICE",
    "AllConfigsFailedError",
    "Autotuner",
    "ConflictingMetaParametersError",
    "UnroutedKernelsWarning",
    "autotune",
    "current_device",
    "ensure_triton_cache_dir",
    "fake_benchmark",
    "install",
    "installed",
    "interpreter_active",
    "is_installed",
    "set_fake_benchmark",
    "tune_deferred",
    "uninstall",
]
