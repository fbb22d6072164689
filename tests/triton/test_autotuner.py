"""The cached autotuner on the CPU interpreter: hits, misses, stale entries, require_complete,
pruning, failed configs, incremental re-tune, hooks and triton.autotune compatibility.

Timings come from a deterministic fake benchmark wherever a test checks values."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import triton
from triton.runtime.autotuner import Autotuner as TritonAutotuner

from autotune_cache import CacheKey, MissingResultError
from autotune_cache.formats import load_results, save_results
from autotune_cache.triton import AllConfigsFailedError, Autotuner, autotune
from autotune_cache.triton.configs import canonical_proto_config
from autotune_cache.triton.device import INTERPRETER_DEVICE
from tests.triton import kernels

TABLE = {16: 4.0, 32: 2.0, 64: 1.5, 128: 3.0}


def candidate_times(kernel: Autotuner) -> dict[int, float | str]:
    """{BLOCK_SIZE: time_ms or failure} from the kernel's last entry."""
    out: dict[int, float | str] = {}
    for timing in kernel.last_entry.result.candidates:
        block = next(p.int_value for p in timing.config.params if p.name == "BLOCK_SIZE")
        out[block] = timing.failure or timing.time_ms
    return out


def test_is_a_triton_autotuner_with_its_api(use_cache, fake) -> None:
    use_cache()
    fake(TABLE)
    kernel = kernels.tuned_add()
    assert isinstance(kernel, TritonAutotuner)
    out, expected = kernels.launch_add(kernel)
    torch.testing.assert_close(out, expected)
    assert kernel.best_config.kwargs == {"BLOCK_SIZE": 64}
    assert {c.kwargs["BLOCK_SIZE"]: t[0] for c, t in kernel.configs_timings.items()} == TABLE
    assert kernel.keys == ["n"]
    assert kernel.arg_names == ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK_SIZE"]


def test_miss_records_every_candidate_then_new_instance_hits(use_cache, fake) -> None:
    cache = use_cache()
    bench = fake(TABLE)
    first = kernels.tuned_add()
    kernels.launch_add(first, n=100)
    assert bench.calls == [16, 32, 64, 128]
    assert candidate_times(first) == TABLE
    result = first.last_entry.result
    assert result.time_ms == 1.5 and result.timing_method == "fake"
    assert (cache.stats.misses, cache.stats.tuned, cache.stats.benchmarks) == (1, 1, 4)
    key = CacheKey.from_proto(first.last_entry.key)
    assert key.kernel == "add_kernel"
    assert key.problem == "n=100,out_ptr=float32,x_ptr=float32,y_ptr=float32"
    assert key.device == INTERPRETER_DEVICE
    assert dict(key.toolchain) == {"triton": triton.__version__}

    second = kernels.tuned_add()  # as a new process would build it: empty in-process memo
    out, expected = kernels.launch_add(second, n=100)
    torch.testing.assert_close(out, expected)
    assert bench.calls == [16, 32, 64, 128]  # nothing benchmarked again
    assert second.best_config.kwargs == {"BLOCK_SIZE": 64}
    assert cache.stats.hits == 1

    kernels.launch_add(second, n=300)  # another problem is another key
    assert bench.calls[4:] == [16, 32, 64, 128]
    assert cache.stats.misses == 2


def test_dumped_file_loads_in_a_fresh_cache_without_benchmarks(use_cache, fake,
                                                                 tmp_path: Path) -> None:
    dump = tmp_path / "k.autotune.textproto"
    cache = use_cache(dump_to=dump)
    fake(TABLE)
    kernels.launch_add(kernels.tuned_add(), n=64)
    cache.close()
    assert len(load_results(dump)) == 1

    cache = use_cache(load_from=(dump,), require_complete=True)
    bench = fake({})  # any benchmark call would raise KeyError
    out, expected = kernels.launch_add(kernels.tuned_add(), n=64)
    torch.testing.assert_close(out, expected)
    assert bench.calls == []
    assert (cache.stats.hits, cache.stats.misses) == (1, 0)
    assert cache.stats.saved_seconds > 0


