"""tunerlib: a kernel library with a tuner of its own, as flash-linear-attention has.

`rownorm` is built by the library's `lib_autotune`, which constructs a subclass of Triton's
`Autotuner` directly (never `triton.autotune`) whose `run()` first consults the library's own
config files (TUNERLIB_CONFIG_DIR) and then calls `super().run()`. `shift` is a plain
`@triton.autotune` kernel. Nothing in it knows autotune_cache."""

from tunerlib.ops import rownorm, shift

__all__ = ["rownorm", "shift"]
