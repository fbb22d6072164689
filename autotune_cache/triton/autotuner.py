"""`Autotuner`: triton.autotune's tuner, with the results cache in front of the benchmark.

On a launch with a problem it has not seen in this process, the tuner builds the cache key
(kernel source fingerprint, candidate-list fingerprint, problem, device, toolchain) and looks it up
in memory -> loaded files -> cache directory. On a hit it launches the recorded winner: nothing is
benchmarked and only the winner is ever compiled. On a miss it takes the key's cross-process lock
(another process may be tuning it: then it waits and reads that result), reuses recorded timings of
candidates from entries with the same source, device and toolchain but another candidate list,
compiles the remaining candidates in parallel, benchmarks them under the device lock and records
the winner with every candidate's timing.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from triton.runtime.autotuner import Autotuner as _TritonAutotuner

from autotune_cache import __version__ as tuner_version
from autotune_cache.cache import Cache, get_cache
from autotune_cache.errors import AutotuneCacheError
from autotune_cache.key import CacheKey, canonical_toolchain
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.triton import bench as bench_mod
from autotune_cache.triton import remote_compile
from autotune_cache.triton.benchlock import device_bench_lock
from autotune_cache.triton.compile import failure_reason, precompile
from autotune_cache.triton.configs import (
    canonical_proto_config,
    config_from_proto,
    config_to_proto,
    configs_fingerprint,
    describe_config,
    has_extras,
    match_text,
)
from autotune_cache.triton.device import (
    current_device,
    device_identity,
    interpreter_active,
    toolchain,
)
from autotune_cache.triton.fingerprint import heuristics_fingerprint, source_fingerprint
from autotune_cache.triton.launch import launch_kwargs
from autotune_cache.triton.problem import problem_key, triton_style_key
from autotune_cache.triton.progress import Progress
from autotune_cache.triton.sandbox import ensure_triton_cache_dir

log = logging.getLogger(__name__)


class AllConfigsFailedError(AutotuneCacheError, RuntimeError):
    """Every candidate config failed to compile or run, so there is no winner to record."""


_cache_results_logged = False


def _log_cache_results_superseded() -> None:
    """Say once per process, at debug level, that Triton's own results cache is not used."""
    global _cache_results_logged
    if not _cache_results_logged:
        _cache_results_logged = True
        log.debug("autotune_cache: cache_results=True (or TRITON_CACHE_AUTOTUNING=1) is "
                  "superseded: tuning results are cached through AUTOTUNE_FLAGS, not in "
                  "Triton's compile cache (see docs/triton.md)")


def _now_rfc3339() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def recorded_timings(entries: Sequence[pb.Entry], timing_method: str) -> dict[str, pb.Timing]:
    """Candidate timings from earlier tunings of the same source/device/toolchain that were
    measured with `timing_method`, by canonical config; where several entries timed a config,
    the most recently tuned one wins. Entries timed another way (the fake, wall clock, do_bench
    with other warmup/rep, CUDA graphs, an older file without a method) are ignored: their times
    are not comparable with the ones this run measures."""
    timings: dict[str, pb.Timing] = {}
    for entry in sorted(entries, key=lambda e: e.result.tuned_at):
        if entry.result.timing_method != timing_method:
            continue
        for timing in entry.result.candidates:
            timings[canonical_proto_config(timing.config)] = timing
    return timings


def match_candidates(entry: pb.Entry, configs: Sequence[Any]) -> list[tuple[Any, pb.Timing]]:
    """(candidate, its recorded Timing) pairs. A recorded Config holds only meta-parameters and
    launch options, so candidates are matched on those (match_text); each recorded timing goes to
    the first candidate with that text not matched yet, so candidates that differ only in their
    pre_hook or ir_override pair up with their timings in candidate order."""
    free: dict[str, list[Any]] = {}
    for config in configs:
        free.setdefault(match_text(config), []).append(config)
    pairs = []
    for timing in entry.result.candidates:
        waiting = free.get(canonical_proto_config(timing.config))
        if waiting:
            pairs.append((waiting.pop(0), timing))
    return pairs