def _restamp(path: Path, out: Path, **device: object) -> None:
    """Copy a results file with every entry's device replaced (a result from another GPU)."""
    entries = load_results(path)
    for entry in entries:
        for field, value in device.items():
            setattr(entry.key.device, field, value)
    save_results(out, entries)


def test_entry_for_another_device_is_stale_and_retuned(use_cache, fake, tmp_path: Path) -> None:
    dump = tmp_path / "cpu.textproto"
    use_cache(dump_to=dump)
    fake(TABLE)
    kernels.launch_add(kernels.tuned_add(), n=64)
    use_cache()
    gpu_file = tmp_path / "h200.textproto"
    _restamp(dump, gpu_file, name="NVIDIA H200", arch="sm_90", sm_count=132)

    cache = use_cache(load_from=(gpu_file,))
    bench = fake(TABLE)
    kernels.launch_add(kernels.tuned_add(), n=64)
    assert (cache.stats.misses, cache.stats.stale) == (1, 1)
    assert "add_kernel" in cache.stats.stale_keys[0]
    assert bench.calls == [16, 32, 64, 128]


def test_require_complete_names_kernel_problem_device_and_stale_entry(
        use_cache, fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dump = tmp_path / "cpu.textproto"
    use_cache(dump_to=dump)
    fake(TABLE)
    kernels.launch_add(kernels.tuned_add(), n=64)
    use_cache()
    gpu_file = tmp_path / "h200.textproto"
    _restamp(dump, gpu_file, name="NVIDIA H200", arch="sm_90", sm_count=132)

    monkeypatch.setenv("AUTOTUNE_REGEN_HINT", "bazel run //examples:add_test.regen")
    use_cache(load_from=(gpu_file,), require_complete=True)
    bench = fake(TABLE)
    with pytest.raises(MissingResultError) as err:
        kernels.launch_add(kernels.tuned_add(), n=64)
    message = str(err.value)
    assert "add_kernel" in message
    assert "n=64,out_ptr=float32,x_ptr=float32,y_ptr=float32" in message
    assert "cpu-interpreter" in message
    assert "NVIDIA H200" in message  # the near miss, i.e. why the cache is stale
    assert "bazel run //examples:add_test.regen" in message
    assert bench.calls == []


def test_changed_kernel_source_is_a_near_miss(use_cache, fake) -> None:
    cache = use_cache()
    fake(TABLE)
    kernels.launch_add(kernels.tuned_add(), n=64)
    edited = kernels.tuned_add()
    edited._source_fingerprint = "0" * 64  # as if the kernel body had been edited
    kernels.launch_add(edited, n=64)
    assert cache.stats.stale == 1
    assert cache.stats.tuned == 2


def test_early_config_prune_limits_what_is_benchmarked_and_keyed(use_cache, fake) -> None:
    use_cache()
    bench = fake(TABLE)
    seen_args: list[dict] = []

    def keep_small(configs, named_args, **kwargs):
        seen_args.append(dict(named_args))
        return [c for c in configs if c.kwargs["BLOCK_SIZE"] <= 32]

    kernel = kernels.tuned_add(prune_configs_by={"early_config_prune": keep_small})
    kernels.launch_add(kernel, n=50)
    assert bench.calls == [16, 32]
    assert candidate_times(kernel) == {16: 4.0, 32: 2.0}
    assert kernel.best_config.kwargs == {"BLOCK_SIZE": 32}
    assert seen_args[0]["n"] == 50

    unpruned = kernels.tuned_add()  # another candidate list is another key
    assert (CacheKey.from_proto(kernel.last_entry.key).configs_fingerprint
            != unpruned.cache_key(unpruned.configs, {"n": 50}).configs_fingerprint)


def test_perf_model_top_k_benchmarks_only_the_best_predicted(use_cache, fake) -> None:
    use_cache()
    bench = fake(TABLE)

    def predicted(**kwargs):  # predicts larger blocks are faster
        return 1.0 / kwargs["BLOCK_SIZE"]

    kernel = kernels.tuned_add(prune_configs_by={"perf_model": predicted, "top_k": 2})
    kernels.launch_add(kernel, n=50)
    assert sorted(bench.calls) == [64, 128]
    assert kernel.best_config.kwargs == {"BLOCK_SIZE": 64}


def test_failed_config_is_recorded_with_reason_and_skipped(use_cache, fake) -> None:
    use_cache()
    fake(TABLE, fail={64: "out of resources: shared memory (fake)"})
    kernel = kernels.tuned_add()
    out, expected = kernels.launch_add(kernel)
    torch.testing.assert_close(out, expected)
    times = candidate_times(kernel)
    assert times[64] == "RuntimeError: out of resources: shared memory (fake)"
    assert kernel.best_config.kwargs == {"BLOCK_SIZE": 32}
    assert kernel.last_entry.result.time_ms == 2.0


def test_real_interpreter_failure_is_recorded(use_cache) -> None:
    """A config whose block is not a power of two fails inside Triton at its first launch; the
    others are timed by the wall clock and the kernel still computes the right answer. Only
    the completed benchmark is counted."""
    cache = use_cache()
    kernel = autotune(configs=kernels.configs(24, 32), key=["n"])(kernels.add_kernel)
    out, expected = kernels.launch_add(kernel, n=40)
    torch.testing.assert_close(out, expected)
    assert kernel.best_config.kwargs == {"BLOCK_SIZE": 32}
    times = candidate_times(kernel)
    assert "power of 2" in str(times[24])
    assert isinstance(times[32], float) and times[32] > 0
    assert kernel.last_entry.result.timing_method == "wallclock-interpreter"
    assert cache.stats.benchmarks == 1


def test_chained_failure_reason_reaches_file_progress_and_error(
        use_cache, fake, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """A failure wrapped in an error that says nothing is recorded by its cause, in the results
    entry, the progress lines and AllConfigsFailedError."""
    cache = use_cache()
    monkeypatch.setenv("AUTOTUNE_PROGRESS", "1")

    def bench(config, problem):
        try:
            raise AssertionError(f"K >= 16 needed, BLOCK_SIZE={config.kwargs['BLOCK_SIZE']}")
        except AssertionError as e:
            raise RuntimeError() from e

    from autotune_cache.triton import fake_benchmark

    with fake_benchmark(bench), pytest.raises(AllConfigsFailedError) as err:
        kernels.launch_add(kernels.tuned_add(blocks=(16, 32)))
    assert "BLOCK_SIZE=16 num_warps=4 num_stages=2 num_ctas=1: AssertionError: K >= 16 needed, " \
        "BLOCK_SIZE=16" in str(err.value)
    assert "failed: AssertionError: K >= 16 needed, BLOCK_SIZE=32" in capsys.readouterr().err
    assert cache.stats.benchmarks == 0


def test_every_config_failing_raises_with_all_reasons(use_cache, fake) -> None:
    use_cache()
    fake(TABLE, fail={16: "bad sixteen", 32: "bad thirty-two"})
    with pytest.raises(AllConfigsFailedError) as err:
        kernels.launch_add(kernels.tuned_add(blocks=(16, 32)))
    assert "bad sixteen" in str(err.value) and "bad thirty-two" in str(err.value)


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


def test_reset_to_zero_keeps_accumulating_kernels_correct(use_cache) -> None:
    use_cache()
    kernel = autotune(configs=kernels.configs(16, 32, 64), key=["n"],
                      reset_to_zero=["out_ptr"])(kernels.accumulate_kernel)
    n = 90
    x = torch.rand(n, generator=torch.Generator().manual_seed(1))
    out = torch.zeros(n)
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, out, n)
    torch.testing.assert_close(out, x)  # benchmarks ran many times, yet one accumulation


def test_restore_value_keeps_in_place_kernels_correct(use_cache) -> None:
    use_cache()
    kernel = autotune(configs=kernels.configs(16, 32, 64), key=["n"],
                      restore_value=["x_ptr"])(kernels.double_in_place_kernel)
    n = 90
    x0 = torch.rand(n, generator=torch.Generator().manual_seed(2))
    x = x0.clone()
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, n)
    torch.testing.assert_close(x, x0 * 2)


