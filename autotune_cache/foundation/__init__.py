"""Layer 0, the foundations: atomic writes, the environment, the cache key, size limits,
safe reads, file locks, the Redis lease, entry checks, redaction and the console.

They import nothing of the package but `autotune_cache.errors` and `autotune_cache.proto`, and
each other (tests/core/test_layering.py). This package re-exports nothing: import the module.
"""
