"""Successive halving (bench.halving_stages): which benchmarks screen, and that the winner is
always one the configured benchmark timed."""

from __future__ import annotations

import pytest

from autotune_cache.triton import bench as bench_mod
from autotune_cache.triton.bench import (
    MIN_SURVIVORS,
    FakeBenchmarkRunner,
    GpuBenchmark,
    InterpreterBenchmark,
    UserBenchmark,
    halving_stages,
)
from tests.triton import kernels
from tests.triton.kernels import candidate_times


def test_default_gpu_benchmark_is_screened_twice_then_run_as_configured():
    configured = GpuBenchmark()
    stages = halving_stages(configured, 48)
    assert [(b.warmup, b.rep, keep) for b, keep in stages[:-1]] == [(1.0, 2.0, 4),
                                                                    (5.0, 20.0, 4)]
    assert stages[-1] == (configured, None)
    assert {b.method for b, _ in stages} == {"do_bench"}  # one method: timings stay comparable


# Not named `benchmark`: pytest-benchmark (installed on many GPU machines) owns that funcarg name
# and fails the whole worker on any other value.
@pytest.mark.parametrize("timer", [GpuBenchmark(use_cuda_graph=True), InterpreterBenchmark(),
                                   UserBenchmark(lambda f, quantiles: 1.0),
                                   FakeBenchmarkRunner(lambda c, p: 1.0)],
                         ids=["cuda_graph", "interpreter", "user", "fake"])
def test_only_event_timed_gpu_benchmarks_are_screened(timer):
    assert halving_stages(timer, 48) == [(timer, None)]


def test_few_candidates_or_a_short_rep_are_not_screened():
    assert len(halving_stages(GpuBenchmark(), MIN_SURVIVORS)) == 1
    short = GpuBenchmark(warmup=5, rep=20)
    assert [(b.rep, keep) for b, keep in halving_stages(short, 48)] == [(2.0, 4), (20, None)]


def test_the_winner_is_a_finalist_and_the_others_keep_their_screening_times(
        use_cache, fake, monkeypatch):
    """BLOCK_SIZE=128 screens slowest, so it is dropped; its screening time (0.5 ms, lower
    than any finalist's final time) must not make it the winner."""
    use_cache()
    final = fake({16: 5.0, 32: 4.0, 64: 6.0, 128: 0.1})
    screen = FakeBenchmarkRunner(lambda config, problem: {16: 0.2, 32: 0.3, 64: 0.1,
                                                          128: 0.5}[config.kwargs["BLOCK_SIZE"]])
    monkeypatch.setattr(bench_mod, "halving_stages",
                        lambda benchmark, n: [(screen, 2), (benchmark, None)])
    kernel = kernels.tuned_add()
    kernels.launch_add(kernel)
    assert sorted(final.calls) == [16, 32, 64]  # the 3 (MIN_SURVIVORS) best screened
    assert kernel.best_config.kwargs == {"BLOCK_SIZE": 32}
    assert candidate_times(kernel) == {16: 5.0, 32: 4.0, 64: 6.0, 128: 0.5}
    assert kernel.last_entry.result.time_ms == 4.0