def test_user_do_bench_is_used_like_triton(use_cache) -> None:
    use_cache()
    calls: list[tuple] = []

    def do_bench(kernel_call, quantiles):
        kernel_call()
        calls.append(tuple(quantiles))
        return [float(len(calls))] * len(quantiles)

    kernel = kernels.tuned_add(blocks=(16, 32, 64), do_bench=do_bench)
    out, expected = kernels.launch_add(kernel)
    torch.testing.assert_close(out, expected)
    assert calls == [(0.5, 0.2, 0.8)] * 3
    assert kernel.best_config.kwargs == {"BLOCK_SIZE": 16}  # the first call was fastest
    assert kernel.last_entry.result.timing_method == "user-do_bench"


def test_single_config_never_touches_the_cache(use_cache, fake) -> None:
    cache = use_cache()
    bench = fake(TABLE)
    out, expected = kernels.launch_add(kernels.tuned_add(blocks=(32,)))
    torch.testing.assert_close(out, expected)
    assert bench.calls == [] and not cache.stats.anything_happened


def test_cache_directory_entry_is_shared_by_new_tuners(use_cache, fake, tmp_path: Path) -> None:
    cache = use_cache(cache_dir=tmp_path / "dir")
    bench = fake(TABLE)
    kernels.launch_add(kernels.tuned_add(), n=33)
    assert len(list((tmp_path / "dir").rglob("*.textproto"))) == 1
    cache = use_cache(cache_dir=tmp_path / "dir")  # fresh memory tier: only the directory
    kernels.launch_add(kernels.tuned_add(), n=33)
    assert bench.calls == [16, 32, 64, 128]
    assert cache.stats.hits == 1


