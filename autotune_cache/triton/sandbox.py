"""Give Triton a writable compile cache inside test sandboxes.

Under `bazel test` HOME is often unset or read-only, so Triton's default `~/.triton/cache` cannot
be written and every test process recompiles every kernel (and Triton's own driver stub). When
`TRITON_CACHE_DIR` is unset and Bazel's `TEST_TMPDIR` is set, we point Triton at
`$TEST_TMPDIR/triton_cache`. Triton reads `TRITON_CACHE_DIR` each time it opens its cache, so this
works as long as it runs before the first compile; the autotuner calls it whenever a kernel is
decorated and again before its parallel pre-compile (never at import, which a test cannot
control). See docs/triton.md for sharing a persistent compile cache between runs.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from pathlib import Path

from autotune_cache.foundation import env

TRITON_CACHE_ENV = env.TRITON_CACHE_DIR
SANDBOX_SUBDIR = "triton_cache"


def ensure_triton_cache_dir(environ: MutableMapping[str, str] | None = None) -> Path | None:
    """Set TRITON_CACHE_DIR to $TEST_TMPDIR/triton_cache when it is unset inside a Bazel test.

    Returns the directory chosen, or None when nothing was changed (TRITON_CACHE_DIR already set,
    or not running under Bazel's test runner). An explicit TRITON_CACHE_DIR always wins.
    """
    target = env.environ() if environ is None else environ
    if target.get(TRITON_CACHE_ENV):
        return None
    test_tmpdir = target.get(env.TEST_TMPDIR)
    if not test_tmpdir:
        return None
    path = Path(test_tmpdir) / SANDBOX_SUBDIR
    path.mkdir(parents=True, exist_ok=True)
    target[TRITON_CACHE_ENV] = str(path)
    return path
