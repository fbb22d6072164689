"""The engine between a tuner and everything process-wide: read `resolve` top to bottom.

The tuner (autotuner.py) keeps what Triton's tuner keeps: its candidates, its memo and the hit
path of a launch. Everything else a launch may need is behind the few functions here, so that
the tuner names none of the parts (the compile-ahead, the warm-ups, the deferred tunings, the
shared compile cache, the compile pool) and none of them needs the tuner's class:

- `register(tuner)`: at construction, what the process must know of a new tuner.
- `resolve(tuner, ...)`: a launch whose memo missed. It returns a config and whether this
  process tuned it (False: a hit, or one config left; None: a provisional config whose tuning
  was deferred to the end of the dump run). On a hit nothing is built for a tuning and the key
  is computed once.
- `launched_again`, `compile_in_pool`: the two other ways a tuner reaches the process.

The per-process state of each part lives in process.py's one object, under its name.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from autotune_cache.cache import get_cache
from autotune_cache.foundation.key import CacheKey
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store.tuning import Resolved
from autotune_cache.triton import deferred, early, preload, remote_compile, scheduler, warmups
from autotune_cache.triton.configs import config_to_proto, has_extras
from autotune_cache.triton.device import interpreter_active
from autotune_cache.triton.problem import triton_style_key
from autotune_cache.triton.sandbox import ensure_triton_cache_dir
from autotune_cache.triton.scheduler import Priority
from autotune_cache.triton.tune import KernelTuning

log = logging.getLogger(__name__)


class Tuner(deferred.DeferringTuner, preload.AheadTuner, Protocol):
    """What the engine needs of a tuner (autotuner.py's Autotuner)."""

    arg_names: list[str]
    keys: list[str]
    configs_timings: dict[Any, list[float]]
    persist_results: bool
    last_hit: tuple[CacheKey, pb.Entry] | None

    def prune_configs(self, kwargs: dict[str, Any]) -> list[Any]: ...

    def cache_key(self, configs: Sequence[Any], all_args: Mapping[str, Any]) -> CacheKey: ...

    def take(self, entry: pb.Entry, pruned: Sequence[Any]) -> Any: ...

    def adopt(self, resolved: Resolved, key: CacheKey | None, tuning: KernelTuning,
              kwargs: Mapping[str, Any]) -> tuple[Any, bool]: ...


def register(tuner: Any) -> None:
    """A tuner was constructed: Triton's compile cache is placed (before its first compile), the
    compile-ahead knows it, and its JIT function's compiles are not warm-ups."""
    ensure_triton_cache_dir()
    preload.register(tuner)
    warmups.mark_tuned(tuner.fn)


CACHE_RESULTS_DIR = "autotune_cache"  # under Triton's cache directory
_honoured: set[int] = set()  # id() of the process caches that got (or declined) the tier
_honoured_lock = threading.Lock()


def honour_cache_results() -> Path | None:
    """A tuner asked Triton to cache its results on disk (`cache_results=True`, or
    TRITON_CACHE_AUTOTUNING=1), as Triton does per machine: give the process cache the directory
    tier `<Triton's cache dir>/autotune_cache`, unless its flags already name where results live
    (--autotune_cache_dir, --load_autotune_results_from, --dump_autotune_results_to,
    --autotune_remote_cache: then they decide, and nothing is added). Once per process cache
    (a cache configured later is asked again at its first miss); returns the directory added,
    else None. Said once at INFO level."""
    from triton import knobs

    cache = get_cache()
    with _honoured_lock:
        if id(cache) in _honoured:
            return None
        _honoured.add(id(cache))
        s = cache.settings
        if s.cache_dir or s.load_from or s.dump_to or s.remote_cache:
            log.debug("autotune_cache: cache_results=True: the flags name where results live, "
                      "so no directory tier is added")
            return None
        directory = Path(knobs.cache.dir) / CACHE_RESULTS_DIR
        cache.use_cache_dir(directory)
    log.info("autotune_cache: cache_results=True (or TRITON_CACHE_AUTOTUNING=1): results are kept "
             "in the directory tier %s, as Triton keeps them per machine; --autotune_cache_dir "
             "or another persistent flag in AUTOTUNE_FLAGS decides instead", directory)
    return directory


def decorated(tuner: Any) -> None:
    """The tuner has its final name: its compiles ahead start now if the process's have (and,
    before the first launch, the warm-ups of the plain kernels defined with it: early.py)."""
    preload.decorated(tuner)
    early.decorated(tuner)


def resolve(tuner: Tuner, args: Sequence[Any], kwargs: dict[str, Any],
            all_args: Mapping[str, Any], memo: tuple | None = None) -> tuple[Any, bool | None]:
    """The config for a launch whose memo missed, from the cache tiers, another process, or a
    tuning; and whether this process tuned it (see the module docstring). A candidate list
    pruned to one config is launched as it is, with no cache and no benchmark, as Triton >= 3.7
    does (and as a single config always is)."""
    if tuner.persist_results:
        honour_cache_results()
    cache = get_cache()
    settings = cache.settings
    # Before this key's first compile (and Triton's launcher build) in this process.
    remote_compile.follow(settings)
    pruned = tuner.prune_configs(kwargs)
    if len(pruned) == 1:
        tuner.configs_timings = {}
        return pruned[0], False
    key = tuner.cache_key(pruned, all_args)
    # Once per tuner, at its first launch of a new problem; and the first launch after an early
    # start (early.py), which confirms its device.
    if preload.started(tuner) is None or preload.unconfirmed():
        if interpreter_active():
            preload.not_preloading(tuner)
        else:
            preload.first_launch(tuner, key, cache)
            warmups.start(cache)  # plain @triton.jit specializations, if loaded

    # A hit: the winner, once its compile ahead (if any) is done. Entries from shared tiers are
    # untrusted: a winner that is not one of these candidates is a damaged entry (a miss).
    candidates = [config_to_proto(c) for c in pruned]
    entry = cache.hit(key, candidates)
    if entry is not None:
        await_winner(tuner, key)
        tuner.last_hit = (key, entry)  # its first launch proves it (reject_winner)
        return tuner.take(entry, pruned), False

    # A miss: tuned here, by a peer process holding the key's lock, or at the end of the dump
    # run with a provisional config launched meanwhile.
    tuning = KernelTuning(tuner, pruned, args, kwargs, settings.compile_workers)
    never_reuse = [i for i, c in enumerate(pruned) if has_extras(c)]
    if memo is None:
        memo = triton_style_key(tuner.arg_names, tuner.keys, all_args)
    provisional: list[Any] = []

    def defer(finish: Callable[[], Resolved]) -> bool:
        reused = cache.reusable(key, candidates, timing_method=tuning.benchmark.method,
                                never_reuse=never_reuse)
        config = deferred.defer(cache, tuner, tuning, finish, memo, reused=reused)
        if config is not None:
            provisional.append(config)
        return config is not None

    resolved = cache.tune_or_defer(
        key, candidates, tuning, timing_method=tuning.benchmark.method, never_reuse=never_reuse,
        defer=defer if deferred.applies(cache, tuning) else None)
    if resolved is None:
        tuner.configs_timings = {}
        return provisional[0], None
    if resolved.winner is None:  # a peer's entry, re-read from a shared tier: unproven here too
        tuner.last_hit = (key, resolved.entry)
    return tuner.adopt(resolved, key, tuning, kwargs)


def _winner_failures() -> tuple[type[BaseException], ...]:
    """Triton's errors that say a config cannot compile or launch on this device: a compile
    error, resources over the device's limits, ptxas; on the interpreter, its error (where a
    config's compile-time error surfaces)."""
    from triton.compiler.errors import CompilationError
    from triton.runtime import errors

    found: list[type[BaseException]] = [CompilationError]
    for name in ("OutOfResources", "PTXASError", "InterpreterError"):
        kind = getattr(errors, name, None)
        if isinstance(kind, type):
            found.append(kind)
    return tuple(found)


WINNER_FAILURES = _winner_failures()


def reject_winner(hit: tuple[CacheKey, pb.Entry], error: BaseException) -> None:
    """The winner of a hit failed its first launch here with one of WINNER_FAILURES: the cache
    never serves that entry again in this process and says where it came from; the launch is
    then resolved again (a miss: tuned where tuning is allowed, else the strict error). A
    shared tier's writer cannot make every reader fail this way (docs/security.md)."""
    key, entry = hit
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    get_cache().reject_winner(key, entry, f"{type(error).__name__}: {first}"[:300])


def await_winner(tuner: Any, key: CacheKey) -> None:
    """Wait for the compile ahead of this key's winner, if one was started (or run it here if no
    worker has yet), so the launch that follows finds it instead of compiling it again."""
    preload.wait((preload.started(tuner) or {}).get(key.digest()))


def launched_again(tuner: Any, memo: tuple) -> Any:
    """A provisional config's key launched again: its deferred tuning may run now (deferred.py);
    the config to launch, or None to keep the provisional one."""
    return deferred.launched_again(tuner, memo)


def compile_in_pool(compile_all: Callable[[], list[Any]]) -> list[Any]:
    """Run `compile_all` (a tuner's warmup: one `JITFunction.warmup` per candidate) with its
    compiles on the compile pool's --autotune_compile_workers threads, and wait for them."""
    import triton

    async_mode = getattr(triton, "AsyncCompileMode", None)
    workers = get_cache().settings.compile_workers
    if async_mode is None or workers <= 1 or interpreter_active():
        return compile_all()
    with async_mode(scheduler.scheduler(workers).lane(Priority.CANDIDATE, {})):
        # Waited for inside the block: this thread compiles any no worker has started
        # (scheduler.py), so it returns even while the pool is held or stopping.
        return [k.result() if hasattr(k, "result") else k for k in compile_all()]