def test_progress_lines_name_every_benchmarked_config(
        use_cache, fake, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    use_cache()
    fake(TABLE, fail={128: "no registers left"})
    monkeypatch.setenv("AUTOTUNE_PROGRESS", "1")
    kernels.launch_add(kernels.tuned_add(), n=100)
    err = capsys.readouterr().err
    assert "tuning add_kernel [n=100," in err and "4 configs to benchmark, 0 timings reused" in err
    assert "[3/4] BLOCK_SIZE=64 num_warps=4 num_stages=2 num_ctas=1: 1.5000 ms" in err
    assert "[4/4] BLOCK_SIZE=128" in err and "failed: RuntimeError: no registers left" in err
    assert "best BLOCK_SIZE=64" in err

    monkeypatch.setenv("AUTOTUNE_PROGRESS", "0")
    kernels.launch_add(kernels.tuned_add(), n=101)
    assert "tuning add_kernel" not in capsys.readouterr().err


# ----- config pre_hooks survive the cache (the launched config is the candidate object) --------

def _zeroing_configs(calls: list[int]) -> list[triton.Config]:
    def zero_out(nargs: dict) -> None:
        calls.append(nargs["BLOCK_SIZE"])
        nargs["out_ptr"].zero_()

    return [triton.Config({"BLOCK_SIZE": b}, num_warps=4, num_stages=2, pre_hook=zero_out)
            for b in (16, 32, 64, 128)]


def _launch_accumulate(kernel: Autotuner, n: int = 90) -> tuple[torch.Tensor, torch.Tensor]:
    """out += x on an `out` that starts at 5: right only if the zeroing pre_hook ran."""
    x = torch.rand(n, generator=torch.Generator().manual_seed(3))
    out = torch.full((n,), 5.0)
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, out, n)
    return out, x


