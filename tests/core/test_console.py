"""Outside pytest, the library's lines for people (the exit summary, tuning progress) go to
stderr, through `logging.getLogger("autotune_cache")` when the program configured logging, and
nowhere when that logger's level is above INFO."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import logging
{setup}
from autotune_cache import configure, parse_flags
from tests.cachetools import fake_tune, make_key

cache = configure(parse_flags("", env={{}}))
entry = fake_tune(make_key())
cache.record(entry, benchmarks=3)
"""


def run(setup: str) -> str:
    proc = subprocess.run([sys.executable, "-c", SCRIPT.format(setup=setup)], cwd=ROOT,
                          capture_output=True, text=True, check=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert proc.stdout == ""
    return proc.stderr


@pytest.mark.parametrize(("setup", "expected"), [
    ("", "autotune_cache: 0 hits, 0 misses, 0 stale, 3 benchmarks"),
    ("logging.basicConfig(level=logging.INFO, format='LOG %(name)s %(levelname)s %(message)s')",
     "LOG autotune_cache INFO autotune_cache: 0 hits, 0 misses, 0 stale, 3 benchmarks"),
    ("logging.getLogger('autotune_cache').setLevel(logging.WARNING)", None),
    ("logging.basicConfig(level=logging.WARNING)", None),
], ids=["default-stderr", "through-logging", "silenced-by-level", "root-at-warning"])
def test_the_exit_line_follows_logging(setup, expected):
    err = run(setup)
    if expected is None:
        assert "hits" not in err, err
    else:
        assert err.splitlines()[-1].startswith(expected), err
