"""Tuning progress under pytest (autotune_cache/pytest/runner.py's _TerminalLines): each line
starts on its own line, and the line of dots it cut is taken up again with its file's name, so
no test's letter lands alone at the start of a line."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]

SUITE = """
from autotune_cache.triton.progress import Progress

def test_before():
    pass

def test_tunes():
    progress = Progress("softmax", "N=1024", "cpu-interpreter / interpreter", total=2, reused=0)
    progress.step("BLOCK=32", 2.5)
    progress.step("BLOCK=64", 1.0)
    progress.finished("BLOCK=64", 1.0, 0.1)

def test_after():
    pass
"""


@pytest.fixture
def dots(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.delenv("AUTOTUNE_FLAGS", raising=False)
    monkeypatch.setenv("AUTOTUNE_PROGRESS", "1")  # every line, however quick the tuning
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_dots=SUITE)
    return pytester


def test_progress_lines_start_their_own_line_and_the_dots_resume_after_the_name(dots):
    result = dots.runpytest_subprocess("-p", "no:cacheprovider",
                                       f"--autotune-dump={dots.path / 'c.textproto'}")
    result.assert_outcomes(passed=3)
    lines = result.stdout.lines
    first = lines.index("autotune_cache: tuning softmax [N=1024] on cpu-interpreter / "
                        "interpreter: 2 configs to benchmark, 0 timings reused")
    assert lines[first - 1].rstrip() == "test_dots.py ."  # the dot of the test before, cut
    assert lines[first + 1:first + 4] == [
        "autotune_cache:   [1/2] BLOCK=32: 2.5000 ms",
        "autotune_cache:   [2/2] BLOCK=64: 1.0000 ms",
        "autotune_cache:   best BLOCK=64 (1.0000 ms), tuned in 0.1 s",
    ]
    # The tuning test's letter and the next one's follow the file's name again, on one line.
    assert lines[first + 4].startswith("test_dots.py .. ")
    assert not any(line.strip() in (".", "..") for line in lines)


def test_in_verbose_mode_each_result_keeps_its_own_line(dots):
    result = dots.runpytest_subprocess("-p", "no:cacheprovider", "-v",
                                       f"--autotune-dump={dots.path / 'c.textproto'}")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([
        "test_dots.py::test_tunes ",
        "autotune_cache: tuning softmax *",
        "autotune_cache:   best BLOCK=64 (1.0000 ms), tuned in 0.1 s",
        "*",
        "test_dots.py::test_tunes PASSED*",
        "test_dots.py::test_after PASSED*",
    ])