class Autotuner(_TritonAutotuner):
    """Drop-in for triton.runtime.autotuner.Autotuner whose results persist in autotune_cache.

    It is a subclass of Triton's class, so code that checks `isinstance(k, Autotuner)` (or reads
    `configs`, `keys`, `fn`, `best_config`, `configs_timings`, `bench_time`) keeps working."""

    def __init__(self, fn: Any, arg_names: list[str], configs: list[Any], key: list[str],
                 reset_to_zero: list[str] | None, restore_value: list[str] | None,
                 pre_hook: Callable[..., Any] | None = None,
                 post_hook: Callable[..., Any] | None = None,
                 prune_configs_by: dict[str, Any] | None = None,
                 warmup: float | None = None, rep: float | None = None,
                 use_cuda_graph: bool = False, do_bench: Callable[..., Any] | None = None,
                 cache_results: bool = False, **triton_kwargs: Any) -> None:
        # warmup/rep/use_cuda_graph are ours to interpret; Triton would warn they are deprecated.
        # Arguments we do not know (from a newer Triton) go to Triton's constructor as given.
        super().__init__(fn, arg_names, configs, key, reset_to_zero, restore_value,
                         pre_hook=pre_hook, post_hook=post_hook,
                         prune_configs_by=prune_configs_by, do_bench=do_bench, **triton_kwargs)
        ensure_triton_cache_dir()  # at decoration: before this kernel's first compile
        self.bench_warmup = warmup
        self.bench_rep = rep
        self.use_cuda_graph = use_cuda_graph
        self.user_do_bench = do_bench
        if cache_results or self.cache_results:
            _log_cache_results_superseded()
        self.cache_results = False  # our cache replaces Triton's; the argument is accepted only
        self.kernel_name = self.base_fn.__name__
        self.configs_timings: dict[Any, list[float]] = {}
        self.bench_time = 0.0
        self.last_entry: pb.Entry | None = None
        # The hit path's precomputed state (see run).
        self._arg_name_set = frozenset(self.arg_names)
        self._key_positions = [self.arg_names.index(k) for k in self.keys
                               if k in self.arg_names]
        self._resolved: dict[tuple, tuple[Any, dict[str, Any], tuple]] = {}
        self._fast_keys: dict[int, Callable[[Sequence[Any]], tuple]] = {}
        self._launch_kwargs_of: dict[int, tuple[Any, dict[str, Any]]] = {}
        # Triton's specialization data of each candidate's last compile here, by match_text.
        self._specializations: dict[str, str] = {}
        # Background compiles of loaded winners, by key digest (see _preload_winners).
        self._preloads: dict[str, Future[None]] | None = None
        self._source_fingerprint: str | None = None
        # The heuristics' lambdas are hashed by their source text, read now (as Triton reads the
        # kernel's), so an edit to the file after import is not mistaken for the running code.
        self._heuristics_fingerprint = heuristics_fingerprint(fn)

    # ----- key -------------------------------------------------------------------------------

    @property
    def source_fingerprint(self) -> str:
        """Hash of the kernel source, its @jit dependencies and any @heuristics between."""
        if self._source_fingerprint is None:
            fingerprint = source_fingerprint(self.fn)
            heuristics = self._heuristics_fingerprint
            if heuristics:
                fingerprint = hashlib.sha256(f"{fingerprint}+{heuristics}".encode()).hexdigest()
            self._source_fingerprint = fingerprint
        return self._source_fingerprint

    def cache_key(self, configs: Sequence[Any], all_args: Mapping[str, Any]) -> CacheKey:
        """The results-cache key of launching with `all_args`, choosing among `configs`."""
        device = current_device()
        return CacheKey(
            kernel=self.kernel_name,
            source_fingerprint=self.source_fingerprint,
            configs_fingerprint=configs_fingerprint(configs),
            problem=problem_key(self.arg_names, self.keys, all_args),
            device=device,
            toolchain=toolchain(device),
        )

    # ----- launch ----------------------------------------------------------------------------

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Launch the kernel with the cached (or freshly tuned) best config for these args.

        The hit path first (target E of issue 13): when no keyword names a kernel argument, a
        fast key (the key arguments' values by precomputed position, then every argument's
        dtype or None) finds the config resolved for it, with its meta-parameters, and the
        Triton-style memo it was resolved under; it is launched when Triton's memo still holds
        that config (so clearing `kernel.cache` re-tunes, as in Triton). Configs with a
        pre_hook, and calls passing kernel arguments by keyword, take the full path."""
        if len(self.configs) > 1 and self._arg_name_set.isdisjoint(kwargs):
            fast_key = self._fast_keys.get(len(args))
            if fast_key is not None:
                resolved = self._resolved.get(fast_key(args))
                if resolved is not None and self.cache.get(resolved[2]) is resolved[0]:
                    self.best_config = resolved[0]
                    return self.fn.run(*args, **kwargs, **resolved[1])
        return self._run(*args, **kwargs)

    def _fast_key(self, args: Sequence[Any]) -> tuple:
        """The hit path's key for positional `args` (see run): the key arguments' values by
        position, then every argument's dtype or None.

        Decision: the key function is generated once per argument count (as Triton generates its
        binder), a flat tuple expression with constant indices: about 0.75 µs a launch cheaper
        than two comprehensions on CPython 3.11 (bench/triton_launch_overhead.py measures the
        whole hit path)."""
        fast_key = self._fast_keys.get(len(args))
        if fast_key is None:
            items = [f"args[{i}]" for i in self._key_positions if i < len(args)]
            items += [f"getattr(args[{i}], 'dtype', None)" for i in range(len(args))]
            fast_key = eval(f"lambda args: ({', '.join(items)},)", {})  # noqa: S307
            self._fast_keys[len(args)] = fast_key
        return fast_key(args)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        """The full launch path: key, lookup or tuning, hooks."""
        self.nargs = dict(zip(self.arg_names, args, strict=False))
        if len(self.configs) > 1:
            all_args = {**self.nargs, **kwargs}
            memo = triton_style_key(self.arg_names, self.keys, all_args)
            config = self.cache.get(memo)
            if config is None:
                config, tuned = self._select(args, kwargs, all_args)
                self.cache[memo] = config
                self._notify_listener(memo, config, tuned)
            if config.pre_hook is None and self._arg_name_set.isdisjoint(kwargs):
                self._resolved[self._fast_key(args)] = (config, self._launch_kwargs(config),
                                                        memo)
        else:
            config = self.configs[0]
        self.best_config = config
        if config.pre_hook is not None:
            config.pre_hook(self._full_nargs(config, kwargs))
        try:
            return self.fn.run(*args, **kwargs, **self._launch_kwargs(config))
        finally:
            self.nargs = None

    def _launch_kwargs(self, config: Any) -> dict[str, Any]:
        """launch_kwargs(config), worked out once per config: reading the backend's defaults
        asks the driver for the current target, and the full path is a hot path too (every
        launch of a kernel with one config, or with a pre_hook)."""
        found = self._launch_kwargs_of.get(id(config))
        if found is None or found[0] is not config:
            found = (config, launch_kwargs(config))
            self._launch_kwargs_of[id(config)] = found
        return found[1]

    def _preload_winners(self, cache: Cache) -> None:
        """Start compiling, in the background, the winner of every loaded entry of this kernel
        (same name, source, device and toolchain) that records Triton's specialization data,
        through Triton's own `JITFunction.preload` (target A of issue 13). Once per tuner, at
        its first launch of a new problem.

        Decisions: a preload compiles exactly the recorded specialization and files it under
        the recorded JIT key, so a launch with another specialization never uses it: it
        compiles as usual and the preload was only wasted work. Any failure is logged at debug
        level and ignored. Only this kernel's entries are read, and not at all when the loaded
        files hold more than PRELOAD_SCAN_LIMIT of them, or more than PRELOAD_SCAN_BYTES of
        their text is still unparsed (a canonical text file's entries are parsed on first use:
        results_index); reading them would cost more than it saves. Keys whose winners record
        the same specialization share one compile."""
        if self._preloads is not None:
            return
        self._preloads = {}
        if interpreter_active() or not cache.memory.loaded:
            return
        files = cache.memory.loaded
        if (sum(f.count_of(self.kernel_name) for f in files) > PRELOAD_SCAN_LIMIT
                or sum(f.unparsed_bytes_of(self.kernel_name) for f in files)
                > PRELOAD_SCAN_BYTES):
            return
        jit_fn = self.fn
        while not hasattr(jit_fn, "preload") and hasattr(jit_fn, "fn"):
            jit_fn = jit_fn.fn
        if not hasattr(jit_fn, "preload"):
            return
        device = current_device()
        tools = canonical_toolchain(toolchain(device))
        wanted = {}
        try:
            for file in cache.memory.loaded:
                for key, entry in file.items(self.kernel_name):
                    if (key.kernel == self.kernel_name and key.device == device
                            and key.source_fingerprint == self.source_fingerprint
                            and key.toolchain == tools and entry.result.triton_specialization):
                        wanted[key.digest()] = entry.result.triton_specialization
        except AutotuneCacheError as e:  # a damaged entry: the lookup that needs it says so
            log.debug("autotune_cache: no preload of %s: %s", self.kernel_name, e)
            return
        if not wanted:
            return
        _start_driver()
        pool = ThreadPoolExecutor(max(1, min(len(wanted), cache.settings.compile_workers)),
                                  thread_name_prefix="autotune-preload")
        by_spec: dict[str, Future[None]] = {}
        for digest, spec in list(wanted.items())[:PRELOAD_MAX]:
            if spec not in by_spec:
                by_spec[spec] = pool.submit(_preload, jit_fn, spec)
            self._preloads[digest] = by_spec[spec]
        pool.shutdown(wait=False)

    def _await_preload(self, key: CacheKey) -> None:
        """Wait for the background compile of this key's winner, if one was started, so the
        launch that follows finds it instead of compiling it a second time."""
        future = (self._preloads or {}).get(key.digest())
        if future is not None:
            future.result()

    def _notify_listener(self, memo: tuple, config: Any, tuned: bool) -> None:
        """Call Triton's `knobs.autotuning.listener` (Triton >= 3.7) as its autotuner does,
        once per new key; a hit in our cache counts as a cache hit."""
        from triton import knobs
        from triton.runtime.autotuner import Heuristics

        listener = getattr(getattr(knobs, "autotuning", None), "listener", None)
        if listener is None:
            return
        jit_fn = self.fn
        while isinstance(jit_fn, (Heuristics, _TritonAutotuner)):
            jit_fn = jit_fn.fn
        listener(fn=jit_fn, key=memo, best_config=config, configs_timings=self.configs_timings,
                 duration=self.bench_time if tuned else None, cache_hit=not tuned)

    def warmup(self, *args: Any, **kwargs: Any) -> list[Any]:
        """Compile every (pruned) candidate ahead of time, as triton's Autotuner.warmup does, but
        on --autotune_compile_workers threads and with the launch keywords every other launch
        uses (launch.py), so the launches find these kernels; returns the compiled kernels."""
        import triton

        def compile_all() -> list[Any]:
            self.nargs = dict(zip(self.arg_names, args, strict=False))
            try:
                return [self.fn.warmup(*args, **kwargs, **self._launch_kwargs(config))
                        for config in self.prune_configs(kwargs)]
            finally:
                self.nargs = None

        async_mode = getattr(triton, "AsyncCompileMode", None)
        workers = get_cache().settings.compile_workers
        if async_mode is None or workers <= 1 or interpreter_active():
            return compile_all()
        with ThreadPoolExecutor(workers, thread_name_prefix="autotune-compile") as pool, \
                async_mode(pool):
            kernels = compile_all()
        return [k.result() if hasattr(k, "result") else k for k in kernels]

    def _select(self, args: Sequence[Any], kwargs: dict[str, Any],
                all_args: Mapping[str, Any]) -> tuple[Any, bool]:
        """The best config for this launch, from the cache tiers, another process, or tuning;
        and whether this process tuned it.

        A candidate list pruned to one config is launched as it is, with no cache and no
        benchmark, as Triton >= 3.7 does (and as a single config always is)."""
        settings = get_cache().settings
        if settings.remote_compile_cache and settings.remote_cache:
            # Before this key's first compile (and Triton's launcher build) in this process.
            remote_compile.enable(settings.remote_cache)
        pruned = self.prune_configs(kwargs)
        if len(pruned) == 1:
            self.configs_timings = {}
            return pruned[0], False
        key = self.cache_key(pruned, all_args)
        cache = get_cache()
        cache.stats.served(self.kernel_name)
        self._preload_winners(cache)
        # Entries from shared tiers are untrusted: a winner that is not one of this kernel's
        # candidates is a damaged entry (a miss), never launched.
        candidates = [config_to_proto(c) for c in pruned]
        entry = cache.lookup(key, candidates=candidates)
        if entry is not None:
            self._await_preload(key)
        winner = None
        if entry is None:
            # `shared`: the lock is held on the cache directory or the remote server, so a peer
            # that held it before us may have recorded this key; refresh() re-reads those tiers.
            with cache.tune_lock(key) as shared:
                entry = cache.refresh(key, candidates=candidates) if shared else None
                if entry is None:
                    entry, winner = self._tune(key, pruned, args, kwargs, cache)
        self.last_entry = entry
        pairs = match_candidates(entry, pruned)
        self.configs_timings = {
            config: [float("inf") if t.failure else t.time_ms] * len(bench_mod.QUANTILES)
            for config, t in pairs}
        if winner is not None:
            return winner, True
        return self._winner(entry, pairs), False

    @staticmethod
    def _winner(entry: pb.Entry, pairs: Sequence[tuple[Any, pb.Timing]]) -> Any:
        """The candidate object that won (so its pre_hook and ir_override run at launch).

        Among candidates with the winner's parameters it is the one whose recorded time is the
        winning time; a rebuilt config is only a fallback for an entry that matches no candidate
        (which a hit, keyed by the candidate list, never is)."""
        wanted = canonical_proto_config(entry.result.config)
        same = [(c, t) for c, t in pairs if canonical_proto_config(t.config) == wanted]
        for config, timing in same:
            if not timing.failure and timing.time_ms == entry.result.time_ms:
                return config
        if same:
            return same[0][0]
        return config_from_proto(entry.result.config)

    # ----- tuning ----------------------------------------------------------------------------

    def _full_nargs(self, config: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """What Triton hands a hook for `config`: the call's arguments plus the config's."""
        return {**self.nargs, **kwargs, **config.all_kwargs()}

    def _prepare(self, kwargs: Mapping[str, Any]) -> Callable[[Any], None]:
        """The hooks to run before a candidate is specialised (see compile.py): the config's
        pre_hook, then a user-defined decorator-level pre_hook, as Triton runs them before each
        launch. Not the built-in reset_to_zero / restore_value hook (it cannot change how the
        arguments specialise), and never the post_hook: nothing was launched for it to see."""
        user_pre_hook = getattr(self, "user_defined_pre_hook", False)

        def prepare(config: Any) -> None:
            full_nargs = self._full_nargs(config, kwargs)
            if config.pre_hook is not None:
                config.pre_hook(full_nargs)
            if user_pre_hook:
                self.pre_hook(full_nargs)

        return prepare

    def _kernel_call(self, config: Any, args: Sequence[Any],
                     meta: Mapping[str, Any]) -> Callable[[], None]:
        """One launch of `config` with the hooks triton.autotune runs around each benchmark:
        the config's pre_hook first, so the arguments are in the state that candidate's hook
        leaves them whatever ran before."""
        current = dict(meta, **self._launch_kwargs(config))
        full_nargs = self._full_nargs(config, meta)

        def kernel_call() -> None:
            if config.pre_hook:
                config.pre_hook(full_nargs)
            self.pre_hook(full_nargs)
            try:
                self.fn.run(*args, **current)
            except Exception as e:
                try:
                    self.post_hook(full_nargs, exception=e)
                finally:
                    raise
            self.post_hook(full_nargs, exception=None)

        return kernel_call

    def _plan(self, key: CacheKey, configs: Sequence[Any], kwargs: Mapping[str, Any],
              cache: Cache) -> TuningPlan:
        """Which candidates to benchmark, and which recorded timings to reuse for the rest."""
        check_meta_conflicts(configs, kwargs)
        benchmark = bench_mod.choose_benchmark(
            interpreter=interpreter_active(), do_bench=self.user_do_bench,
            warmup=self.bench_warmup, rep=self.bench_rep, use_cuda_graph=self.use_cuda_graph)
        recorded = recorded_timings(cache.same_source(key), benchmark.method)
        return TuningPlan(benchmark=benchmark, reused=reusable_timings(configs, recorded),
                          problem=problem_key(self.arg_names, self.keys,
                                              {**self.nargs, **kwargs}))

    def _measure(self, benchmark: bench_mod.Benchmark, config: Any, args: Sequence[Any],
                 kwargs: dict[str, Any], problem: Mapping[str, Any]) -> pb.Timing:
        """Benchmark one candidate into its Timing record. Any exception marks the config as
        failed (out of resources, launch errors, a hook or benchmark failing for this config),
        except our own errors (AutotuneCacheError), which are not a config's fault."""
        timing = pb.Timing(config=config_to_proto(config))
        try:
            timing.time_ms = benchmark(self._kernel_call(config, args, kwargs), config,
                                       problem)[0]
        except AutotuneCacheError:
            raise
        except Exception as e:
            timing.failure = failure_reason(e)
        return timing

    def _benchmark(self, plan: TuningPlan, configs: Sequence[Any], args: Sequence[Any],
                   kwargs: dict[str, Any], cache: Cache, progress: Progress
                   ) -> tuple[dict[int, pb.Timing], int, set[int]]:
        """Compile (in parallel) and benchmark (under the device lock) every candidate the plan
        does not reuse; returns their timings by index, how many benchmarks completed, and the
        finalists: the candidates the configured benchmark timed (bench.halving_stages screens
        the others out with shorter benchmarks first)."""
        todo = plan.todo(len(configs))
        if not todo:
            return {}, 0, set()
        on_device = plan.benchmark.method != "fake" and not interpreter_active()
        failures: dict[int, str] = {}
        if on_device:
            compile_started = time.perf_counter()
            specs: dict[int, str] = {}
            compiled = precompile(self.fn, args, kwargs, [configs[i] for i in todo],
                                  cache.settings.compile_workers, prepare=self._prepare(kwargs),
                                  specs=specs)
            failures = {todo[j]: reason for j, reason in compiled.items()}
            plan.specializations = {todo[j]: spec for j, spec in specs.items()}
            progress.compiled(len(todo), len(failures), time.perf_counter() - compile_started)

        timings: dict[int, pb.Timing] = {}
        alive = [i for i in todo if i not in failures]
        lock = device_bench_lock(device_identity()) if on_device else contextlib.nullcontext()
        with lock:
            stages = bench_mod.halving_stages(plan.benchmark, len(alive))
            for stage, (benchmark, keep) in enumerate(stages):
                for i in todo if stage == 0 else alive:
                    if i in failures:
                        timing = pb.Timing(config=config_to_proto(configs[i]),
                                           failure=failures[i])
                    else:
                        timing = self._measure(benchmark, configs[i], args, kwargs,
                                               plan.problem)
                    timings[i] = timing
                    if stage == 0:
                        progress.step(describe_config(configs[i]),
                                      None if timing.failure else timing.time_ms, timing.failure)
                if keep is not None:
                    ranked = sorted((timings[i].time_ms, i) for i in alive
                                    if not timings[i].failure)
                    survivors = max(bench_mod.MIN_SURVIVORS, math.ceil(len(ranked) / keep))
                    alive = [i for _, i in ranked[:survivors]]
        completed = sum(1 for i in todo if i not in failures and not timings[i].failure)
        return timings, completed, set(alive)

    def _tune(self, key: CacheKey, configs: Sequence[Any], args: Sequence[Any],
              kwargs: dict[str, Any], cache: Cache) -> tuple[pb.Entry, Any]:
        """Plan, benchmark what has no reusable timing, build and record the entry; returns it
        with the winning candidate object."""
        started = time.perf_counter()
        plan = self._plan(key, configs, kwargs, cache)
        progress = Progress(self.kernel_name, key.problem, str(key.device),
                            total=len(configs), reused=len(plan.reused))
        bench_started = time.perf_counter()
        measured, completed, finalists = self._benchmark(plan, configs, args, kwargs, cache,
                                                         progress)
        self.bench_time = time.perf_counter() - bench_started
        candidates = [measured[i] if i in measured else plan.reused_timing(i, configs[i])
                      for i in range(len(configs))]
        entry, best = build_entry(key, configs, candidates, plan.benchmark.method,
                                  time.perf_counter() - started,
                                  eligible=finalists | plan.reused.keys() if measured else None)
        # A candidate compiled by an earlier tuning in this process (another problem with the
        # same specialization) starts no compile now: its last recorded data stands in. Were it
        # for another specialization, a preload of it would only be wasted, never launched.
        for i, spec in plan.specializations.items():
            self._specializations[match_text(configs[i])] = spec
        entry.result.triton_specialization = self._specializations.get(
            match_text(configs[best]), "")
        if measured:  # as Triton does after benchmarking, with the winner's meta-parameters
            self.pre_hook(self._full_nargs(configs[best], kwargs), reset_only=True)
        cache.record(entry, benchmarks=completed)
        progress.finished(describe_config(configs[best]), entry.result.time_ms,
                          entry.result.tuning_seconds)
        return entry, configs[best]


