"""Incremental re-tuning: a changed candidate list benchmarks only the new candidates, reusing
timings recorded under another list, and only timings measured the way this tuning measures.

Timings come from a deterministic fake benchmark wherever a test checks values."""

from __future__ import annotations

import triton

from autotune_cache.triton.configs import canonical_proto_config
from tests.triton import kernels
from tests.triton.kernels import TABLE, candidate_times


def test_incremental_retune_benchmarks_only_new_candidates(use_cache, fake) -> None:
    cache = use_cache()
    bench = fake({16: 4.0, 32: 2.0, 64: 1.5, 128: 1.0})
    kernels.launch_add(kernels.tuned_add(blocks=(16, 32, 64)), n=70)
    assert bench.calls == [16, 32, 64]

    grown = kernels.tuned_add(blocks=(16, 32, 64, 128))
    kernels.launch_add(grown, n=70)
    assert bench.calls[3:] == [128]  # only the new candidate
    assert candidate_times(grown) == {16: 4.0, 32: 2.0, 64: 1.5, 128: 1.0}
    assert grown.best_config.kwargs == {"BLOCK_SIZE": 128}
    assert cache.stats.benchmarks == 4

    shrunk = kernels.tuned_add(blocks=(16, 32))
    kernels.launch_add(shrunk, n=70)
    assert len(bench.calls) == 4  # a subset needs no benchmark at all
    assert shrunk.best_config.kwargs == {"BLOCK_SIZE": 32}
    assert {canonical_proto_config(t.config) for t in shrunk.last_entry.result.candidates} == {
        "BLOCK_SIZE=16,num_warps=4,num_stages=2,num_ctas=1",
        "BLOCK_SIZE=32,num_warps=4,num_stages=2,num_ctas=1",
    }


def test_incremental_retune_reuses_recorded_failures(use_cache, fake) -> None:
    use_cache()
    bench = fake(TABLE, fail={16: "too big"})
    kernels.launch_add(kernels.tuned_add(blocks=(16, 32)), n=70)
    grown = kernels.tuned_add(blocks=(16, 32, 64))
    kernels.launch_add(grown, n=70)
    assert bench.calls == [16, 32, 64]
    assert candidate_times(grown)[16] == "RuntimeError: too big"


def test_timings_are_reused_only_from_entries_with_this_timing_method(use_cache, fake) -> None:
    cache = use_cache()
    do_bench_calls: list[int] = []

    def do_bench(kernel_call, quantiles):
        do_bench_calls.append(1)
        return [10.0 + len(do_bench_calls)] * len(quantiles)

    # 1. Timed with the user's do_bench.
    kernels.launch_add(kernels.tuned_add(blocks=(16, 32, 64), do_bench=do_bench), n=70)
    assert len(do_bench_calls) == 3

    # 2. The fake benchmark does not reuse do_bench timings, even for a subset (which used to
    #    benchmark nothing and stamp do_bench times as "fake").
    bench = fake(TABLE)
    shrunk = kernels.tuned_add(blocks=(16, 32))
    kernels.launch_add(shrunk, n=70)
    assert bench.calls == [16, 32]
    assert candidate_times(shrunk) == {16: 4.0, 32: 2.0}
    assert shrunk.last_entry.result.timing_method == "fake"

    # 3. A fake-timed entry is reused by a later fake tuning: only the new candidate is timed.
    grown = kernels.tuned_add(blocks=(16, 32, 128))
    kernels.launch_add(grown, n=70)
    assert bench.calls == [16, 32, 128]
    assert candidate_times(grown) == {16: 4.0, 32: 2.0, 128: 3.0}

    # 4. Back to do_bench: only its own entry's timings (16, 32, 64) are reused.
    from autotune_cache.triton import set_fake_benchmark

    set_fake_benchmark(None)
    both = kernels.tuned_add(blocks=(16, 32, 64, 128), do_bench=do_bench)
    kernels.launch_add(both, n=70)
    assert len(do_bench_calls) == 4  # just 128
    assert candidate_times(both) == {16: 11.0, 32: 12.0, 64: 13.0, 128: 14.0}
    assert both.last_entry.result.timing_method == "user-do_bench"
    assert cache.stats.benchmarks == 3 + 2 + 1 + 1


def test_interpreter_cpu_time_timings_are_not_reused_by_the_fake(use_cache, fake) -> None:
    use_cache()
    wall = kernels.tuned_add(blocks=(16, 32))
    kernels.launch_add(wall, n=70)
    assert wall.last_entry.result.timing_method == "cputime-interpreter"
    bench = fake(TABLE)
    grown = kernels.tuned_add(blocks=(16, 32, 64))
    kernels.launch_add(grown, n=70)
    assert bench.calls == [16, 32, 64]
    assert candidate_times(grown) == {16: 4.0, 32: 2.0, 64: 1.5}


def test_recorded_timings_filter_on_the_exact_gpu_method() -> None:
    from autotune_cache.proto import autotune_results_pb2 as pb
    from autotune_cache.store.tuning import recorded_timings
    from autotune_cache.triton.configs import config_to_proto

    def entry(method: str, ms: float, tuned_at: str = "2026-01-01T00:00:00Z") -> pb.Entry:
        timing = pb.Timing(config=config_to_proto(triton.Config({"B": 1})), time_ms=ms)
        return pb.Entry(result=pb.Result(candidates=[timing], timing_method=method,
                                         tuned_at=tuned_at))

    entries = [entry("do_bench", 1.0), entry("do_bench(warmup=5,rep=20)", 2.0, "2027"),
               entry("cuda_graph", 3.0, "2028"), entry("", 4.0, "2029"), entry("fake", 5.0)]
    assert [t.time_ms for t in recorded_timings(entries, "do_bench").values()] == [1.0]
    assert [t.time_ms for t in recorded_timings(entries, "cuda_graph").values()] == [3.0]
    assert not recorded_timings(entries, "do_bench(warmup=25,rep=50)")
