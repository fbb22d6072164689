"""Entry point for `python -m autotune_cache`."""

from autotune_cache.cli import main

raise SystemExit(main())