# _preload_winners: scan loaded files up to this many entries of the kernel, and up to this much
# text still to parse (protobuf's Python text parser reads about 1.3 MB/s on the CI machine, so
# 256 KiB bounds the parsing at about 0.2 s: a scenario-B file, 3 entries of 48 candidates, is
# 56 kB), preload at most this many winners.
PRELOAD_SCAN_LIMIT = 2000
PRELOAD_SCAN_BYTES = 256 * 1024
PRELOAD_MAX = 64


def _start_driver() -> None:
    """Create Triton's active GPU driver here, once, before the preload threads start: with an
    empty compile cache that builds its C driver stub (0.35-0.45 s on the H200 host), and each
    preload thread would otherwise race to build its own (bench/profile_sandbox_start.py showed
    three concurrent builds). A failure is left to the launch to report."""
    try:
        from triton.runtime import driver

        driver.active  # noqa: B018 (the property creates the driver)
    except Exception as e:
        log.debug("autotune_cache: starting Triton's driver failed: %s", failure_reason(e))


def _preload(jit_fn: Any, specialization: str) -> None:
    """Compile one recorded specialization into `jit_fn`'s kernel cache (never raises)."""
    try:
        jit_fn.preload(specialization)
    except Exception as e:  # a foreign or stale record: the launch compiles as usual
        log.debug("autotune_cache: preloading a winner of %s failed: %s",
                  getattr(jit_fn, "__name__", jit_fn), failure_reason(e))


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


