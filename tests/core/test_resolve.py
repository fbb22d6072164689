"""Cache.resolve, the tuning protocol, with a fake tune callback whose timings are exact: hits,
misses that tune, timing reuse, strict misses, the winner rule, and processes that race for one
key (one tunes, the others read its result)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from autotune_cache import Cache, MissingResultError, Settings
from autotune_cache.errors import AllConfigsFailedError
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store.tuning import Tuned, TuneJob, config_text
from tests.cachetools import make_key

ROOT = Path(__file__).resolve().parents[2]
KEY = make_key()


def config(block: int, warps: int = 4) -> pb.Config:
    return pb.Config(params=[pb.Param(name="BLOCK", int_value=block)], num_warps=warps)


CANDIDATES = [config(32), config(64), config(128)]


class FakeTune:
    """A tune callback timing each candidate from a {BLOCK: ms} table (a missing BLOCK fails);
    keeps every job it was handed."""

    def __init__(self, table: Mapping[int, float], **tuned: object) -> None:
        self.table = dict(table)
        self.tuned = tuned
        self.jobs: list[TuneJob] = []

    def __call__(self, job: TuneJob) -> Tuned:
        self.jobs.append(job)
        timings = {}
        for i in job.todo:
            block = job.candidates[i].params[0].int_value
            ms = self.table.get(block)
            timings[i] = pb.Timing(time_ms=ms) if ms is not None else pb.Timing(
                failure=f"no time for BLOCK={block}")
        return Tuned(timings=timings, benchmarks=sum(1 for t in timings.values()
                                                     if not t.failure), **self.tuned)


def times(entry: pb.Entry) -> dict[str, float | str]:
    return {config_text(t.config): t.failure or t.time_ms for t in entry.result.candidates}


def test_a_miss_tunes_every_candidate_records_the_fastest_and_then_hits(tmp_path: Path) -> None:
    cache = Cache(Settings(cache_dir=tmp_path / "d"))
    tune = FakeTune({32: 3.0, 64: 1.0, 128: 2.0})
    resolved = cache.resolve(KEY, CANDIDATES, tune, timing_method="fake")
    assert resolved.tuned and resolved.winner == 1
    (job,) = tune.jobs
    assert (job.key, job.todo, dict(job.reused)) == (KEY, (0, 1, 2), {})
    result = resolved.entry.result
    assert (config_text(result.config), result.time_ms, result.timing_method) == (
        "BLOCK=64,num_warps=4", 1.0, "fake")
    assert times(resolved.entry) == {"BLOCK=32,num_warps=4": 3.0, "BLOCK=64,num_warps=4": 1.0,
                                     "BLOCK=128,num_warps=4": 2.0}
    stats = cache.stats
    assert (stats.misses, stats.tuned, stats.benchmarks, stats.hits) == (1, 1, 3, 0)
    assert stats.kernels_served == {KEY.kernel}

    again = cache.resolve(KEY, CANDIDATES, tune, timing_method="fake")
    assert not again.tuned and again.entry == resolved.entry and len(tune.jobs) == 1
    other_process = Cache(Settings(cache_dir=tmp_path / "d"))  # reads the directory
    hit = other_process.resolve(KEY, CANDIDATES, FakeTune({}), timing_method="fake")
    assert hit.entry == resolved.entry and other_process.stats.hits == 1


def test_a_hit_never_calls_tune_and_a_foreign_winner_is_a_miss(tmp_path: Path) -> None:
    cache = Cache(Settings(cache_dir=tmp_path))
    cache.resolve(KEY, CANDIDATES, FakeTune({32: 1.0, 64: 2.0, 128: 3.0}), timing_method="fake")
    fresh = Cache(Settings(cache_dir=tmp_path))
    tune = FakeTune({64: 2.0, 128: 3.0})
    # The recorded winner (BLOCK=32) is not among these candidates: damaged, re-tuned.
    resolved = fresh.resolve(KEY, CANDIDATES[1:], tune, timing_method="fake")
    assert resolved.tuned and config_text(resolved.entry.result.config) == "BLOCK=64,num_warps=4"
    assert len(tune.jobs) == 1


def test_require_complete_raises_the_miss_and_tunes_nothing() -> None:
    cache = Cache(Settings(require_complete=True))
    tune = FakeTune({32: 1.0})
    with pytest.raises(MissingResultError, match="no tuned result for matmul") as err:
        cache.resolve(KEY, CANDIDATES, tune, timing_method="fake")
    assert "--require_complete_autotune_results forbids tuning it here" in str(err.value)
    assert tune.jobs == [] and (cache.stats.misses, cache.stats.tuned) == (1, 0)


def test_timings_of_another_candidate_list_measured_the_same_way_are_reused() -> None:
    cache = Cache(Settings())
    old_key = make_key(configs="two-candidates")
    cache.resolve(old_key, CANDIDATES[:2], FakeTune({32: 3.0, 64: 1.5}), timing_method="fake")

    tune = FakeTune({128: 1.0})
    resolved = cache.resolve(KEY, CANDIDATES, tune, timing_method="fake")
    (job,) = tune.jobs
    assert job.todo == (2,)
    assert {i: t.time_ms for i, t in job.reused.items()} == {0: 3.0, 1: 1.5}
    assert resolved.winner == 2 and cache.stats.benchmarks == 2 + 1
    assert times(resolved.entry) == {"BLOCK=32,num_warps=4": 3.0, "BLOCK=64,num_warps=4": 1.5,
                                     "BLOCK=128,num_warps=4": 1.0}

    # A subset of a recorded list needs no benchmark at all: tune is handed nothing to time.
    subset = FakeTune({})
    resolved = cache.resolve(make_key(configs="subset"), [CANDIDATES[0], CANDIDATES[2]], subset,
                             timing_method="fake")
    assert subset.jobs[0].todo == () and resolved.winner == 1


def test_timings_are_not_reused_across_methods_nor_for_never_reuse_candidates() -> None:
    cache = Cache(Settings())
    cache.resolve(make_key(configs="old"), CANDIDATES[:2], FakeTune({32: 3.0, 64: 1.5}),
                  timing_method="do_bench")
    other_method = FakeTune({32: 5.0, 64: 4.0, 128: 6.0})
    cache.resolve(KEY, CANDIDATES, other_method, timing_method="cuda_graph")
    assert other_method.jobs[0].todo == (0, 1, 2)

    hooked = FakeTune({32: 7.0})
    resolved = cache.resolve(make_key(configs="hooked"), CANDIDATES[:2], hooked,
                             timing_method="do_bench", never_reuse={0})
    assert hooked.jobs[0].todo == (0,) and list(hooked.jobs[0].reused) == [1]
    assert times(resolved.entry) == {"BLOCK=32,num_warps=4": 7.0, "BLOCK=64,num_warps=4": 1.5}


def test_the_winner_is_a_finalist_and_carries_its_specialization() -> None:
    cache = Cache(Settings())
    tune = FakeTune({32: 0.5, 64: 2.0, 128: 1.0}, finalists={1, 2},
                    specializations={2: '{"name": "k128"}', 0: '{"name": "k32"}'})
    resolved = cache.resolve(KEY, CANDIDATES, tune, timing_method="fake")
    # BLOCK=32 was screened out (its time is a shorter benchmark's): not eligible to win.
    assert resolved.winner == 2
    assert resolved.entry.result.triton_specialization == '{"name": "k128"}'


def test_all_candidates_failing_raise_naming_each_and_record_nothing() -> None:
    cache = Cache(Settings())
    with pytest.raises(AllConfigsFailedError) as err:
        cache.resolve(KEY, CANDIDATES[:2], FakeTune({}), timing_method="fake")
    assert "BLOCK=32 num_warps=4: no time for BLOCK=32" in str(err.value)
    assert "BLOCK=64 num_warps=4: no time for BLOCK=64" in str(err.value)
    assert cache.stats.tuned == 0 and cache.memory.get(KEY) is None


def test_a_callback_that_skips_a_candidate_is_an_error_naming_the_key() -> None:
    cache = Cache(Settings())

    def lazy(job: TuneJob) -> Tuned:
        return Tuned(timings={job.todo[0]: pb.Timing(time_ms=1.0)})

    with pytest.raises(ValueError, match=r"job.todo \[0, 1, 2\].*returned them for \[0\]") as err:
        cache.resolve(KEY, CANDIDATES, lazy, timing_method="fake")
    assert KEY.describe() in str(err.value)
    assert cache.stats.tuned == 0 and cache.memory.get(KEY) is None


def test_no_candidates_is_an_error_naming_the_key() -> None:
    with pytest.raises(ValueError, match="got no candidate configs") as err:
        Cache(Settings()).resolve(KEY, [], FakeTune({}), timing_method="fake")
    assert KEY.describe() in str(err.value)


# ----- processes racing for one key ----------------------------------------------------------

WORKER = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from autotune_cache import Cache, Settings
    from autotune_cache.proto import autotune_results_pb2 as pb
    from autotune_cache.store.tuning import Tuned
    from tests.cachetools import make_key

    CANDIDATES = [pb.Config(params=[pb.Param(name="BLOCK", int_value=b)], num_warps=4)
                  for b in (32, 64, 128)]

    directory, log, go = sys.argv[1:]
    cache = Cache(Settings(cache_dir=Path(directory)))

    def tune(job):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\\n")
        time.sleep(0.5)  # long enough for every peer to reach the lock
        return Tuned({i: pb.Timing(time_ms=float(i + 1)) for i in job.todo}, len(job.todo))

    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.005)
    resolved = cache.resolve(make_key(), CANDIDATES, tune, timing_method="fake")
    s = cache.stats
    print(json.dumps({"tuned": resolved.tuned, "time_ms": resolved.entry.result.time_ms,
                      "misses": s.misses, "peer": s.peer_results, "benchmarks": s.benchmarks}))
""")


