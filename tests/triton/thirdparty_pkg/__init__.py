"""A stand-in for a third-party kernel library (Liger-Kernel, FlagGems, ...) for the tests of
autotune_cache.triton.install: real `@triton.autotune` + `@triton.jit` kernels that know nothing
of autotune_cache. The package imports none of its modules, so each test decides whether they are
imported (and their kernels decorated) before or after install()."""