def reusable_timings(configs: Sequence[Any], recorded: Mapping[str, pb.Timing]
                     ) -> dict[int, pb.Timing]:
    """{candidate index: recorded Timing} for the candidates that need no benchmark. Never for
    a candidate with a pre_hook or ir_override: the results file cannot say whether the recorded
    timing was measured with the same one."""
    reused = {}
    for i, config in enumerate(configs):
        text = match_text(config)
        if text in recorded and not has_extras(config):
            reused[i] = recorded[text]
    return reused


@dataclass
class TuningPlan:
    """What one tuning does: the benchmark to time with, the recorded timings it reuses (by
    candidate index; every other candidate is benchmarked) and the problem the timings are for."""

    benchmark: bench_mod.Benchmark
    reused: dict[int, pb.Timing]
    problem: dict[str, Any]
    # Triton's specialization data of the candidates compiled here, by index (for preload).
    specializations: dict[int, str] = field(default_factory=dict)

    def todo(self, count: int) -> list[int]:
        """Indices of the candidates to benchmark, in candidate order."""
        return [i for i in range(count) if i not in self.reused]

    def reused_timing(self, index: int, config: Any) -> pb.Timing:
        """A copy of the reused Timing, with the config as this candidate list writes it."""
        timing = pb.Timing()
        timing.CopyFrom(self.reused[index])
        timing.config.CopyFrom(config_to_proto(config))
        return timing


