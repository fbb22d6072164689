"""bench/suite_perf.py's CPU smoke mode: the fake library's suite in every pass on the Triton
interpreter. The runner's figures are not asserted; what it checks is: each pass's outcomes
test by test, the stats it reads, S-load's 0 benchmarks and S-regen's one per edited entry."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_suite_perf_smoke_runs_every_pass_with_identical_outcomes(tmp_path: Path) -> None:
    passes = "P,W,S-cold,S-load,S-load-B,S-regen,S-stale,S-stale-B"
    passes += ",S-shared" if shutil.which("redis-server") else ""
    env = {k: v for k, v in os.environ.items() if k not in ("AUTOTUNE_FLAGS", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = str(ROOT)
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "suite_perf.py"), str(out),
                             "--smoke", "--passes", passes,
                             "--autotune-flags=--autotune_compile_workers=2",
                             "--b-flags=--autotune_compile_helpers=3"],
                            env=env, text=True, capture_output=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads((out / "suite_perf_fake.json").read_text())
    assert (out / "suite_perf_fake.md").read_text().startswith("# suite_perf: fake")
    assert (out / "suite_perf_fake_logs.txt").stat().st_size > 0
    totals = data["totals"]
    ran = [n for n in passes.split(",")] + (["S-fill"] if "S-shared" in passes else [])
    assert sorted(totals) == sorted(ran)
    assert data["identical_outcomes"] is True
    # --autotune-flags reaches every S pass, after the pass's own, and no plain-Triton pass.
    flags = {n: r["flags"] for n, r in data["raw"].items()}
    assert flags["P"] == flags["W"] == ""
    assert flags["S-cold"] == flags["S-load"] == "--autotune_compile_workers=2"
    if "S-shared" in flags:
        assert flags["S-shared"].endswith(" --autotune_compile_workers=2")
    # --b-flags reaches the B passes alone, before --autotune-flags.
    assert flags["S-load-B"] == flags["S-stale-B"] == (
        "--autotune_compile_helpers=3 --autotune_compile_workers=2")
    for name in ran:
        assert totals[name]["rc"] == 0, name
        assert totals[name]["outcomes"] == {"passed": 4, "skipped": 1}, name
    # Triton's own autotuner tunes P and W (the interpreter ignores its cache_results); ours
    # tunes S-cold (two kernels at two sizes) and serves every later pass from the dump.
    assert totals["P"]["benchmarks_triton"] > 0 and totals["P"]["benchmarks_ours"] == 0
    assert totals["S-cold"]["benchmarks_triton"] == 0 and totals["S-cold"]["tuned"] == 4
    assert data["s_load_benchmarks"] == 0 and totals["S-load"]["hits"] == 4
    assert sorted(totals["S-load"]["kernels_served"]) == ["fakelib.ops.add_kernel",
                                                         "fakelib.ops.scale_kernel"]
    assert {row["what"] for row in data["profile"]} >= {"process wall", "tests"}
    # The probe's timeline: every test's start, and our compile jobs (none on the interpreter,
    # which compiles nothing ahead; the events' shape is bench/suite_probe.py's _patch_jobs).
    for name in ran:
        probe = data["raw"][name]["probe"]
        assert probe["events"] == [], name
        starts = [t["start"] for t in probe["tests"].values()]
        assert starts and all(s > 0 for s in starts), name
    # S-regen: add_kernel's entries (two sizes) each lost one of three timings in the file; the
    # regen in place times exactly those two, serves scale_kernel from the file, and rewrites
    # the file whole, the edited entries with every candidate again.
    assert data["regen"] == {"kernel": "fakelib.ops.add_kernel", "entries_edited": 2,
                             "candidates": 3, "entries_before": 4, "entries_after": 4,
                             "edited_restored": 2}
    regen = totals["S-regen"]
    assert (regen["benchmarks_ours"], regen["tuned"], regen["hits"]) == (2, 2, 2)
    assert {r["pass"] for r in data["ratios"].values()} >= {"S-regen", "S-load", "S-cold",
                                                            "S-stale"}
    # S-stale: every entry aged to another Triton is stale and tuned again; the regen writes the
    # new Triton's entries beside the old ones, which it could not have reproduced and so keeps
    # (docs/cache.md: a dump replaces only what the run owns; prune --keep-toolchain drops them).
    assert data["stale"] == {"entries_before": 4, "entries_after": 8, "entries_still_old": 4}
    assert (totals["S-stale"]["tuned"], totals["S-stale"]["hits"]) == (4, 0)
    # The B passes are their A's again, each on a fresh aged copy and compile cache.
    assert (totals["S-stale-B"]["tuned"], totals["S-stale-B"]["hits"]) == (4, 0)
    assert (totals["S-load-B"]["hits"], totals["S-load-B"]["benchmarks_ours"]) == (4, 0)


def test_the_probe_records_our_compile_jobs_and_the_waits_on_them(monkeypatch):
    """The probe's timeline (bench/suite_probe.py `_patch_jobs`) on the real scheduler: a job a
    worker runs while the main thread waits for it, and one the waiting thread runs itself,
    each with its thread and times; a job done before its result is asked is no wait."""
    import threading

    from autotune_cache.triton import scheduler
    from autotune_cache.triton.scheduler import Priority

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import suite_probe

    for name in ("__init__", "run", "result"):  # put back after the test
        monkeypatch.setattr(scheduler.CompileJob, name, getattr(scheduler.CompileJob, name))
    monkeypatch.setattr(scheduler.CompileJob, "_suite_probe", False, raising=False)
    monkeypatch.setattr(suite_probe, "EVENTS", [])
    monkeypatch.setattr(scheduler, "_primed", {None})  # nothing here needs Triton primed
    suite_probe._patch_jobs()
    suite_probe._patch_jobs()  # once only
    started, release = threading.Event(), threading.Event()

    def slow() -> int:
        started.set()
        release.wait(10)
        return 1

    pool = scheduler.CompileScheduler().size(1)
    try:
        on_worker = pool.submit(slow, Priority.AHEAD)
        assert started.wait(10)
        threading.Timer(0.3, release.set).start()
        assert on_worker.result() == 1
        assert on_worker.result() == 1  # done: no second wait
        here = scheduler.CompileJob(lambda: 2, Priority.AHEAD, label="here")
        assert here.result() == 2
    finally:
        pool.stop()
    rows = [(kind, label, thread) for kind, label, thread, *_ in suite_probe.EVENTS]
    assert sorted(rows) == sorted([("job", "", "autotune-compile"), ("wait", "", "MainThread"),
                                   ("job", "here", "MainThread"),
                                   ("wait", "here", "MainThread")])
    by = {(kind, label): times for kind, label, _, *times in suite_probe.EVENTS}
    queued, start, end = by[("job", "")]
    assert queued <= start < end
    _, wait_start, wait_end = by[("wait", "")]
    assert wait_end - wait_start >= 0.2 and wait_end >= end
