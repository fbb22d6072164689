"""The final decision among leaders (bench.decide, docs/decisions/0028-deciding-among-leaders.md):
finalists the configured benchmark cannot separate are timed again in short bursts, in rotated
interleaved rounds, and the one least slow in its worse regime wins, run after run."""

from __future__ import annotations

import pytest

from autotune_cache.triton import bench as bench_mod
from autotune_cache.triton.bench import (
    FakeBenchmarkRunner,
    GpuBenchmark,
    InterpreterBenchmark,
    UserBenchmark,
    decide,
    decides,
    leaders,
)
from tests.triton import kernels
from tests.triton.kernels import candidate_times


@pytest.fixture(autouse=True)
def no_idle(monkeypatch):
    """The bursts' idle gap is for a real GPU's power state: nothing to wait for here."""
    monkeypatch.setattr(bench_mod, "SHORT_GAP_S", 0.0)


def test_leaders_are_the_finalists_within_the_margin_fastest_first():
    times = {0: 1.03, 1: 1.00, 2: 1.031, 3: 1.02, 4: 2.0}
    assert leaders(times) == [1, 3, 0]
    assert leaders(times, margin=0.0) == [1]
    assert leaders({}) == []


def test_each_round_starts_at_the_next_leader():
    calls: list[int] = []

    def time_short(i: int) -> float:
        calls.append(i)
        return 1.0

    decide([7, 8, 9], {7: 1.0, 8: 1.0, 9: 1.0}, time_short, rounds=4,
           pause=lambda: calls.append(0))
    assert calls == [0, 7, 0, 8, 0, 9, 0, 8, 0, 9, 0, 7, 0, 9, 0, 7, 0, 8, 0, 7, 0, 8, 0, 9]


def test_the_leader_least_slow_in_its_worse_regime_wins():
    """A: fastest under sustained load by 1 %, but 10 % slower in short bursts; B: within 1 %
    in both; C: 5 % slower in bursts. B wins (each round's times differ: medians count)."""
    sustained = {0: 1.00, 1: 1.01, 2: 1.02}
    short = {0: [1.10, 1.30, 1.10], 1: [1.00, 0.90, 1.00], 2: [1.05, 1.05, 2.0]}
    rounds = {i: iter(ts) for i, ts in short.items()}
    kept, medians = decide([0, 1, 2], sustained, lambda i: next(rounds[i]))
    assert kept == 1
    assert medians == {0: 1.10, 1: 1.00, 2: 1.05}


def test_a_tie_in_both_regimes_keeps_the_faster_sustained_time_then_the_earlier():
    kept, _ = decide([2, 1], {1: 1.00, 2: 1.01}, lambda i: 1.0)
    assert kept == 1  # equal in bursts: 1 scores 1.0, 2 scores 1.01
    kept, _ = decide([2, 1], {1: 1.00, 2: 1.00}, lambda i: 1.0)
    assert kept == 1  # equal scores and times: the earlier candidate


def test_a_leader_that_cannot_be_timed_again_is_not_chosen():
    def time_short(i: int) -> float:
        if i == 0:
            raise RuntimeError("out of resources")
        return 1.0

    assert decide([0, 1], {0: 0.9, 1: 1.0}, time_short)[0] == 1
    failing = decide([0, 1], {0: 0.9, 1: 1.0}, lambda i: 1 / 0)
    assert failing == (0, {})  # none re-timed: the configured benchmark's fastest stands


@pytest.mark.parametrize("timer, expected", [
    (GpuBenchmark(), True), (GpuBenchmark(rep=25), False), (GpuBenchmark(use_cuda_graph=True),
                                                           False),
    (InterpreterBenchmark(), False), (UserBenchmark(lambda f, quantiles: 1.0), False),
    (FakeBenchmarkRunner(lambda c, p: 1.0), False)],
    ids=["do_bench", "short rep", "cuda_graph", "interpreter", "user", "fake"])
def test_only_event_timed_gpu_benchmarks_longer_than_a_burst_decide(timer, expected):
    assert decides(timer) is expected


def test_the_tuner_records_the_decided_leader_and_every_timing(use_cache, fake, monkeypatch):
    """Sustained times put 32 first by 1 % over 16; short bursts put 32 12 % behind: 16 wins,
    with its own sustained time, and every candidate keeps its configured benchmark's time."""
    use_cache()
    fake({16: 1.01, 32: 1.00, 64: 1.02, 128: 3.0})
    bursts = FakeBenchmarkRunner(lambda config, problem: {16: 1.0, 32: 1.12, 64: 1.04,
                                                          128: 9.9}[config.kwargs["BLOCK_SIZE"]])
    monkeypatch.setattr(bench_mod, "decides", lambda benchmark: True)
    monkeypatch.setattr(bench_mod, "short_regime", lambda benchmark: bursts)
    kernel = kernels.tuned_add()
    kernels.launch_add(kernel)
    assert kernel.best_config.kwargs == {"BLOCK_SIZE": 16}
    assert kernel.last_entry.result.time_ms == pytest.approx(1.01)
    assert candidate_times(kernel) == {16: 1.01, 32: 1.00, 64: 1.02, 128: 3.0}


def test_no_decision_without_a_tie(use_cache, fake, monkeypatch):
    use_cache()
    fake({16: 1.5, 32: 1.00, 64: 1.2, 128: 3.0})
    timed: list[int] = []

    def burst(config, problem):
        timed.append(config.kwargs["BLOCK_SIZE"])
        return 1.0

    monkeypatch.setattr(bench_mod, "decides", lambda benchmark: True)
    monkeypatch.setattr(bench_mod, "short_regime", lambda benchmark: FakeBenchmarkRunner(burst))
    kernel = kernels.tuned_add()
    kernels.launch_add(kernel)
    assert kernel.best_config.kwargs == {"BLOCK_SIZE": 32} and timed == []
