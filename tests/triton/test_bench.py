"""Benchmark building blocks: quantiles, interpreter wall-clock timing, benchmark choice."""

from __future__ import annotations

import time

import numpy as np
import pytest

from autotune_cache.triton import bench, fake_benchmark


@pytest.mark.parametrize("times", [[3.0], [5.0, 1.0], [0.4, 0.1, 0.9, 0.3, 0.2, 0.7]])
def test_quantiles_match_numpy(times: list[float]) -> None:
    expected = np.quantile(times, bench.QUANTILES).tolist()
    assert bench.quantiles_of(times) == pytest.approx(expected)


def test_the_interpreter_benchmark_times_the_calls_cpu_time() -> None:
    """A call that waits 20 ms and computes for 4 ms reads 4 ms: the waiting is the machine's,
    not the config's (decision 0030)."""
    calls: list[float] = []

    def kernel_call() -> None:
        calls.append(time.perf_counter())
        time.sleep(0.02)
        end = time.process_time() + 0.004
        while time.process_time() < end:
            pass

    fastest, p20, p80 = bench.InterpreterBenchmark(rep=10.0, max_reps=3)(kernel_call, None, {})
    assert 2 <= len(calls) <= 4  # one warmup call, then 1..3 timed
    assert 4.0 <= fastest <= p20 <= p80 < 15.0  # the fastest call first: noise only adds


def test_benchmark_choice() -> None:
    def pick(**overrides: object) -> bench.Benchmark:
        args = {"interpreter": False, "do_bench": None, "warmup": None, "rep": None,
                "use_cuda_graph": False}
        args.update(overrides)
        return bench.choose_benchmark(**args)  # type: ignore[arg-type]

    gpu = pick(warmup=5, rep=20)
    assert isinstance(gpu, bench.GpuBenchmark) and (gpu.warmup, gpu.rep) == (5.0, 20.0)
    # Timings are reused only between equal methods, so warmup / rep are part of the name
    # (the defaults keep the plain name that committed entries carry).
    assert gpu.method == "do_bench(warmup=5,rep=20)"
    assert pick().method == "do_bench"
    assert pick(warmup=25, rep=100.0).method == "do_bench"
    assert pick(rep=50).method == "do_bench(warmup=25,rep=50)"
    assert pick(use_cuda_graph=True).method == "cuda_graph"
    assert pick(use_cuda_graph=True, warmup=5).method == "cuda_graph"  # graphs have no warmup
    assert pick(use_cuda_graph=True, rep=20).method == "cuda_graph(rep=20)"
    assert pick(interpreter=True).method == "cputime-interpreter"
    assert pick(interpreter=True, do_bench=lambda f, quantiles: 1.0).method == "user-do_bench"
    with fake_benchmark(lambda config, problem: 1.0):
        assert pick(interpreter=True, do_bench=lambda f, quantiles: 1.0).method == "fake"
    assert pick(interpreter=True).method == "cputime-interpreter"


class _FakeEvent:
    """A device event that reads a fake clock advanced by every kernel call."""

    clock = [0.0]

    def __init__(self, enable_timing: bool = False) -> None:
        self.t: float | None = None

    def record(self) -> None:
        self.t = self.clock[0]

    def elapsed_time(self, end: _FakeEvent) -> float:
        return end.t - self.t


class _FakeDevice:
    Event = _FakeEvent

    def __init__(self) -> None:
        self.syncs = 0

    def synchronize(self) -> None:
        self.syncs += 1


class _FakeDriver:
    def __init__(self) -> None:
        self.device = _FakeDevice()
        self.flushes = 0

    def get_device_interface(self) -> _FakeDevice:
        return self.device

    def get_empty_cache_for_benchmark(self) -> object:
        return object()

    def clear_cache(self, cache: object) -> None:
        self.flushes += 1


def test_gpu_benchmark_follows_do_bench_with_two_syncs(monkeypatch: pytest.MonkeyPatch) -> None:
    """do_bench's arithmetic on a fake device whose kernel takes exactly 0.5 ms."""
    from triton.runtime.driver import driver

    fake_driver = _FakeDriver()
    monkeypatch.setattr(driver, "_active", fake_driver)
    _FakeEvent.clock[0] = 0.0
    calls = []

    def kernel_call() -> None:
        calls.append(fake_driver.flushes)
        _FakeEvent.clock[0] += 0.5

    median, p20, p80 = bench.GpuBenchmark(warmup=5.0, rep=10.0)(kernel_call, None, {})
    assert (median, p20, p80) == (0.5, 0.5, 0.5)
    # 1 first call + 5 estimate calls + 5 ms / 0.5 ms warmup + 10 ms / 0.5 ms timed
    assert len(calls) == 1 + 5 + 10 + 20
    assert fake_driver.device.syncs == 2
    assert fake_driver.flushes == 5 + 20  # L2 flushed before every estimate and timed call
