"""Entry point for `python -m autotune_cache`."""

from autotune_cache.cli import run

run()
