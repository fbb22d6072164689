"""Timing one candidate config: on a GPU, under the CPU interpreter, or with an injected fake.

Every benchmark returns `[median, p20, p80]` in milliseconds, the quantiles `triton.autotune`
asks `do_bench` for; the first decides the winner and is what the results file records (the
interpreter's puts its fastest call there: InterpreterBenchmark).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

QUANTILES: tuple[float, ...] = (0.5, 0.2, 0.8)

# A deterministic benchmark for tests: (config, problem) -> milliseconds. Raising marks the config
# as failed, with the exception as its recorded reason.
FakeBenchmark = Callable[[Any, Mapping[str, Any]], float]

_fake: FakeBenchmark | None = None


def set_fake_benchmark(fn: FakeBenchmark | None) -> FakeBenchmark | None:
    """Install (or, with None, remove) a process-wide fake benchmark; returns the previous one.

    While installed, no kernel is launched for timing: each candidate's time is `fn(config,
    problem)`. The winning config still launches for real, so results stay correct."""
    global _fake
    previous, _fake = _fake, fn
    return previous


@contextlib.contextmanager
def fake_benchmark(fn: FakeBenchmark) -> Iterator[None]:
    """Use `fn` as the benchmark inside the `with` block (see set_fake_benchmark)."""
    previous = set_fake_benchmark(fn)
    try:
        yield
    finally:
        set_fake_benchmark(previous)


def quantiles_of(times: Sequence[float], quantiles: Sequence[float] = QUANTILES) -> list[float]:
    """Linear-interpolated quantiles, as numpy.quantile / triton.testing compute them."""
    ordered = sorted(times)
    n = len(ordered)
    out = []
    for q in quantiles:
        point = q * (n - 1)
        lo, hi = math.floor(point), math.ceil(point)
        out.append(ordered[lo] + (ordered[hi] - ordered[lo]) * (point - lo))
    return out


class Benchmark(Protocol):
    """Times one candidate: `kernel_call` launches it (with the autotuner's hooks)."""

    method: str

    def __call__(self, kernel_call: Callable[[], Any], config: Any,
                 problem: Mapping[str, Any]) -> list[float]: ...


DEFAULT_WARMUP_MS = 25.0
DEFAULT_REP_MS = 100.0


def gpu_timing_method(warmup: float, rep: float, use_cuda_graph: bool) -> str:
    """The recorded `timing_method` of a GPU benchmark. Timings are only reused between entries
    with equal methods, so everything that changes how a time is measured is in the name:
    `do_bench` / `cuda_graph` with the default warmup and rep, else e.g.
    `do_bench(warmup=10,rep=50)` or `cuda_graph(rep=50)` (CUDA-graph timing has no warmup)."""
    if use_cuda_graph:
        return "cuda_graph" if rep == DEFAULT_REP_MS else f"cuda_graph(rep={rep:g})"
    if (warmup, rep) == (DEFAULT_WARMUP_MS, DEFAULT_REP_MS):
        return "do_bench"
    return f"do_bench(warmup={warmup:g},rep={rep:g})"


@dataclass
class GpuBenchmark:
    """`triton.testing.do_bench` semantics with two host syncs per config instead of three.

    Warmup and repetition counts come from `warmup` / `rep` milliseconds divided by a 5-call
    estimate; the L2 cache is flushed before every timed call; each call is bracketed by device
    events and all of them are read after one final synchronize. With `use_cuda_graph`, timing
    follows `triton.testing.do_bench_cudagraph` (calls captured in a CUDA graph and replayed)."""

    warmup: float = DEFAULT_WARMUP_MS
    rep: float = DEFAULT_REP_MS
    use_cuda_graph: bool = False

    def __post_init__(self) -> None:
        self.method = gpu_timing_method(self.warmup, self.rep, self.use_cuda_graph)
        self._flush_buffer: Any = None

    def shorter(self, warmup: float, rep: float) -> GpuBenchmark:
        """This benchmark with other warmup and rep, under this one's timing method: a stage
        that screens or decides for it (its times are compared with this one's)."""
        stage = GpuBenchmark(warmup=warmup, rep=rep)
        stage.method = self.method
        return stage

    def __call__(self, kernel_call: Callable[[], Any], config: Any,
                 problem: Mapping[str, Any]) -> list[float]:
        if self.use_cuda_graph:
            from triton.testing import do_bench_cudagraph

            return list(do_bench_cudagraph(kernel_call, rep=int(self.rep),
                                           quantiles=list(QUANTILES)))
        from triton.runtime.driver import driver

        active = driver.active
        device = active.get_device_interface()
        if self._flush_buffer is None:
            self._flush_buffer = active.get_empty_cache_for_benchmark()
        flush = self._flush_buffer

        kernel_call()  # first launch: loads the module, surfaces OutOfResources
        start, end = device.Event(enable_timing=True), device.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            active.clear_cache(flush)
            kernel_call()
        end.record()
        device.synchronize()  # sync 1 of 2: the estimate
        estimate_ms = start.elapsed_time(end) / 5
        n_warmup = max(1, int(self.warmup / estimate_ms)) if estimate_ms > 0 else 1000
        n_repeat = max(1, int(self.rep / estimate_ms)) if estimate_ms > 0 else 1000
        starts = [device.Event(enable_timing=True) for _ in range(n_repeat)]
        ends = [device.Event(enable_timing=True) for _ in range(n_repeat)]
        for _ in range(n_warmup):
            kernel_call()
        for i in range(n_repeat):
            active.clear_cache(flush)
            starts[i].record()
            kernel_call()
            ends[i].record()
        device.synchronize()  # sync 2 of 2: every timed call
        return quantiles_of([s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)])


@dataclass
class InterpreterBenchmark:
    """CPU-time timing for TRITON_INTERPRET=1, where there is no device to time with.

    Interpreter timings rank configs by numpy work, not GPU speed; they exist so that the whole
    tune -> record -> reload flow runs on a CPU. The tuning times the candidates in `rounds`
    interleaved rounds (tune.py, `rounds_of`), each candidate once per round, and keeps its
    fastest; one call of this benchmark is one candidate's round: `warmup_calls` untimed calls
    the first time it meets the config, then timed calls until `rep` milliseconds have passed
    (at least `min_reps`, at most `max_reps`).

    A call's time is the CPU time the process spent in it (`time.process_time`), not the wall
    clock, and the time reported first (the one recorded) is the fastest call, not the median:
    the interpreter's work is the process's own, and what a busy machine adds (another process
    on the core, a preemption) is only ever added. Measured on the 2-core CI machine (decision
    0030): with the machine oversubscribed, wall-clock calls of a 4 ms kernel read 8, 12, 16 or
    20 ms (whole scheduler slices added), and three configs doing the same work were picked
    apart in 3 of 14 re-dumps even by their fastest of six calls in three rounds."""

    warmup_calls: int = 1
    rep: float = 4.0
    min_reps: int = 1
    max_reps: int = 2
    rounds: int = 3
    method: str = "cputime-interpreter"
    _warmed: set[int] = field(default_factory=set, repr=False)

    def __call__(self, kernel_call: Callable[[], Any], config: Any,
                 problem: Mapping[str, Any]) -> list[float]:
        if id(config) not in self._warmed:
            self._warmed.add(id(config))
            for _ in range(self.warmup_calls):
                kernel_call()
        times: list[float] = []
        began = time.process_time()
        while len(times) < self.min_reps or (
            len(times) < self.max_reps and (time.process_time() - began) * 1e3 < self.rep
        ):
            t0 = time.process_time()
            kernel_call()
            times.append((time.process_time() - t0) * 1e3)
        _, p20, p80 = quantiles_of(times)
        return [min(times), p20, p80]


def rounds_of(benchmark: Benchmark) -> int:
    """How many interleaved rounds the tuning times each candidate in (the fastest round
    kept): the interpreter's takes InterpreterBenchmark.rounds, every other one."""
    return getattr(benchmark, "rounds", 1)


@dataclass
class UserBenchmark:
    """A `do_bench=` function given to the decorator, called as triton.autotune calls it."""

    do_bench: Callable[..., Any]
    method: str = "user-do_bench"

    def __call__(self, kernel_call: Callable[[], Any], config: Any,
                 problem: Mapping[str, Any]) -> list[float]:
        result = self.do_bench(kernel_call, quantiles=QUANTILES)
        if isinstance(result, (int, float)):
            return [float(result)] * len(QUANTILES)
        return [float(x) for x in result]


@dataclass
class FakeBenchmarkRunner:
    """Runs the installed fake benchmark; never launches the kernel."""

    fn: FakeBenchmark
    method: str = "fake"

    def __call__(self, kernel_call: Callable[[], Any], config: Any,
                 problem: Mapping[str, Any]) -> list[float]:
        return [float(self.fn(config, problem))] * len(QUANTILES)


# Successive halving (docs/decisions/0013-successive-halving.md): every candidate is first
# screened with a short benchmark, the best quarter is timed again with a longer one, and the best
# few of those with the configured benchmark. Each screening stage: (warmup ms, rep ms, keep 1 in
# N). The first stage only has to drop the clearly slow: on the H200 the best quarter of the
# brief's 48 matmul configs spans 1.0-1.45x of the fastest, the rest up to 27x, so a 2 ms rep
# (8-20 timed calls at those sizes) ranks it. 0013's addendum has what the longer stages cost.
SCREENING_STAGES: tuple[tuple[float, float, int], ...] = ((1.0, 2.0, 4), (5.0, 20.0, 4))
# Never fewer candidates than this reach the next stage.
MIN_SURVIVORS = 3


def halving_stages(benchmark: Benchmark, candidates: int
                   ) -> list[tuple[Benchmark, int | None]]:
    """The stages to time `candidates` candidates with: (benchmark, keep 1 in N) pairs, the
    last one the configured benchmark with None. Only event-timed GPU benchmarks are screened
    (not CUDA graphs, the user's do_bench, the interpreter or the fake), only when there are
    more candidates than MIN_SURVIVORS, and only with stages shorter than the configured one.

    Screening only decides which candidates are timed again: the winner is always chosen among
    those timed by the configured benchmark (plus reused timings). A candidate dropped early
    records its last, shorter stage's median, under the same timing method."""
    final: list[tuple[Benchmark, int | None]] = [(benchmark, None)]
    if (not isinstance(benchmark, GpuBenchmark) or benchmark.use_cuda_graph
            or candidates <= MIN_SURVIVORS):
        return final
    stages: list[tuple[Benchmark, int | None]] = []
    for warmup, rep, keep in SCREENING_STAGES:
        if rep < benchmark.rep:
            stages.append((benchmark.shorter(min(warmup, benchmark.warmup), rep), keep))
    return stages + final


# The final decision among the leaders (docs/decisions/0028-deciding-among-leaders.md): the
# finalists within TIE_MARGIN of the fastest, timed by the configured benchmark, are the leaders;
# when there are two or more, each is timed again in DECIDE_ROUNDS interleaved rounds, each round
# in a rotated order, with the short benchmark SHORT_REGIME (warmup ms, rep ms): bursts below the
# GPU's power cap, where a test suite runs its kernels, while the configured 100 ms benchmark
# runs at the cap, as training does. The leader whose worst slowdown over the two regimes is
# least wins.
TIE_MARGIN = 0.03
DECIDE_ROUNDS = 3
# The warmup is that of scenario D's bursts (bench/triton_matmul_workload.py --quality), so
# that the decision and the check of it time a burst alike.
SHORT_REGIME = (10.0, 25.0)
# Each burst starts after this long idle, so that it runs below the power cap, as a test's
# launches do, and not in the heat the configured benchmark left. Measured on the H200
# (bench/power_gap.py; its first run is in the git history of bench/results/): right after a
# 100 ms benchmark a 25 ms burst of the 4096^3 leaders reads 13 % slow, after 10 ms idle 5-7 %,
# after 50 ms 1.0-1.4 % and after 100 ms or more as rested (within 1 %, the run's noise).
# 50 ms idles half as long as 100 ms would: 0.3 s less for a tie of two leaders.
SHORT_GAP_S = 0.05


def decides(benchmark: Benchmark) -> bool:
    """Whether a tuning with `benchmark` decides among its leaders: event-timed GPU benchmarks
    only (not CUDA graphs, the user's do_bench, the interpreter or the fake), whose configured
    rep is longer than the short regime's."""
    return (isinstance(benchmark, GpuBenchmark) and not benchmark.use_cuda_graph
            and benchmark.rep > SHORT_REGIME[1])


def short_regime(benchmark: Benchmark) -> Benchmark:
    """The short benchmark the leaders are timed again with (SHORT_REGIME); only for a
    benchmark that `decides`."""
    assert isinstance(benchmark, GpuBenchmark), "only a GPU benchmark decides (decides())"
    return benchmark.shorter(*SHORT_REGIME)


def leaders(times: Mapping[int, float], margin: float = TIE_MARGIN) -> list[int]:
    """The candidates within `margin` of the fastest of `times`, fastest first."""
    if not times:
        return []
    best = min(times.values())
    return sorted((i for i, t in times.items() if t <= best * (1 + margin)),
                  key=lambda i: (times[i], i))


def _idle() -> None:
    time.sleep(SHORT_GAP_S)


def decide(tied: Sequence[int], sustained: Mapping[int, float],
           time_short: Callable[[int], float], rounds: int = DECIDE_ROUNDS,
           pause: Callable[[], None] = _idle) -> tuple[int, dict[int, float]]:
    """The leader among `tied` to keep, and each leader's median time in the short regime.

    Each leader is timed by `time_short(i)` once per round, after `pause()` (SHORT_GAP_S idle),
    `rounds` rounds, round r starting at leader r (mod the count), so no leader always runs
    first after another's heat. A leader whose re-timing raises is out. Each remaining leader's
    score is its worst slowdown over the two regimes: its median short time over the best
    median, and its `sustained` time (the configured benchmark's) over the best of those; the
    least score wins, then the faster sustained time, then the earlier candidate."""
    short: dict[int, list[float]] = {i: [] for i in tied}
    out: set[int] = set()
    for r in range(rounds):
        for i in [*tied[r % len(tied):], *tied[:r % len(tied)]]:
            if i in out:
                continue
            pause()
            try:
                short[i].append(time_short(i))
            except Exception:  # noqa: BLE001 - this leader cannot be re-timed: not chosen
                out.add(i)
    medians = {i: statistics.median(ts) for i, ts in short.items() if i not in out and ts}
    if not medians:
        return tied[0], {}
    best_short = min(medians.values())
    best_sustained = min(sustained[i] for i in medians)

    def score(i: int) -> tuple[float, float, int]:
        return (max(medians[i] / best_short, sustained[i] / best_sustained), sustained[i], i)

    return min(medians, key=score), medians


def choose_benchmark(*, interpreter: bool, do_bench: Callable[..., Any] | None,
                     warmup: float | None, rep: float | None,
                     use_cuda_graph: bool) -> Benchmark:
    """The benchmark for this tuning: the fake when installed, else the user's do_bench, else
    wall clock under the interpreter, else GPU events."""
    if _fake is not None:
        return FakeBenchmarkRunner(_fake)
    if do_bench is not None:
        return UserBenchmark(do_bench)
    if interpreter:
        return InterpreterBenchmark()
    return GpuBenchmark(warmup=DEFAULT_WARMUP_MS if warmup is None else float(warmup),
                        rep=DEFAULT_REP_MS if rep is None else float(rep),
                        use_cuda_graph=use_cuda_graph)
