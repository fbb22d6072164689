"""`Autotuner`: triton.autotune's tuner, with the results cache in front of the benchmark.

The tuner keeps what Triton's keeps (its candidates, Triton's memo `self.cache`, `best_config`,
`configs_timings`) and the hit path: a launch whose memo it has resolved before is launched at
once (`run`). A launch of a problem it has not seen in this process builds the cache key (kernel
source fingerprint, candidate-list fingerprint, problem, device, toolchain) and asks
`engine.resolve`, which reads top to bottom: the cache tiers (memory -> loaded files -> cache
directory -> remote server), then a tuning (the key's cross-process lock, a peer's result,
recorded timings reused, the rest benchmarked) or, in a dump run, a tuning deferred to the end.
On a hit the recorded winner is launched: nothing is benchmarked, nothing is built for a tuning,
and only the winner is ever compiled (maybe already, ahead: the first launch of the process
starts compiling every decorated kernel's loaded winners on the one compile pool).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from triton import knobs
from triton.runtime.autotuner import Autotuner as _TritonAutotuner

from autotune_cache.errors import AllConfigsFailedError
from autotune_cache.foundation.key import CacheKey
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store.tuning import Resolved, tie_of
from autotune_cache.triton import bench as bench_mod
from autotune_cache.triton import engine
from autotune_cache.triton.configs import (
    configs_fingerprint,
    describe_config,
    match_candidates,
    winning_candidate,
)
from autotune_cache.triton.device import current_device, toolchain
from autotune_cache.triton.fingerprint import heuristics_fingerprint, tuned_fingerprint
from autotune_cache.triton.launch import launch_kwargs
from autotune_cache.triton.problem import problem_key, triton_style_key
from autotune_cache.triton.tune import ConflictingMetaParametersError, KernelTuning

# AllConfigsFailedError (raised by the cache: errors.py), ConflictingMetaParametersError
# (tune.py) and match_candidates (configs.py) are importable from here too.
__all__ = ["AllConfigsFailedError", "Autotuner", "ConflictingMetaParametersError", "autotune",
           "match_candidates"]

log = logging.getLogger(__name__)

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
                 cache_results: bool = False, kernel_name: str | None = None,
                 **triton_kwargs: Any) -> None:
        # warmup/rep/use_cuda_graph are ours to interpret; Triton would warn they are deprecated.
        # Arguments we do not know (from a newer Triton) go to Triton's constructor as given.
        super().__init__(fn, arg_names, configs, key, reset_to_zero, restore_value,
                         pre_hook=pre_hook, post_hook=post_hook,
                         prune_configs_by=prune_configs_by, do_bench=do_bench, **triton_kwargs)
        self.bench_warmup = warmup
        self.bench_rep = rep
        self.use_cuda_graph = use_cuda_graph
        self.user_do_bench = do_bench
        # Triton's own per-machine results file is replaced by the directory tier in Triton's
        # cache location (engine.honour_cache_results), unless the flags say where results live.
        # (Triton itself ignores both under its interpreter; we tune there too, so we do not.)
        self.persist_results = bool(cache_results or self.cache_results
                                    or getattr(getattr(knobs, "autotuning", None), "cache", False))
        self.cache_results = False
        # The key's kernel name: the function's, or the module-qualified one routing gives.
        self.kernel_name = kernel_name or self.base_fn.__name__
        self.configs_timings: dict[Any, list[float]] = {}
        self.bench_time = 0.0
        self.last_entry: pb.Entry | None = None
        self.last_hit: tuple[CacheKey, pb.Entry] | None = None  # engine.resolve's, on a hit
        # The hit path's precomputed state (see run).
        self._arg_name_set = frozenset(self.arg_names)
        self._key_positions = [self.arg_names.index(k) for k in self.keys
                               if k in self.arg_names]
        self._resolved: dict[tuple, tuple[Any, dict[str, Any], tuple]] = {}
        self._fast_keys: dict[int, Callable[[Sequence[Any]], tuple]] = {}
        self._launch_kwargs_cache: dict[int, tuple[Any, dict[str, Any]]] = {}
        # Triton's specialization data of each candidate's last compile here, by match_text.
        self.compiled_specializations: dict[str, str] = {}
        # Triton-style memos launched with a provisional config while their tuning is deferred
        # to the end of the dump run (deferred.py); they stay off the hit path.
        self._provisional: set[tuple] = set()
        self._source_fingerprint: str | None = None
        # The heuristics' lambdas are hashed by their source text, read now (as Triton reads the
        # kernel's), so an edit to the file after import is not mistaken for the running code.
        self._heuristics_fingerprint = heuristics_fingerprint(fn)
        engine.register(self)

    # ----- key -------------------------------------------------------------------------------

    @property
    def source_fingerprint(self) -> str:
        """Hash of the kernel source, its @jit dependencies and any @heuristics between."""
        if self._source_fingerprint is None:
            self._source_fingerprint = self.fresh_source_fingerprint()
        return self._source_fingerprint

    def source_fingerprint_now(self) -> str:
        """The key's source fingerprint once computed, else one computed now and not kept (the
        compile-ahead's, before the first launch: preload.py)."""
        return self._source_fingerprint or self.fresh_source_fingerprint()

    def fresh_source_fingerprint(self) -> str:
        """The source fingerprint computed now, not kept: the key's is computed at the first
        launch, when the global constexprs it reads hold the values the kernel runs with."""
        return tuned_fingerprint(self.fn, self._heuristics_fingerprint)

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

        The hit path first (docs/decisions/0017-launch-hit-path.md): when no keyword names a
        kernel argument, a fast key (the key arguments' values by precomputed position, then
        every argument's dtype or None) finds the config resolved for it, with its
        meta-parameters, and the Triton-style memo it was resolved under; it is launched when
        Triton's memo still holds that config (so clearing `kernel.cache` re-tunes, as in
        Triton). Configs with a pre_hook, and calls passing kernel arguments by keyword, take
        the full path."""
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
        position, then every argument's dtype or None, by a flat tuple expression generated
        once per argument count (docs/decisions/0017-launch-hit-path.md)."""
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
        unproven = None  # a hit's winner at its first launch here: (key, entry)
        if len(self.configs) > 1:
            all_args = {**self.nargs, **kwargs}
            memo = triton_style_key(self.arg_names, self.keys, all_args)
            config = self.cache.get(memo)
            if config is None:
                self.last_hit = None
                config, tuned = self._select(args, kwargs, all_args, memo)
                unproven, self.last_hit = self.last_hit, None
                self.cache[memo] = config
                if tuned is None:  # provisional; the listener is told when the tuning is done
                    self._provisional.add(memo)
                else:
                    self._notify_listener(memo, config, tuned)
            elif memo in self._provisional:  # a key launched often is tuned now (deferred.py)
                config = engine.launched_again(self, memo) or config
            if (config.pre_hook is None and self._arg_name_set.isdisjoint(kwargs)
                    and memo not in self._provisional):
                self._resolved[self._fast_key(args)] = (config, self.launch_kwargs_of(config),
                                                        memo)
        else:
            config = self.configs[0]
        self.best_config = config
        if config.pre_hook is not None:
            config.pre_hook(self.full_nargs(config, kwargs))
        try:
            return self.fn.run(*args, **kwargs, **self.launch_kwargs_of(config))
        except engine.WINNER_FAILURES as e:
            if unproven is None:
                raise
            # A cached winner that cannot compile or launch here (a forged shared entry, a
            # config over this GPU's limits) is a miss, never a dead end: engine.reject_winner.
            self.cache.pop(memo, None)
            self._resolved = {k: v for k, v in self._resolved.items() if v[2] != memo}
            engine.reject_winner(unproven, e)
            self.nargs = None
            try:
                return self._run(*args, **kwargs)
            except AllConfigsFailedError:
                raise e from None  # every candidate fails the same way: the launch's own error
        finally:
            self.nargs = None

    def launch_kwargs_of(self, config: Any) -> dict[str, Any]:
        """launch_kwargs(config), worked out once per config: reading the backend's defaults
        asks the driver for the current target, and the full path is a hot path too (every
        launch of a kernel with one config, or with a pre_hook)."""
        found = self._launch_kwargs_cache.get(id(config))
        if found is None or found[0] is not config:
            found = (config, launch_kwargs(config))
            self._launch_kwargs_cache[id(config)] = found
        return found[1]

    def full_nargs(self, config: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """What Triton hands a hook for `config`: the call's arguments plus the config's."""
        return {**self.nargs, **kwargs, **config.all_kwargs()}

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
        on the compile scheduler's --autotune_compile_workers threads (scheduler.py) and with
        the launch keywords every other launch uses (launch.py), so the launches find these
        kernels; returns the compiled kernels."""
        def compile_all() -> list[Any]:
            self.nargs = dict(zip(self.arg_names, args, strict=False))
            try:
                return [self.fn.warmup(*args, **kwargs, **self.launch_kwargs_of(config))
                        for config in self.prune_configs(kwargs)]
            finally:
                self.nargs = None

        return engine.compile_in_pool(compile_all)

    def _select(self, args: Sequence[Any], kwargs: dict[str, Any],
                all_args: Mapping[str, Any], memo: tuple | None = None
                ) -> tuple[Any, bool | None]:
        """The config for a launch whose memo missed: engine.resolve."""
        return engine.resolve(self, args, kwargs, all_args, memo)

    def take(self, entry: pb.Entry, pruned: Sequence[Any]) -> Any:
        """The winner `entry` names among `pruned`, with this tuner's state set from it
        (last_entry, configs_timings, as Triton's tuner leaves them)."""
        return winning_candidate(entry, self._set_state(entry, pruned))

    def _set_state(self, entry: pb.Entry, pruned: Sequence[Any]) -> list[tuple[Any, Any]]:
        self.last_entry = entry
        pairs = match_candidates(entry, pruned)
        self.configs_timings = {
            config: [float("inf") if t.failure else t.time_ms] * len(bench_mod.QUANTILES)
            for config, t in pairs}
        return pairs

    def adopt(self, resolved: Resolved, key: CacheKey | None, tuning: KernelTuning,
              kwargs: Mapping[str, Any]) -> tuple[Any, bool]:
        """The candidate that `resolved` names, with this tuner's state set from it; and
        whether this process tuned it (not when a peer process or a shared tier had it)."""
        pruned = tuning.configs
        pairs = self._set_state(resolved.entry, pruned)
        if resolved.winner is None:
            if key is not None:
                engine.await_winner(self, key)
            return winning_candidate(resolved.entry, pairs), False
        best = pruned[resolved.winner]
        if tuning.measured:  # as Triton does after benchmarking, with the winner's meta-parameters
            self.pre_hook(self.full_nargs(best, kwargs), reset_only=True)
        assert tuning.progress is not None
        tuning.progress.finished(describe_config(best), resolved.entry.result.time_ms,
                                 resolved.entry.result.tuning_seconds, tie_of(resolved.entry))
        return best, True

    def adopt_deferred(self, resolved: Resolved, tuning: KernelTuning, memo: tuple) -> None:
        """Take the result of a tuning deferred to the end of the dump run (deferred.py): the
        state a tuning at the launch would have left, the winner launched from now on, and
        Triton's listener told."""
        best, tuned = self.adopt(resolved, None, tuning, tuning.kwargs)
        self.best_config = best
        self.cache[memo] = best  # later launches of the key (if any) launch the winner
        self._provisional.discard(memo)
        self._notify_listener(memo, best, tuned)


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
    the benchmark entirely, and `cache_results` (or TRITON_CACHE_AUTOTUNING=1) keeps results
    per machine in a directory under Triton's cache, as Triton does, unless AUTOTUNE_FLAGS say
    where results live. Any other keyword argument is
    passed to Triton's Autotuner unchanged, so arguments of newer Triton releases keep working
    (and unknown ones fail exactly as they do in Triton)."""

    def decorator(fn: Any, *, kernel_name: str | None = None) -> Autotuner:
        # `kernel_name`: the key's kernel name when not the function's (routing.py).
        tuner = Autotuner(fn, fn.arg_names, configs, key, reset_to_zero, restore_value,
                          pre_hook=pre_hook, post_hook=post_hook,
                          prune_configs_by=prune_configs_by, warmup=warmup, rep=rep,
                          use_cuda_graph=use_cuda_graph, do_bench=do_bench,
                          cache_results=cache_results, kernel_name=kernel_name, **triton_kwargs)
        engine.decorated(tuner)  # its compiles start now if the process's have started
        return tuner

    return decorator
