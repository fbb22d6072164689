"""Timing a Triton kernel's candidates: the tune callback the autotuner hands `Cache.resolve`.

`KernelTuning` is built for one launch that may have to tune. Called with the cache's TuneJob on
a miss, it compiles the candidates of `job.todo` in parallel (on a GPU), benchmarks them under the
device's benchmarking lock, screening with shorter benchmarks first (bench.halving_stages), and
returns their timings; the cache reuses recorded timings for the rest, picks and records the
winner.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from autotune_cache.cache import get_cache
from autotune_cache.errors import AutotuneCacheError
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store.tuning import Tuned, TuneJob
from autotune_cache.triton import bench as bench_mod
from autotune_cache.triton import scheduler
from autotune_cache.triton.benchlock import device_bench_lock
from autotune_cache.triton.compile import Queued, compile_candidates, failure_reason
from autotune_cache.triton.configs import describe_config, match_text
from autotune_cache.triton.device import device_identity, interpreter_active
from autotune_cache.triton.problem import problem_key
from autotune_cache.triton.progress import Progress


class Tuner(Protocol):
    """What a tuning needs of the autotuner (autotuner.py) that launched it: Triton's
    Autotuner's attributes and hooks, and ours. A protocol, so that this module (and those
    below the autotuner) never import it."""

    fn: Any
    kernel_name: str
    arg_names: list[str]
    keys: list[str]
    nargs: dict[str, Any] | None
    best_config: Any
    pre_hook: Callable[..., Any]
    post_hook: Callable[..., Any]
    user_do_bench: Callable[..., Any] | None
    bench_warmup: float | None
    bench_rep: float | None
    use_cuda_graph: bool
    bench_time: float
    compiled_specializations: dict[str, str]

    def full_nargs(self, config: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]: ...

    def launch_kwargs_of(self, config: Any) -> dict[str, Any]: ...


class ConflictingMetaParametersError(AutotuneCacheError, ValueError):
    """The launch passes a meta-parameter that a candidate config also sets (Triton raises a
    ValueError with the same text; this is one, so `except ValueError` keeps working)."""


def check_meta_conflicts(configs: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """Raise ConflictingMetaParametersError, with Triton's message, when a launch keyword is
    also one of a candidate's meta-parameters. Checked before anything is compiled."""
    for config in configs:
        conflicts = kwargs.keys() & config.kwargs.keys()
        if conflicts:
            raise ConflictingMetaParametersError(
                f"Conflicting meta-parameters: {', '.join(sorted(conflicts))}."
                " Make sure that you don't re-define auto-tuned symbols.")


def _rep_of(benchmark: bench_mod.Benchmark) -> str:
    """A progress label's suffix: the rounds of a benchmark timed in rounds (the
    interpreter's), else the rep of one that has one (the GPU's), else none."""
    rounds = bench_mod.rounds_of(benchmark)
    if rounds > 1:
        return f" in {rounds} rounds"
    rep = getattr(benchmark, "rep", None)
    return f" at {rep:g} ms" if isinstance(rep, (int, float)) else ""


