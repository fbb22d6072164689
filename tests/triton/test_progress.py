"""The tuning's progress lines (autotune_cache/triton/progress.py): quiet when quick, and a last
line that is the tuning's own profile when it was not."""

from __future__ import annotations

import pytest

from autotune_cache.triton.progress import QUIET_SECONDS, Progress


def _progress(lines: list[str], monkeypatch: pytest.MonkeyPatch) -> Progress:
    monkeypatch.delenv("AUTOTUNE_PROGRESS", raising=False)
    monkeypatch.delenv("TRITON_PRINT_AUTOTUNING", raising=False)
    return Progress("mm", "M=4096", "NVIDIA H200", total=48, reused=0, say=lines.append)


def test_a_quick_tuning_prints_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    lines: list[str] = []
    progress = _progress(lines, monkeypatch)
    progress.step("BM=64", 0.5)
    progress.phase("timing 48 at 10 ms", 0.2)
    progress.finished("BM=64", 0.5, 0.3)
    assert lines == []


def test_a_long_tuning_whose_stages_were_quiet_still_says_where_its_time_went(
        monkeypatch: pytest.MonkeyPatch) -> None:
    lines: list[str] = []
    progress = _progress(lines, monkeypatch)
    progress.step("BM=64", 0.5)  # quick so far: no line
    assert lines == []
    progress.started -= QUIET_SECONDS + 1  # the later stages and the decision took the time
    for what, seconds in (("timing 48 at 10 ms", 0.7), ("timing 12 at 40 ms", 0.6),
                          ("deciding among 2 leaders", 0.8)):
        progress.phase(what, seconds)
    progress.finished("BM=128", 0.19, 2.4)
    assert lines == [
        "autotune_cache: tuning mm [M=4096] on NVIDIA H200: 48 configs to benchmark, "
        "0 timings reused",
        "autotune_cache:   best BM=128 (0.1900 ms), tuned in 2.4 s (timing 48 at 10 ms 0.7 s; "
        "timing 12 at 40 ms 0.6 s; deciding among 2 leaders 0.8 s)",
    ]