def build_entry(key: CacheKey, configs: Sequence[Any], candidates: Sequence[pb.Timing],
                timing_method: str, seconds: float, eligible: set[int] | None = None
                ) -> tuple[pb.Entry, int]:
    """The results entry for these candidate timings and the winner's index: the fastest
    median among the `eligible` candidates (default: all; the tuner passes those timed by the
    configured benchmark, see bench.halving_stages), the earlier candidate on a tie. Raises
    AllConfigsFailedError, naming every config with its reason, when no candidate has a time."""
    ok = [(t.time_ms, i) for i, t in enumerate(candidates) if not t.failure]
    if not ok:
        reasons = "\n".join(f"  {describe_config(configs[i])}: {t.failure}"
                             for i, t in enumerate(candidates))
        raise AllConfigsFailedError(
            f"autotune_cache: every candidate config failed for {key.describe()}:\n{reasons}")
    best_ms, best = min([(t, i) for t, i in ok if i in eligible] or ok) if eligible else min(ok)
    entry = pb.Entry(key=key.to_proto(), result=pb.Result(
        config=config_to_proto(configs[best]),
        time_ms=best_ms,
        candidates=candidates,
        tuned_at=_now_rfc3339(),
        tuner_version=tuner_version,
        tuning_seconds=round(seconds, 6),
        timing_method=timing_method,
    ))
    return entry, best


