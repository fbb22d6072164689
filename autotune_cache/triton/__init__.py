"""`autotune_cache.triton.autotune`: a drop-in replacement for `triton.autotune`.

Change `@triton.autotune(...)` to `@autotune_cache.triton.autotune(...)` (same arguments) and the
kernel's tuning results are looked up in, and recorded to, the tiers AUTOTUNE_FLAGS configures.
`install()` routes every `triton.autotune` (third-party libraries' kernels) through the same
cache; see docs/triton.md.
"""

from autotune_cache.triton import classroute as _classroute
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
from autotune_cache.triton.warmups import install as _install_warmups

_install_warmups()  # Triton's compile hook: plain @triton.jit specializations (warmups.py)
_classroute.patch()  # Triton's own tuners: routed while install() is on, watched always

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
