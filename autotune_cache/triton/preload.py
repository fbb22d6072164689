"""Compiling loaded winners in the background, before their first launch asks for them.

When the first autotuned kernel of the process launches a new problem (the GPU driver is up by
then), the tuner starts compiling ahead, through Triton's own `JITFunction.preload`, the winners
recorded in the loaded files (--load_autotune_results_from) of every kernel our tuners drive in
this process: those of `autotune_cache.triton.autotune` and those routed from `triton.autotune`
(routing.py). An entry is preloaded into its kernel's JIT function when it records Triton's
specialization data and its key has that kernel's name and current source fingerprint and the
launching key's device and toolchain. A kernel decorated later (imported after the first launch)
starts its preloads at decoration. A kernel with nothing started (none matched, or over the caps
below) scans its own entries at its first launch, as every kernel did before the suite-wide
start existed. With --autotune_compile_at_start the compile-ahead starts before that, at the
program's own `import triton`, for the device the files name (early.py, `start_early`), and the
first launch confirms that device (`_ahead_for`). A hit awaits its winner's compile instead of
compiling it again; a compile no pool thread has started yet is run by that launch itself, not
waited for in the queue.

The source fingerprint of a kernel not launched yet is computed at the start, apart from the one
the tuner keeps: the fingerprint reads global constexpr values as they are when it is computed,
and the launch's key must read them at the launch. The two agree unless a module changes such a
value in between, or (for a kernel decorated after the start) the value is defined below the
kernel in its module: then nothing is preloaded for it, or a preload is wasted, never used.

A preload compiles exactly the recorded specialization and files it under the recorded JIT key,
so a launch with another specialization never uses it: it compiles as usual and the preload was
only wasted work. A preload also builds the kernel's launcher (the C module Triton otherwise
builds at the kernel's first launch) into the compile cache. Any failure is logged at debug
level and ignored. The work is bounded:

* one kernel's scan (at its first launch) reads its entries only when the loaded files hold at
  most PRELOAD_SCAN_LIMIT of them with at most PRELOAD_SCAN_BYTES of their text still unparsed
  (a canonical text file's entries are parsed on first use: results_index), and preloads at
  most PRELOAD_MAX of its winners;
* the kernels not launched yet are scanned, in the order they were decorated, each under those
  caps and all together under AHEAD_SCAN_LIMIT entries, AHEAD_SCAN_BYTES of unparsed text and
  AHEAD_MAX compiles; a kernel that does not fit is left to its own first launch.

Every specialization is compiled once per JIT function, however many keys and kernels record
it. The compiles are queued on the process's compile scheduler (scheduler.py) at AHEAD
priority, behind any tuning's candidates (under pytest-xdist on a worker's share of its
threads, each worker starting at its own offset in the list); none starts while a tuning
benchmarks, and at interpreter exit those not started are dropped. What this module keeps is
per-process state (process.py): a forked child starts its own compile-ahead.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import threading
import weakref
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from typing import Any, Protocol

from autotune_cache.cache import Cache, get_cache
from autotune_cache.errors import AutotuneCacheError
from autotune_cache.foundation import env
from autotune_cache.foundation.key import CacheKey, Device
from autotune_cache.triton import preload_job, process, scheduler
from autotune_cache.triton.compile import failure_reason
from autotune_cache.triton.fingerprint import jit_function, module_importing
from autotune_cache.triton.preload_job import in_preload
from autotune_cache.triton.scheduler import CompileJob, Priority

log = logging.getLogger(__name__)

# One kernel's scan: up to this many of its entries and this much of their text still to parse
# (protobuf's Python text parser reads about 1.3 MB/s on the CI machine, so 256 KiB bounds the
# parsing at about 0.2 s: a scenario-B file, 3 entries of 48 candidates, is 56 kB); at most this
# many of its winners are preloaded.
PRELOAD_SCAN_LIMIT = 2000
PRELOAD_SCAN_BYTES = 256 * 1024
PRELOAD_MAX = 64
# All kernels scanned ahead of their first launch together: about 0.8 s of parsing at most (the
# entries parsed stay parsed, so a later lookup of any of them parses nothing), and at most this
# many compiles that no launch has asked for.
AHEAD_SCAN_LIMIT = 4000
AHEAD_SCAN_BYTES = 1024 * 1024
AHEAD_MAX = 256
# A dump run's compiles of warm-ups recorded under another source or toolchain (`_recorded`), on
# top of AHEAD_MAX: they may all be wasted.
SPECULATIVE_MAX = 64
# An early start of a regeneration (early.py): the candidates of the entries recorded under
# another toolchain or source, derived from their winners (their keys miss and are tuned again),
# on a budget of their own.
CANDIDATES_MAX = 512


class AheadTuner(Protocol):
    """What the compile-ahead needs of a tuner (autotuner.py)."""

    fn: Any
    kernel_name: str

    def source_fingerprint_now(self) -> str: ...


Preloads = dict[str, CompileJob]  # a kernel's preloads, by key digest


@dataclass
class _Ahead:
    """The process's compile-ahead, started for one cache (a new cache starts a new one)."""

    cache: Cache
    device: Device | None  # None: started early, no loaded entry has named the device yet
    toolchain: Any
    entries_left: int
    bytes_left: int
    compiles_left: int
    # Started before the first launch (early.py): its compiles are for this target, detached
    # from the GPU driver (detached.py), until a launch confirms the device (`_ahead_for`).
    early: bool = False
    target: Any = None
    speculative_left: int = SPECULATIVE_MAX
    # An early start of a dump run: stale records and their candidates are compiled too.
    stale_too: bool = False
    candidates_left: int = CANDIDATES_MAX
    compiles: dict[tuple[int, str], CompileJob] = field(default_factory=dict)
    # The same compiles by (JIT function, Triton's JIT key), for a launch to find (`awaiting`).
    by_jit_key: dict[tuple[int, str], CompileJob] = field(default_factory=dict)
    # Whether the tuners not launched yet were scanned (at the first tuner's first launch; the
    # warm-ups of plain JIT functions may have started the compile-ahead before it).
    tuners_started: bool = False