def autotune(configs: list[Any], key: list[str], prune_configs_by: dict[str, Any] | None = None,
             reset_to_zero: list[str] | None = None, restore_value: list[str] | None = None,
             pre_hook: Callable[..., Any] | None = None,
             post_hook: Callable[..., Any] | None = None,
             warmup: float | None = None, rep: float | None = None,
             use_cuda_graph: bool = False, do_bench: Callable[..., Any] | None = None,
             cache_results: bool = False, **triton_kwargs: Any) -> Callable[[Any], Autotuner]:
    """Decorator with triton.autotune's signature whose results go through autotune_cache.

    `warmup` / `rep` are the GPU benchmark's warmup and repetition times in ms (default 25 / 100,
    as triton.testing.do_bench), `use_cuda_graph=True` times with CUDA graphs, `do_bench` replaces
    the benchmark entirely, and `cache_results` is accepted and superseded (results are always
    cached through AUTOTUNE_FLAGS; a debug log says so once). Any other keyword argument is
    passed to Triton's Autotuner unchanged, so arguments of newer Triton releases keep working
    (and unknown ones fail exactly as they do in Triton)."""

    def decorator(fn: Any) -> Autotuner:
        return Autotuner(fn, fn.arg_names, configs, key, reset_to_zero, restore_value,
                         pre_hook=pre_hook, post_hook=post_hook,
                         prune_configs_by=prune_configs_by, warmup=warmup, rep=rep,
                         use_cuda_graph=use_cuda_graph, do_bench=do_bench,
                         cache_results=cache_results, **triton_kwargs)

    return decorator