class KernelTuning:
    """The tune callback for one launch of `tuner` with `args` / `kwargs`, choosing among
    `configs` (the pruned candidates, in the order the cache's candidates have).

    `benchmark` (and its `method`, the timing method the cache reuses timings by) is chosen at
    construction. After a call, `progress` reports the tuning (the autotuner prints its last
    line once the winner is recorded) and `measured` says whether anything was benchmarked."""

    def __init__(self, tuner: Tuner, configs: Sequence[Any], args: Sequence[Any],
                 kwargs: dict[str, Any], compile_workers: int) -> None:
        self.tuner = tuner
        self.configs = configs
        self.args = args
        self.kwargs = kwargs
        self.compile_workers = compile_workers
        self.benchmark = bench_mod.choose_benchmark(
            interpreter=interpreter_active(), do_bench=tuner.user_do_bench,
            warmup=tuner.bench_warmup, rep=tuner.bench_rep, use_cuda_graph=tuner.use_cuda_graph)
        self.progress: Progress | None = None
        self.measured = False
        # Set by deferred.py when the tuning runs at the end of a dump run: the candidates'
        # compiles were queued at the launch, and the arguments are a snapshot of the launch's.
        self.queued: Queued | None = None

    def use_snapshot(self, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        """Tune later, on `args` / `kwargs` (a snapshot of the launch's); deferred.py then sets
        `queued`, the candidates' compiles, so that none is compiled when called."""
        self.args, self.kwargs = args, kwargs

    def __call__(self, job: TuneJob) -> Tuned:
        check_meta_conflicts(self.configs, self.kwargs)
        tuner = self.tuner
        self.progress = Progress(tuner.kernel_name, job.key.problem, str(job.key.device),
                                 total=len(self.configs), reused=len(job.reused),
                                 configured=get_cache().configured)
        started = time.perf_counter()
        timings, completed, finalists, specs = self._benchmark(list(job.todo))
        tuner.bench_time = time.perf_counter() - started
        self.measured = bool(timings)
        # A candidate compiled by an earlier tuning in this process (another problem with the
        # same specialization) starts no compile now: its last recorded data stands in. Were it
        # for another specialization, a preload of it would only be wasted, never launched.
        for i, spec in specs.items():
            tuner.compiled_specializations[match_text(self.configs[i])] = spec
        known = tuner.compiled_specializations
        return Tuned(timings=timings, benchmarks=completed,
                     finalists=finalists if timings else None,
                     specializations={i: known[match_text(c)] for i, c in enumerate(self.configs)
                                      if match_text(c) in known})

    def prepare(self) -> Callable[[Any], None]:
        """The hooks to run before a candidate is specialised (see compile.py): the config's
        pre_hook, then a user-defined decorator-level pre_hook, as Triton runs them before each
        launch. Not the built-in reset_to_zero / restore_value hook (it cannot change how the
        arguments specialise), and never the post_hook: nothing was launched for it to see."""
        tuner = self.tuner
        user_pre_hook = getattr(tuner, "user_defined_pre_hook", False)

        def prepare(config: Any) -> None:
            full_nargs = tuner.full_nargs(config, self.kwargs)
            if config.pre_hook is not None:
                config.pre_hook(full_nargs)
            if user_pre_hook:
                tuner.pre_hook(full_nargs)

        return prepare

    def _kernel_call(self, config: Any) -> Callable[[], None]:
        """One launch of `config` with the hooks triton.autotune runs around each benchmark:
        the config's pre_hook first, so the arguments are in the state that candidate's hook
        leaves them whatever ran before."""
        tuner = self.tuner
        current = dict(self.kwargs, **tuner.launch_kwargs_of(config))
        full_nargs = tuner.full_nargs(config, self.kwargs)

        def kernel_call() -> None:
            if config.pre_hook:
                config.pre_hook(full_nargs)
            tuner.pre_hook(full_nargs)
            try:
                tuner.fn.run(*self.args, **current)
            except Exception as e:
                try:
                    tuner.post_hook(full_nargs, exception=e)
                finally:
                    raise
            tuner.post_hook(full_nargs, exception=None)

        return kernel_call

    def _measure(self, benchmark: bench_mod.Benchmark, config: Any,
                 problem: Mapping[str, Any]) -> pb.Timing:
        """Benchmark one candidate into its Timing record. Any exception marks the config as
        failed (out of resources, launch errors, a hook or benchmark failing for this config),
        except our own errors (AutotuneCacheError), which are not a config's fault."""
        timing = pb.Timing()
        try:
            timing.time_ms = benchmark(self._kernel_call(config), config, problem)[0]
        except AutotuneCacheError:
            raise
        except Exception as e:
            timing.failure = failure_reason(e)
        return timing

    def _benchmark(self, todo: list[int]
                   ) -> tuple[dict[int, pb.Timing], int, set[int], dict[int, str]]:
        """Compile (in parallel) and benchmark (under the device lock) the candidates `todo`
        (the interpreter's in interleaved rounds, the fastest kept: bench.rounds_of);
        returns their timings by index, how many benchmarks completed, the finalists (the
        candidates the configured benchmark timed: bench.halving_stages screens the others out
        with shorter benchmarks first) and the specialization data of those compiled here.

        The benchmarks start once every compile has finished (the costliest started first:
        compile.compile_cost). Screening each candidate as soon as its compile finished was
        tried on the H200 and taken back for scenario D (decision 0025), whose failures this
        code turned out to share (a power-capped pair D times uncapped). What still stands in
        its way: launches timed while compile threads take turns on the GIL wait on the host,
        inside the timed intervals, and inflate the estimate that sizes a benchmark's runs."""
        if not todo:
            return {}, 0, set(), {}
        configs, tuner, progress = self.configs, self.tuner, self.progress
        assert progress is not None
        on_device = self.benchmark.method != "fake" and not interpreter_active()
        failures: dict[int, str] = {}
        specializations: dict[int, str] = {}
        if on_device:
            waited = time.perf_counter()
            if self.queued is not None:  # indexed by candidate already
                compiles = self.queued.wait(todo)
            else:
                compiles = compile_candidates(tuner.fn, self.args, self.kwargs,
                                              [configs[i] for i in todo], self.compile_workers,
                                              prepare=self.prepare()).reindexed(todo)
            failures, specializations = compiles.failures, compiles.specs
            progress.phase(f"compiles of {len(todo)}", time.perf_counter() - waited)
            slowest = compiles.slowest()
            progress.compiled(len(todo), len(failures), compiles.wall,
                              slowest and (describe_config(configs[slowest[0]]), slowest[1]))

        problem = problem_key(tuner.arg_names, tuner.keys, {**tuner.nargs, **self.kwargs})
        timings: dict[int, pb.Timing] = {}
        alive = [i for i in todo if i not in failures]
        lock = device_bench_lock(device_identity()) if on_device else contextlib.nullcontext()
        held = scheduler.scheduler().held() if on_device else contextlib.nullcontext()
        entering = time.perf_counter()
        with held, lock:
            if on_device:
                progress.phase("waiting for the device", time.perf_counter() - entering)
            stages = bench_mod.halving_stages(self.benchmark, len(alive))
            for stage, (benchmark, keep) in enumerate(stages):
                stage_started = time.perf_counter()
                rounds = bench_mod.rounds_of(benchmark)
                for r in range(rounds):
                    for i in todo if stage == 0 else alive:
                        if i in failures:
                            timing = pb.Timing(failure=failures[i])
                        elif r and timings[i].failure:
                            timing = timings[i]  # failed in an earlier round
                        else:
                            timing = self._measure(benchmark, configs[i], problem)
                            if r and not timing.failure:  # the fastest round is kept
                                timing.time_ms = min(timing.time_ms, timings[i].time_ms)
                        timings[i] = timing
                        if stage == 0 and r == rounds - 1:
                            progress.step(describe_config(configs[i]),
                                          None if timing.failure else timing.time_ms,
                                          timing.failure)
                progress.phase(f"timing {len(alive)}{_rep_of(benchmark)}",
                               time.perf_counter() - stage_started)
                if keep is not None:
                    ranked = sorted((timings[i].time_ms, i) for i in alive
                                    if not timings[i].failure)
                    survivors = max(bench_mod.MIN_SURVIVORS, math.ceil(len(ranked) / keep))
                    alive = [i for _, i in ranked[:survivors]]
            if bench_mod.decides(self.benchmark):
                alive = self._decide(alive, timings, problem)
        completed = sum(1 for i in todo if i not in failures and not timings[i].failure)
        return timings, completed, set(alive), specializations

    def _decide(self, alive: list[int], timings: Mapping[int, pb.Timing],
                problem: Mapping[str, Any]) -> list[int]:
        """The finalists that may win once the leaders are decided (bench.decide): the one
        leader kept, when the configured benchmark left two or more within TIE_MARGIN."""
        sustained = {i: timings[i].time_ms for i in alive if not timings[i].failure}
        tied = bench_mod.leaders(sustained)
        if len(tied) < 2:
            return alive
        short = bench_mod.short_regime(self.benchmark)
        configs = self.configs

        def time_short(i: int) -> float:
            return short(self._kernel_call(configs[i]), configs[i], problem)[0]

        started = time.perf_counter()
        kept, medians = bench_mod.decide(tied, sustained, time_short)
        assert self.progress is not None
        self.progress.phase(f"deciding among {len(tied)} leaders", time.perf_counter() - started)
        self.progress.decided(describe_config(configs[kept]), len(tied), bench_mod.TIE_MARGIN,
                              {describe_config(configs[i]): t for i, t in medians.items()})
        return [kept]
