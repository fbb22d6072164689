"""Issue 39: quiet unless asked. A process that uses the cache with nothing configured (a
library's users running its kernels) writes nothing to stderr, as `triton.autotune` does; the
one-line summary comes when the process was configured, or when AUTOTUNE_VERBOSE=1 asks, and
AUTOTUNE_VERBOSE=0 silences it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.conftest import run_python

TUNE_ONE = """
from autotune_cache import get_cache
from tests.cachetools import fake_tune, make_key
cache = get_cache()
key = make_key()
assert cache.lookup(key) is None
cache.record(fake_tune(key), benchmarks=3)
print("ran")
"""


@pytest.mark.parametrize(("flags", "verbose", "summary"), [
    ("", None, False),
    ("", "1", True),
    ("--autotune_cache_mode=update", None, True),
    ("--autotune_cache_mode=update", "0", False),
], ids=["nothing-configured", "verbose", "flags", "flags-verbose-0"])
def test_the_summary_line_is_printed_only_when_asked(flags: str, verbose: str | None,
                                                     summary: bool, tmp_path: Path) -> None:
    env = {"AUTOTUNE_FLAGS": flags}
    if flags:
        env["AUTOTUNE_FLAGS"] += f" --autotune_cache_dir={tmp_path / 'cache'}"
    if verbose is not None:
        env["AUTOTUNE_VERBOSE"] = verbose
    res = run_python(TUNE_ONE, env=env)
    assert res.rc == 0 and res.out.strip() == "ran", res.text
    if summary:
        assert "autotune_cache: 0 hits, 1 misses, 0 stale, 3 benchmarks" in res.err, res.err
    else:
        assert res.err == "", res.err