class _State:
    """The compile-ahead's per-process state (process.py)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.ahead: _Ahead | None = None
        # Every tuner built in this process, weakly, in the order they were built.
        self.tuners: weakref.WeakValueDictionary[int, AheadTuner] = \
            weakref.WeakValueDictionary()
        self.order = itertools.count()
        # Tuners decorated early while their module was being imported (`decorated`).
        self.waiting: weakref.WeakSet[AheadTuner] = weakref.WeakSet()
        # Each tuner's preloads once started (at its first launch, or ahead of it).
        self.started: weakref.WeakKeyDictionary[AheadTuner, Preloads] = \
            weakref.WeakKeyDictionary()


def _state() -> _State:
    return process.current().made("compile_ahead", _State)


def ahead() -> _Ahead | None:
    """The process's compile-ahead, if it has started (for tests and diagnostics)."""
    found = process.current().compile_ahead
    return None if found is None else found.ahead


def register(tuner: AheadTuner) -> None:
    """Remember a tuner built in this process (weakly), for the compile-ahead."""
    state = _state()
    state.tuners[next(state.order)] = tuner


def started(tuner: AheadTuner) -> Preloads | None:
    """`tuner`'s preloads by key digest, or None when none were started for it yet."""
    return _state().started.get(tuner)


def decorated(tuner: AheadTuner) -> None:
    """A tuner was just decorated (with its final kernel name): when the compile-ahead has
    started for the process cache, start this kernel's preloads now."""
    state = _state()
    with state.lock:
        current = state.ahead
        if current is None or tuner in state.started:
            return
        if not current.early:
            try:
                cache = get_cache()
            except Exception:  # noqa: BLE001 - bad flags: the launch reports them
                return
            if cache is not current.cache:
                return
        if current.early and module_importing(tuner.fn):
            state.waiting.add(tuner)  # scanned once its module is imported (`retry_waiting`)
            return
        try:
            preloads, new = _scan_ahead(current, tuner)
        except Exception as e:  # noqa: BLE001 - at decoration, inside the program's import
            log.debug("autotune_cache: no preload of %s: %s", tuner.kernel_name, e)
            return
        if preloads:
            state.started[tuner] = preloads
        for job in new:
            _queue(job)


def retry_waiting() -> None:
    """Scan the tuners decorated early while their module was still being imported, now that
    it is (the others wait on)."""
    state = _state()
    with state.lock:
        ready = [t for t in list(state.waiting) if not module_importing(t.fn)]
        for tuner in ready:
            state.waiting.discard(tuner)
    for tuner in ready:
        decorated(tuner)