def test_processes_missing_one_key_together_tune_it_once(tmp_path: Path) -> None:
    log, go = tmp_path / "tuners.log", tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("AUTOTUNE_FLAGS", None)
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path / "d"), str(log),
                               str(go)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(0.05)
    go.touch()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert len(log.read_text().splitlines()) == 1, "more than one process tuned the key"
    assert sorted(r["tuned"] for r in results) == [False, False, True]
    assert [r["time_ms"] for r in results] == [1.0] * 3  # every process uses the one result
    assert [r["misses"] for r in results] == [1] * 3
    assert sorted((r["peer"], r["benchmarks"]) for r in results) == [(0, 3), (1, 0), (1, 0)]


def test_a_tie_after_a_config_was_added_keeps_the_previous_pick() -> None:
    """Within the timing method's noise band (the interpreter's: 25 %), the winner recorded
    under the old candidate list stays when it is tied, rather than the earliest tied config:
    adding a config moves no pick that only noise separates from it."""
    cache = Cache(Settings())
    method = "cputime-interpreter"
    old_key = make_key(configs="cfg-old")
    old = cache.resolve(old_key, [config(64), config(128)], FakeTune({64: 2.0, 128: 1.0}),
                        timing_method=method)
    assert config_text(old.entry.result.config) == "BLOCK=128,num_warps=4"
    # BLOCK=32 is added first in the list and is as fast as BLOCK=128 within the band.
    new_key = make_key(configs="cfg-new")
    tune = FakeTune({32: 0.95})
    resolved = cache.resolve(new_key, [config(32), config(64), config(128)], tune,
                             timing_method=method)
    assert tune.jobs[0].todo == (0,)  # the others' timings are reused
    assert config_text(resolved.entry.result.config) == "BLOCK=128,num_warps=4"
    # With no previous pick, the earliest tied config wins (decision 0030).
    fresh = Cache(Settings()).resolve(new_key, [config(32), config(64), config(128)],
                                      FakeTune({32: 0.95, 64: 2.0, 128: 1.0}),
                                      timing_method=method)
    assert config_text(fresh.entry.result.config) == "BLOCK=32,num_warps=4"