def test_config_pre_hook_runs_on_the_tuned_and_the_cached_launch(use_cache, fake,
                                                                  tmp_path: Path) -> None:
    calls: list[int] = []
    configs = _zeroing_configs(calls)
    cache = use_cache(cache_dir=tmp_path / "dir")
    bench = fake(TABLE)  # no benchmark launches: only the real launch touches `out`
    kernel = autotune(configs=configs, key=["n"])(kernels.accumulate_kernel)
    out, x = _launch_accumulate(kernel)
    torch.testing.assert_close(out, x)
    assert kernel.best_config is configs[2]  # BLOCK_SIZE=64, the candidate object itself
    assert calls == [64]
    assert {c.kwargs["BLOCK_SIZE"]: t[0] for c, t in kernel.configs_timings.items()} == TABLE
    assert all(c in configs for c in kernel.configs_timings)
    assert bench.calls == [16, 32, 64, 128] and cache.stats.tuned == 1

    # A fresh process: a new Cache reading the directory, a new autotuner, no benchmark allowed.
    calls.clear()
    cache = use_cache(cache_dir=tmp_path / "dir")
    bench = fake({})
    configs = _zeroing_configs(calls)
    again = autotune(configs=configs, key=["n"])(kernels.accumulate_kernel)
    out, x = _launch_accumulate(again)
    torch.testing.assert_close(out, x)
    assert (cache.stats.hits, cache.stats.misses, bench.calls) == (1, 0, [])
    assert again.best_config is configs[2] and calls == [64]
    assert len(again.configs_timings) == 4
    out, x = _launch_accumulate(again)  # the in-process memo keeps the candidate too
    torch.testing.assert_close(out, x)
    assert calls == [64, 64]


def test_candidates_differing_only_in_pre_hook_keep_their_own_timings(use_cache,
                                                                        tmp_path: Path) -> None:
    """Two candidates with the same parameters, one with a zeroing pre_hook: the recorded winner
    (the hooked one, timed faster) is launched with its hook on a hit as well."""
    calls: list[int] = []

    def zero_out(nargs: dict) -> None:
        calls.append(1)
        nargs["out_ptr"].zero_()

    def build() -> tuple[Autotuner, list[triton.Config]]:
        configs = [triton.Config({"BLOCK_SIZE": 32}, num_warps=4, num_stages=2),
                   triton.Config({"BLOCK_SIZE": 32}, num_warps=4, num_stages=2,
                                 pre_hook=zero_out)]
        return autotune(configs=configs, key=["n"])(kernels.accumulate_kernel), configs

    from autotune_cache.triton import fake_benchmark

    for attempt in range(2):  # tuning run, then a hit in a fresh Cache
        cache = use_cache(cache_dir=tmp_path / "dir")
        kernel, configs = build()
        with fake_benchmark(lambda config, problem: 1.0 if config.pre_hook else 2.0):
            out, x = _launch_accumulate(kernel)
        torch.testing.assert_close(out, x)
        assert kernel.best_config is configs[1]
        assert {id(c): t[0] for c, t in kernel.configs_timings.items()} == {
            id(configs[0]): 2.0, id(configs[1]): 1.0}
        assert (cache.stats.tuned, cache.stats.hits) == ((1, 0) if attempt == 0 else (0, 1))
    assert calls == [1, 1]