def start_early(cache: Cache, stale_too: bool = False) -> bool:
    """Start the compile-ahead of `cache` before any launch (early.py), unless one has started;
    whether this call started it. The device is not known yet: the first loaded entries
    scanned name it (`early_device`). Tuners built before now are scanned at once.
    `stale_too` (a dump run): the records of another toolchain or source, and their entries'
    candidates, are compiled too, at the lowest priority (`_take`)."""
    state = _state()
    with state.lock:
        if state.ahead is not None:
            return False
        state.ahead = _Ahead(cache, None, (), AHEAD_SCAN_LIMIT, AHEAD_SCAN_BYTES, AHEAD_MAX,
                             early=True, stale_too=stale_too)
        pool = scheduler.scheduler(cache.settings.compile_workers)
        pool.switch_interval_us = cache.settings.switch_interval_us
        built = [t for _, t in sorted(state.tuners.items()) if t not in state.started]
    for tuner in built:
        decorated(tuner)
    return True


def early_device(name: str) -> tuple[Device, Any] | None:
    """The early compile-ahead's device and toolchain, picked from the loaded entries of kernel
    `name` if no entry named it yet (detached.py `pick`); None when there is no early
    compile-ahead, or no device to pick."""
    state = _state()
    with state.lock:
        current = state.ahead
        if current is None or not current.early:
            return None
        if current.device is None and not _pick_device(current, name):
            return None
        assert current.device is not None
        return current.device, current.toolchain


def _pick_device(ahead: _Ahead, name: str) -> bool:
    """Name the early compile-ahead's device after kernel `name`'s loaded entries (one NVIDIA
    device this machine lists); whether it did."""
    from autotune_cache.triton import detached
    from autotune_cache.triton.device import toolchain

    cost = _fits(ahead, name)
    if cost is None:
        return False
    try:
        loaded = ahead.cache.loaded_entries(name, max_entries=cost[0],
                                            max_unparsed_bytes=cost[1])
    except AutotuneCacheError:
        return False
    device = detached.pick((k.device for k, e in loaded if e.result.triton_specialization),
                           detached.visible_models())
    target = None if device is None else detached.target_of(device)
    if device is None or target is None:
        return False
    ahead.device, ahead.target = device, target
    ahead.toolchain = tuple(sorted(toolchain(device).items()))
    log.debug("autotune_cache: compiling ahead from the start for %s", device)
    return True


def first_launch(tuner: AheadTuner, key: CacheKey, cache: Cache) -> Preloads:
    """At `tuner`'s first launch of a new problem (with `key`): start the compile-ahead of the
    process if it has not started for this cache, and return this kernel's preloads (its own
    loaded winners, any problem, any candidate list) by key digest (kept: see `started`)."""
    state = _state()
    with state.lock:
        found = state.started.get(tuner)
        early = state.ahead if state.ahead is not None and state.ahead.early else None
        if found is not None and early is None:  # started by the compile-ahead meanwhile
            return found
        current = _ahead_for(state, cache, key.device, key.toolchain)
        if found is None or current is not early:  # (the early start's guess did not hold)
            found = _scan_launched(current, tuner, key)
        own = state.started[tuner] = found
        if not current.tuners_started:
            current.tuners_started = True
            _start_others(state, current,
                          [t for _, t in sorted(state.tuners.items()) if t is not tuner])
        return own


def unconfirmed() -> bool:
    """Whether the compile-ahead started early and no launch has confirmed its device yet."""
    found = process.current().compile_ahead
    return found is not None and found.ahead is not None and found.ahead.early


def not_preloading(tuner: AheadTuner) -> None:
    """`tuner` preloads nothing in this process (the interpreter compiles nothing)."""
    _state().started.setdefault(tuner, {})


def wait(job: CompileJob | None) -> None:
    """Wait for a preload (or run it here when no worker has started it), so the launch that
    follows finds its kernel; a preload the parent of a forked process started is skipped."""
    if job is not None:
        with contextlib.suppress(CancelledError):
            job.result()


