"""`autotune_cache.triton.autotune`: a drop-in replacement for `triton.autotune`.

Change `@triton.autotune(...)` to `@autotune_cache.triton.autotune(...)` (same arguments) and the
kernel's tuning results are looked up in, and recorded to, the tiers AUTOTUNE_FLAGS configures.
See docs/triton.md.
"""

from autotune_cache.triton.autotuner import (
    AllConfigsFailedError,
    Autotuner,
    ConflictingMetaParametersError,
    autotune,
)
from autotune_cache.triton.bench import fake_benchmark, set_fake_benchmark
from autotune_cache.triton.device import INTERPRETER_DEVICE, current_device, interpreter_active
from autotune_cache.triton.sandbox import ensure_triton_cache_dir

__all__ = [
    "INTERPRETER_DEVICE",
    "AllConfigsFailedError",
    "Autotuner",
    "ConflictingMetaParametersError",
    "autotune",
    "current_device",
    "ensure_triton_cache_dir",
    "fake_benchmark",
    "interpreter_active",
    "set_fake_benchmark",
]