def test_match_candidates_pairs_ir_override_and_hook_configs_with_recorded_timings() -> None:
    from autotune_cache.proto import autotune_results_pb2 as pb
    from autotune_cache.triton.autotuner import match_candidates
    from autotune_cache.triton.configs import config_to_proto

    plain = triton.Config({"B": 16}, num_warps=4)
    override = triton.Config({"B": 16}, num_warps=4, ir_override="/x/kernel.ttgir")
    other = triton.Config({"B": 32}, num_warps=4, pre_hook=lambda nargs: None)
    entry = pb.Entry(result=pb.Result(config=config_to_proto(override), time_ms=1.0, candidates=[
        pb.Timing(config=config_to_proto(c), time_ms=ms)
        for c, ms in ((plain, 3.0), (override, 1.0), (other, 2.0))]))
    pairs = match_candidates(entry, [other, plain, override])
    assert [(c, t.time_ms) for c, t in pairs] == [(plain, 3.0), (override, 1.0), (other, 2.0)]
    assert Autotuner._winner(entry, pairs) is override


# ----- reused timings must have been measured the same way --------------------------------------

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


def test_interpreter_wall_clock_timings_are_not_reused_by_the_fake(use_cache, fake) -> None:
    use_cache()
    wall = kernels.tuned_add(blocks=(16, 32))
    kernels.launch_add(wall, n=70)
    assert wall.last_entry.result.timing_method == "wallclock-interpreter"
    bench = fake(TABLE)
    grown = kernels.tuned_add(blocks=(16, 32, 64))
    kernels.launch_add(grown, n=70)
    assert bench.calls == [16, 32, 64]
    assert candidate_times(grown) == {16: 4.0, 32: 2.0, 64: 1.5}


def test_recorded_timings_filter_on_the_exact_gpu_method() -> None:
    from autotune_cache.proto import autotune_results_pb2 as pb
    from autotune_cache.triton.configs import config_to_proto
    from autotune_cache.tuning import recorded_timings

    def entry(method: str, ms: float, tuned_at: str = "2026-01-01T00:00:00Z") -> pb.Entry:
        timing = pb.Timing(config=config_to_proto(triton.Config({"B": 1})), time_ms=ms)
        return pb.Entry(result=pb.Result(candidates=[timing], timing_method=method,
                                         tuned_at=tuned_at))

    entries = [entry("do_bench", 1.0), entry("do_bench(warmup=5,rep=20)", 2.0, "2027"),
               entry("cuda_graph", 3.0, "2028"), entry("", 4.0, "2029"), entry("fake", 5.0)]
    assert [t.time_ms for t in recorded_timings(entries, "do_bench").values()] == [1.0]
    assert [t.time_ms for t in recorded_timings(entries, "cuda_graph").values()] == [3.0]
    assert not recorded_timings(entries, "do_bench(warmup=25,rep=50)")


# ----- after waiting on a shared (directory or remote) lock, read the peer's result -------------

def test_waiting_on_a_remote_only_lock_reads_the_peers_result(use_cache, fake,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    import contextlib

    use_cache()
    fake(TABLE)
    peer = kernels.tuned_add()
    kernels.launch_add(peer, n=55)  # the peer's tuning, recorded on "the remote server"
    peer_entry = peer.last_entry

    cache = use_cache()  # this process: no directory, nothing in memory
    assert cache.store is None
    refreshed: list[CacheKey] = []

    @contextlib.contextmanager
    def remote_lock(key: CacheKey, timeout: float = 0.0):
        yield True  # held on the remote server after the peer released it

    def refresh(key: CacheKey, candidates=None):
        refreshed.append(key)
        return peer_entry

    monkeypatch.setattr(cache, "tune_lock", remote_lock)
    monkeypatch.setattr(cache, "refresh", refresh)
    bench = fake({})  # any benchmark would raise
    kernel = kernels.tuned_add()
    out, expected = kernels.launch_add(kernel, n=55)
    torch.testing.assert_close(out, expected)
    assert bench.calls == [] and kernel.last_entry is peer_entry
    assert [k.digest() for k in refreshed] == [CacheKey.from_proto(peer_entry.key).digest()]
    assert kernel.best_config is kernel.configs[2]