def _ahead_for(state: _State, cache: Cache, device: Device, toolchain: Any) -> _Ahead:
    """The compile-ahead of `cache`, started now if it has not been (the caller holds the
    lock); one started for another cache is replaced (its queued compiles still run)."""
    found = state.ahead
    if found is not None and found.early and found.device in (None, device) \
            and found.toolchain in ((), toolchain) \
            and found.cache.settings.load_from == cache.settings.load_from:
        # The launch confirms the early start's device: its compiles go on for this cache,
        # and those queued from now on are filed into the JIT functions as usual.
        found.cache, found.device, found.toolchain = cache, device, toolchain
        found.early, found.target = False, None
        scheduler.scheduler(cache.settings.compile_workers).switch_interval_us = None
        _start_driver()
        return found
    if found is not None and found.cache is cache and not found.early:
        return found
    if found is not None and found.early:
        # Their compiles were for the device the early start guessed: those not started yet
        # are dropped (a launch waiting for one skips it), and the kernels scanned again.
        state.started.clear()
        for job in found.compiles.values():
            job.cancel()
    state.ahead = _Ahead(cache, device, toolchain, AHEAD_SCAN_LIMIT, AHEAD_SCAN_BYTES, AHEAD_MAX)
    scheduler.scheduler(cache.settings.compile_workers).switch_interval_us = None
    _start_driver()
    return state.ahead


def warm_up(cache: Cache, jit_fn: Any, like: CacheKey, *, compile_cache_only: bool,
            early: bool = False) -> int:
    """Queue the compiles of the loaded warm-up entries (triton/warmups.py) matching `like`'s
    kernel, source fingerprint, device and toolchain into the plain JIT function `jit_fn`, under
    the one-kernel caps and what is left of the compile-ahead's, each xdist worker from its own
    offset; the number queued. Starts the compile-ahead for `cache` if it has not started.

    `compile_cache_only` (a dump run): each compile fills Triton's compile cache and nothing
    else, so that the launch that needs it still goes through Triton's compile path, where the
    dump records it, and finds its binary there (see preload_job.py). The kernel's entries of this
    device under another source or toolchain are then queued too, at SPECULATIVE priority and
    on their own budget (`_recorded` says why). `early`: a scan of the early start (early.py),
    whose device `like` names: queued on it, never starting another."""
    state = _state()
    with state.lock:
        if early:
            current = state.ahead
            if current is None or current.cache is not cache:
                return 0
        else:
            current = _ahead_for(state, cache, like.device, like.toolchain)
        cost = _fits(current, like.kernel)
        if cost is None:
            return 0
        _, new = _take(current, jit_fn, like, *cost, compile_cache_only=compile_cache_only)
        queue_rotated(new)
        return len(new)


def awaiting(jit_fn: Any, jit_key: object) -> CompileJob | None:
    """The compile ahead that files a kernel of `jit_fn` under Triton's JIT key `jit_key` (the
    one a launch looks up), if one was queued, for the launch to wait for instead of compiling
    it a second time; None in the thread running a preload."""
    state = process.current().compile_ahead
    current = None if state is None else state.ahead
    if current is None or not current.by_jit_key or in_preload():
        return None
    try:
        text = json.dumps(jit_key)
    except (TypeError, ValueError):
        return None
    return current.by_jit_key.get((id(jit_fn), text))


def jit_key_of(specialization: str) -> str | None:
    """Triton's JIT key in recorded specialization data, as JSON text (how `awaiting` compares
    it with a launch's); None when the record has none."""
    try:
        key = json.loads(specialization)["key"]
    except (ValueError, KeyError, TypeError):
        return None
    return json.dumps(key)


def _winners(cache: Cache, like: CacheKey, max_entries: int, max_bytes: int
             ) -> dict[str, str]:
    """{key digest: recorded specialization} of the loaded entries matching `like`'s kernel,
    source fingerprint, device and toolchain (none when over the caps or damaged)."""
    return _recorded(cache, like, max_entries, max_bytes)[0]


Recorded = tuple[dict[str, str], dict[str, str], dict[str, str]]


