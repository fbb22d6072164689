"""bench/gpu_perf.py's py-spy wrapper behind the benchmarks' --profile, and its summary."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import gpu_perf  # noqa: E402


def test_a_profiled_child_runs_under_py_spy_sampling_every_thread_idle_ones_too(
        tmp_path: Path) -> None:
    cmd = gpu_perf.py_spy_wrap("/opt/py-spy", ["python3", "w.py", "--tuner", "ours"],
                         tmp_path / "p.txt")
    assert cmd[:2] == ["/opt/py-spy", "record"]
    assert {"--threads", "--idle", "--format"} <= set(cmd)
    assert cmd[cmd.index("--output") + 1] == str(tmp_path / "p.txt")
    assert cmd[cmd.index("--") + 1:] == ["python3", "w.py", "--tuner", "ours"]


def test_the_summary_counts_a_frame_once_per_sample_and_ranks_by_inclusive_time(
        tmp_path: Path) -> None:
    profile = tmp_path / "p.txt"
    # py-spy's raw format: a stack (root first, ';'-separated), a space, its sample count.
    profile.write_text("main;tune;bench 300\n"
                       "main;tune;compile 100\n"
                       "main;f;f 50\n"          # recursion: f counts once per sample
                       "garbage line\n")
    rows = dict(gpu_perf.summarize(profile, top=4))
    assert rows == {"main": 4.5, "tune": 4.0, "bench": 3.0, "compile": 1.0}
    assert gpu_perf.summarize(profile, top=10)[-1] == ("f", 0.5)
