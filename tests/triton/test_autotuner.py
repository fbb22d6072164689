"""The cached autotuner on the CPU interpreter: hits, misses, stale entries, require_complete,
pruning, failed configs, progress, reset/restore hooks and triton.autotune compatibility.

Timings come from a deterministic fake benchmark wherever a test checks values."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import triton
from triton.runtime.autotuner import Autotuner as TritonAutotuner

from autotune_cache import CacheKey, MissingResultError
from autotune_cache.formats import load_results, save_results
from autotune_cache.triton import AllConfigsFailedError, autotune
from autotune_cache.triton.device import INTERPRETER_DEVICE
from tests.triton import kernels
from tests.triton.kernels import TABLE, candidate_times


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
    assert kernel.last_entry.result.timing_method == "cputime-interpreter"
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
    # The last line is the tuning's own profile: where its time went, stage by stage.
    best_line = next(line for line in err.splitlines() if "best BLOCK_SIZE=64" in line)
    assert re.search(r"tuned in \d+\.\d s \(timing 4 \d+\.\d s\)$", best_line), best_line

    monkeypatch.setenv("AUTOTUNE_PROGRESS", "0")
    kernels.launch_add(kernels.tuned_add(), n=101)
    assert "tuning add_kernel" not in capsys.readouterr().err
