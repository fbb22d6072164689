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
        return False  # the device is behind the host: it has not reached the event yet


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


def _late_run(monkeypatch: pytest.MonkeyPatch, late: set[int]
              ) -> tuple[list[float], int, list[int], int]:
    """Time a 0.5 ms fake kernel whose timed calls numbered in `late` (counting from the first
    timed call) find the device already past their start event, having waited 4 ms for the
    host inside the interval. Returns the quantiles, the timed calls made, the device sleeps
    asked for after them, and the late calls counted."""
    from triton.runtime.driver import driver

    fake_driver = _FakeDriver()
    sleeps: list[int] = []
    fake_driver.device._sleep = sleeps.append  # type: ignore[attr-defined]
    monkeypatch.setattr(driver, "_active", fake_driver)
    _FakeEvent.clock[0] = 0.0
    first_timed = 1 + 5 + 10  # the first call, the estimate, the warmup (5 ms / 0.5 ms)
    calls = [0]
    reached = {"value": False}
    monkeypatch.setattr(_FakeEvent, "query", lambda self: reached["value"])
    slept_before: list[int] = []

    def kernel_call() -> None:
        calls[0] += 1
        index = calls[0] - first_timed - 1
        reached["value"] = index in late
        if index >= 0:
            slept_before.append(len(sleeps))
        _FakeEvent.clock[0] += 0.5 + (4.0 if index in late else 0.0)

    before = bench.late_calls()
    quantiles = bench.GpuBenchmark(warmup=5.0, rep=10.0)(kernel_call, None, {})
    assert all(s == bench.LEAD_CYCLES for s in sleeps)
    return quantiles, calls[0] - first_timed, slept_before, bench.late_calls() - before


def test_a_call_the_device_waited_in_is_not_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compile threads holding the GIL delay the benchmarking thread: where the device reached
    a call's start event before its end was queued, the call is dropped, not timed as the
    kernel's, and the device is put behind the host again with a sleep."""
    late = {1, 4, 7, 8, 15}
    quantiles, timed, slept_before, counted = _late_run(monkeypatch, late)
    assert quantiles == [0.5, 0.5, 0.5]
    assert counted == len(late)
    assert timed == 20  # 15 of 20 on time: no second round
    assert slept_before[2] == 1 and slept_before[5] == 2  # a sleep after each late call


def test_a_host_ahead_of_the_device_drops_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    quantiles, timed, slept_before, counted = _late_run(monkeypatch, set())
    assert quantiles == [0.5, 0.5, 0.5]
    assert (timed, counted, slept_before[-1]) == (20, 0, 0)  # do_bench's calls, no sleep


def test_mostly_late_calls_are_timed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over half of a round late: the missing calls are timed in another round, so the
    quantiles come from at least half the planned calls, all of them on time."""
    quantiles, timed, _, counted = _late_run(monkeypatch, set(range(12)))
    assert quantiles == [0.5, 0.5, 0.5]
    assert counted == 12
    assert timed == 20 + 12  # a second round of the 12 dropped calls, none late


def test_rounds_stop_and_a_device_never_on_time_counts_every_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """LATE_ROUNDS rounds at most; with some calls on time their quantiles, never a late
    time; with none ever on time, every call counts (what do_bench measures)."""
    on_time = {0, 20, 39}  # the first call of each round (20, then 19, then 18 calls)
    quantiles, timed, _, counted = _late_run(monkeypatch, set(range(100)) - on_time)
    assert quantiles == [0.5, 0.5, 0.5]
    assert timed == 20 + 19 + 18 and counted == 19 + 18 + 17
    quantiles, timed, _, counted = _late_run(monkeypatch, set(range(100)))
    assert quantiles[0] == pytest.approx(4.5)
    assert timed == 20 * bench.LATE_ROUNDS
