"""Layer 1, the configuration: AUTOTUNE_FLAGS parsed into Settings (`flags`).

The results file format, the other module of this layer, is `autotune_cache.formats`: public, it
stays at the package root. This package re-exports nothing: import the module.
"""