def _recorded(cache: Cache, like: CacheKey, max_entries: int, max_bytes: int,
              derive: bool = False) -> Recorded:
    """`_winners`, and beside it the same for the entries of `like`'s kernel and device
    recorded under another source fingerprint or toolchain (an edited kernel, an upgrade).

    The second are for compile-cache-only preloads (a dump run). Such a compile is of the
    kernel's current source, and no launch can use it unseen: one whose specialization it is
    finds it in the compile cache, any other compiles as usual. So a regen after an upgrade or an
    edit still starts the last run's warm-ups early, and a record that no longer fits costs only
    its compile. Another device's records are left out: their options name that device's
    architecture (Triton 3.6 compiles a record's own `arch`), so none could ever be a hit.

    With `derive`, a third: the candidates of those other entries, each derived from its
    winner's specialization (compile_helper.py `candidate_spec`), by their own text: their keys
    miss and are tuned again, and the tuning then finds them in the compile cache."""
    try:
        loaded = cache.loaded_entries(like.kernel, max_entries=max_entries,
                                      max_unparsed_bytes=max_bytes)
    except AutotuneCacheError as e:  # a damaged entry: the lookup that needs it says so
        log.debug("autotune_cache: no preload of %s: %s", like.kernel, e)
        return {}, {}, {}
    current: dict[str, str] = {}
    other: dict[str, str] = {}
    derived: dict[str, str] = {}
    defaults = _config_defaults() if derive else {}
    for key, entry in loaded:
        spec = entry.result.triton_specialization
        if key.kernel != like.kernel or key.device != like.device or not spec:
            continue
        same = (key.source_fingerprint == like.source_fingerprint
                and key.toolchain == like.toolchain)
        (current if same else other)[key.digest()] = spec
        if derive and not same:
            derived.update((d, d) for d in _candidate_specs(spec, entry.result.candidates,
                                                             defaults))
    return current, other, derived


def _config_defaults() -> dict[str, Any]:
    from autotune_cache.triton.compile_helper import triton_config_defaults

    return triton_config_defaults()


def _candidate_specs(winner: str, timings: Any, defaults: dict[str, Any]) -> list[str]:
    """The specialization data of each recorded candidate, derived from the winner's (Triton's
    `defaults` for the launch options a candidate leaves unset)."""
    from autotune_cache.triton.compile_helper import candidate_spec

    found = (candidate_spec(winner, t.config, defaults) for t in timings)
    return [spec for spec in found if spec is not None and spec != winner]


def _submit(ahead: _Ahead, jit_fn: Any, wanted: dict[str, str], limit: int,
            compile_cache_only: bool = False, speculative: bool = False
            ) -> tuple[Preloads, list[CompileJob]]:
    """Preloads for up to `limit` new specializations of `wanted` (and every key whose
    specialization is compiled already or on its way): {digest: job}, and the new ones (not
    queued yet). `speculative` (records that may not fit any more, `_recorded`): queued at
    the lowest priority, and never awaited by a launch (`awaiting`), which would otherwise wait
    for a compile that cannot help it and then compile again."""
    preloads: Preloads = {}
    new: list[CompileJob] = []
    priority = Priority.SPECULATIVE if speculative else Priority.AHEAD
    for digest, spec in wanted.items():
        found = ahead.compiles.get((id(jit_fn), spec))
        if found is None:
            if len(new) >= limit:
                continue
            work = preload_job.work(jit_fn, spec, compile_cache_only, speculative, ahead.target)
            found = CompileJob(work, priority, label=spec, target=ahead.target)
            ahead.compiles[(id(jit_fn), spec)] = found
            new.append(found)
            jit_key = jit_key_of(spec)
            if jit_key is not None and not speculative:
                ahead.by_jit_key.setdefault((id(jit_fn), jit_key), found)
        preloads[digest] = found
    return preloads, new


def _scan_launched(ahead: _Ahead, tuner: AheadTuner, key: CacheKey) -> Preloads:
    """The launching kernel's preloads: its own scan, under the one-kernel caps."""
    jit_fn = jit_function(tuner.fn)
    if jit_fn is None:
        return {}
    wanted = _winners(ahead.cache, key, PRELOAD_SCAN_LIMIT, PRELOAD_SCAN_BYTES)
    preloads, new = _submit(ahead, jit_fn, wanted, PRELOAD_MAX)
    for job in new:
        _queue(job)
    return preloads


