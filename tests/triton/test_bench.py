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


def test_wall_clock_benchmark_times_the_call() -> None:
    calls: list[float] = []

    def kernel_call() -> None:
        calls.append(time.perf_counter())
        time.sleep(0.004)

    median, p20, p80 = bench.WallClockBenchmark(rep=10.0, max_reps=3)(kernel_call, None, {})
    assert 2 <= len(calls) <= 4  # one warmup call, then 1..3 timed
    assert 4.0 <= p20 <= median <= p80 < 1000.0


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
    assert pick(interpreter=True).method == "wallclock-interpreter"
    assert pick(interpreter=True, do_bench=lambda f, quantiles: 1.0).method == "user-do_bench"
    with fake_benchmark(lambda config, problem: 1.0):
        assert pick(interpreter=True, do_bench=lambda f, quantiles: 1.0).method == "fake"
    assert pick(interpreter=True).method == "wallclock-interpreter"


class _FakeEvent:
    """A device event that reads a fake clock advanced by every kernel call."""

    clock = [0.0]

    def __init__(self, enable_timing: bool = False) -> None:
        self.t: float | None = None

    def record(self) -> None:
        self.t = self.clock[0]

    def elapsed_time(self, end: _FakeEvent) -> float:
        return end.t - self.t

    def query(self) -> bool:
        return True  # the fake device runs every call at once: it has reached every event


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

    timer = bench.GpuBenchmark(warmup=5.0, rep=10.0, clock=_HostClock())
    median, p20, p80 = timer(kernel_call, None, {})
    assert (median, p20, p80) == (0.5, 0.5, 0.5)
    # 1 first call + 5 estimate calls + 5 ms / 0.5 ms warmup + 10 ms / 0.5 ms timed
    assert len(calls) == 1 + 5 + 10 + 20
    assert fake_driver.device.syncs == 2
    assert fake_driver.flushes == 5 + 20  # L2 flushed before every estimate and timed call


class _HostClock:
    """A host clock that advances 30 us per reading, plus `stall` seconds when told to."""

    def __init__(self) -> None:
        self.now = 0.0
        self.stall = 0.0

    def __call__(self) -> float:
        self.now += 30e-6 + self.stall
        self.stall = 0.0
        return self.now


def _stalling_run(monkeypatch: pytest.MonkeyPatch, stalled: set[int], device_waits: bool
                  ) -> tuple[list[float], list[int], int]:
    """Time a 0.5 ms fake kernel whose timed calls numbered in `stalled` (counting from the first
    timed call) stall the host 4 ms inside their interval; with `device_waits`, the device waits
    for the host (the stall lands in the interval, and the start event has completed). Returns
    the quantiles, the device times of the timed calls, and the stalls counted."""
    from triton.runtime.driver import driver

    fake_driver = _FakeDriver()
    monkeypatch.setattr(driver, "_active", fake_driver)
    _FakeEvent.clock[0] = 0.0
    host = _HostClock()
    timed = [0]
    first_timed = 1 + 5 + 10  # the first call, the estimate, the warmup (5 ms / 0.5 ms)

    reached = {"value": True}
    monkeypatch.setattr(_FakeEvent, "query", lambda self: reached["value"])

    calls = [0]

    def kernel_call() -> None:
        calls[0] += 1
        _FakeEvent.clock[0] += 0.5
        if calls[0] > first_timed:
            index = timed[0]
            timed[0] += 1
            if index in stalled:
                host.stall = 4e-3
                if device_waits:
                    _FakeEvent.clock[0] += 4.0  # the device idles inside the interval
            reached["value"] = device_waits or index not in stalled

    before = bench.stalled_calls()
    quantiles = bench.GpuBenchmark(warmup=5.0, rep=10.0, clock=host)(kernel_call, None, {})
    return quantiles, timed, bench.stalled_calls() - before


def test_a_host_stall_inside_an_interval_is_not_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compile threads holding the GIL stall the benchmarking thread between its start and end
    events; where the device waited for it, that call is dropped, not timed as the kernel's."""
    stalled = {1, 4, 7, 8, 15}
    quantiles, timed, counted = _stalling_run(monkeypatch, stalled, device_waits=True)
    assert quantiles == [0.5, 0.5, 0.5]
    assert counted == len(stalled)
    assert timed == [20]  # 15 of 20 kept: no second round


def test_a_stall_while_the_device_is_still_busy_is_kept(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """When the device has not reached the start event yet, a host stall does not enter the
    interval: the call is timed as usual and nothing is dropped."""
    quantiles, timed, counted = _stalling_run(monkeypatch, {2, 3}, device_waits=False)
    assert quantiles == [0.5, 0.5, 0.5]
    assert counted == 0 and timed == [20]


def test_mostly_stalled_calls_are_timed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over half of a round stalled: the missing calls are timed in another round, so the
    quantiles come from at least half the planned calls, all of them clean."""
    stalled = set(range(12))  # 12 of the first 20 timed calls
    quantiles, timed, counted = _stalling_run(monkeypatch, stalled, device_waits=True)
    assert quantiles == [0.5, 0.5, 0.5]
    assert counted == 12
    assert timed == [20 + 12]  # a second round of the 12 dropped calls, none stalled


def test_rounds_stop_with_the_clean_calls_they_got(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host that stalls in almost every call: STALL_ROUNDS rounds, then the quantiles of the
    clean calls (each round's fastest is clean), never a stalled time."""
    clean = {0, 20, 39}  # the first call of each round (20, then 19, then 18 calls)
    quantiles, timed, counted = _stalling_run(monkeypatch, set(range(100)) - clean,
                                              device_waits=True)
    assert quantiles == [0.5, 0.5, 0.5]
    assert timed == [20 + 19 + 18]
    assert counted == 19 + 18 + 17
