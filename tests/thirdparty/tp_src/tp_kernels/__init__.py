"""tp_kernels: a small third-party kernel library, built into a wheel by the tests.

Its kernels use plain Triton decorators, one spelling each, as installed libraries do; nothing
in it knows autotune_cache."""

from tp_kernels.ops import add, negate, scale, square

__all__ = ["add", "negate", "scale", "square"]