def _scan_ahead(ahead: _Ahead, tuner: AheadTuner) -> tuple[Preloads, list[CompileJob]]:
    """A kernel not launched yet: its preloads by key digest, under the one-kernel caps and
    what is left of the compile-ahead's, and those new (to queue); none when it has no loaded
    entries or does not fit."""
    jit_fn = jit_function(tuner.fn)
    name = tuner.kernel_name
    cost = None if jit_fn is None else _fits(ahead, name)
    if cost is None or (ahead.device is None and not _pick_device(ahead, name)):
        return {}, []
    try:
        fingerprint = tuner.source_fingerprint_now()
    except Exception as e:  # noqa: BLE001 - the launch computes (and reports) its own
        log.debug("autotune_cache: no preload of %s: %s", name, failure_reason(e))
        return {}, []
    assert ahead.device is not None
    like = CacheKey(kernel=name, source_fingerprint=fingerprint, configs_fingerprint="",
                    problem={}, device=ahead.device, toolchain=ahead.toolchain)
    return _take(ahead, jit_fn, like, *cost)


def _fits(ahead: _Ahead, name: str) -> tuple[int, int] | None:
    """(entries, unparsed bytes) of `name`'s loaded entries when scanning them fits the
    one-kernel caps and what is left of the compile-ahead's, else None (none loaded, or no
    compile left)."""
    if ahead.compiles_left <= 0:
        return None
    entries, unparsed = ahead.cache.loaded_cost(name)
    if not entries or entries > min(PRELOAD_SCAN_LIMIT, ahead.entries_left) \
            or unparsed > min(PRELOAD_SCAN_BYTES, ahead.bytes_left):
        return None
    return entries, unparsed


def _take(ahead: _Ahead, jit_fn: Any, like: CacheKey, entries: int, unparsed: int,
          compile_cache_only: bool = False) -> tuple[Preloads, list[CompileJob]]:
    """Scan the loaded entries matching `like` (which `_fits` measured) into preloads of
    `jit_fn`, charging the compile-ahead's caps: {digest: job}, and those new (to queue)."""
    ahead.entries_left -= entries
    ahead.bytes_left -= unparsed
    wanted, other, derived = _recorded(ahead.cache, like, entries, unparsed,
                                       derive=ahead.stale_too)
    preloads, new = _submit(ahead, jit_fn, wanted, min(PRELOAD_MAX, ahead.compiles_left),
                            compile_cache_only)
    ahead.compiles_left -= len(new)
    if (compile_cache_only or ahead.stale_too) and other:
        # Their own budget: records that may not fit never take a current one's place.
        _, more = _submit(ahead, jit_fn, other, min(PRELOAD_MAX, ahead.speculative_left),
                          True, speculative=True)
        ahead.speculative_left -= len(more)
        new += more
    if derived:
        _, more = _submit(ahead, jit_fn, derived, min(PRELOAD_MAX, ahead.candidates_left),
                          True, speculative=True)
        ahead.candidates_left -= len(more)
        new += more
    return preloads, new


def _start_others(state: _State, ahead: _Ahead, tuners: list[AheadTuner]) -> None:
    """Scan every other tuner not launched yet and queue their compiles, each xdist worker from
    its own offset."""
    new: list[CompileJob] = []
    names = ahead.cache.loaded_kernels()  # one pass over the files' index, no parsing
    for tuner in tuners:
        if tuner not in state.started and tuner.kernel_name in names:
            preloads, added = _scan_ahead(ahead, tuner)
            if preloads:
                state.started[tuner] = preloads
            new += added
    queue_rotated(new)
    if new:
        log.debug("autotune_cache: compiling %d loaded winners of %d kernels ahead", len(new),
                  sum(1 for t in tuners if state.started.get(t)))


def queue_rotated(new: list[CompileJob]) -> None:
    """Queue `new` in order, a pytest-xdist worker from its own offset into the list (the
    workers share TRITON_CACHE_DIR: each compiles different ones first)."""
    worker = env.xdist_worker()
    if worker is not None and new:
        offset = len(new) * worker[0] // worker[1]
        new = new[offset:] + new[:offset]
    for job in new:
        _queue(job)


def _queue(job: CompileJob) -> None:
    """Hand a preload to the scheduler (sized when the compile-ahead started)."""
    scheduler.scheduler().enqueue(job)


def _start_driver() -> None:
    """Create Triton's active GPU driver here, once, before the preload threads start: with an
    empty compile cache that builds its C driver stub (0.35-0.45 s on the H200 host), and each
    preload thread would otherwise race to build its own (a timeline of a fresh process showed
    three concurrent builds). A failure is left to the launch to report."""
    try:
        from triton.runtime import driver

        driver.active  # noqa: B018 (the property creates the driver)
    except Exception as e:
        log.debug("autotune_cache: starting Triton's driver failed: %s", failure_reason(e))
