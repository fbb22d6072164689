"""Compiling loaded winners in the background, before their first launch asks for them.

When the first autotuned kernel of the process launches a new problem (the GPU driver is up by
then; nothing here runs at import, and a kernel decorated before that starts nothing), the
tuner starts compiling ahead, through Triton's own `JITFunction.preload`, the winners recorded
in the loaded files (--load_autotune_results_from) of every kernel our tuners drive in this
process: those of `autotune_cache.triton.autotune` and those routed from `triton.autotune`
(routing.py). An entry is preloaded into its kernel's JIT function when it records Triton's
specialization data and its key has that kernel's name and current source fingerprint and the
launching key's device and toolchain. A kernel decorated later (imported after the first
launch) starts its preloads at decoration. A kernel with nothing started (none matched, or over
the caps below) scans its own entries at its first launch, as every kernel did before the
suite-wide start existed. A hit awaits its winner's compile instead of compiling it again; a
compile no pool thread has started yet is run by that launch itself, not waited for in the queue.

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
it. All compiles share one pool of --autotune_compile_workers threads (under pytest-xdist, a
worker's share of them, each worker starting at its own offset in the list); it starts no new
compile while a tuning benchmarks (`held`), and at interpreter exit the compiles not started
are dropped.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import threading
import weakref
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune_cache.cache import Cache, get_cache
from autotune_cache.errors import AutotuneCacheError
from autotune_cache.foundation import env
from autotune_cache.foundation.key import CacheKey, Device
from autotune_cache.triton.compile import failure_reason

if TYPE_CHECKING:
    from autotune_cache.triton.autotuner import Autotuner

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
# Waiting for the compiles in flight before a tuning benchmarks: at most this long.
HOLD_TIMEOUT_S = 60.0


class Preload:
    """One compile of a recorded specialization into a JIT function, run once: by a pool thread,
    or by the launch that needs it before a pool thread has started it."""

    def __init__(self, jit_fn: Any, specialization: str) -> None:
        self.jit_fn = jit_fn
        self.specialization = specialization
        self.ok: bool | None = None  # after the run: whether Triton's preload returned
        self._claimed = False
        self._claim_lock = threading.Lock()
        self._done = threading.Event()
        self._generation = _generation

    def _claim(self) -> bool:
        with self._claim_lock:
            if self._claimed:
                return False
            self._claimed = True
            return True

    def run(self) -> None:
        """Compile, unless another thread has started it (never raises)."""
        if self._claim():
            try:
                self.ok = _preload(self.jit_fn, self.specialization)
            finally:
                self._done.set()

    def wait(self) -> None:
        """Return once the compile has finished (or failed): the caller runs it when no one has
        started it. A compile started in the parent of a forked process is not waited for."""
        if self._generation != _generation:
            return
        self.run()
        self._done.wait()


@dataclass
class _Ahead:
    """The process's compile-ahead, started for one cache (a new cache starts a new one)."""

    cache: Cache
    device: Device
    toolchain: Any
    pool: ThreadPoolExecutor
    entries_left: int
    bytes_left: int
    compiles_left: int
    compiles: dict[tuple[int, str], Preload] = field(default_factory=dict)
    # The same compiles by (JIT function, Triton's JIT key), for a launch to find (`awaiting`).
    by_jit_key: dict[tuple[int, str], Preload] = field(default_factory=dict)
    # Whether the tuners not launched yet were scanned (at the first tuner's first launch; the
    # warm-ups of plain JIT functions may have started the compile-ahead before it).
    tuners_started: bool = False


_lock = threading.RLock()
_ahead: _Ahead | None = None
_generation = 0
_tuners: weakref.WeakValueDictionary[int, Autotuner] = weakref.WeakValueDictionary()
_order = itertools.count()
_pools: list[ThreadPoolExecutor] = []
_hold = threading.Condition()
_holders = 0
_running = 0
_exit_hook = False
_local = threading.local()


def register(tuner: Autotuner) -> None:
    """Remember a tuner built in this process (weakly), for the compile-ahead."""
    _tuners[next(_order)] = tuner


def decorated(tuner: Autotuner) -> None:
    """A tuner was just decorated (with its final kernel name): when the compile-ahead has
    started for the process cache, start this kernel's preloads now."""
    with _lock:
        ahead = _ahead
        if ahead is None or tuner._preloads is not None:
            return
        try:
            cache = get_cache()
        except Exception:  # noqa: BLE001 - bad flags: the launch reports them
            return
        if cache is ahead.cache:
            started, new = _scan_ahead(ahead, tuner)
            if started:
                tuner._preloads = started
            for preload in new:
                _queue(ahead, preload)


def first_launch(tuner: Autotuner, key: CacheKey, cache: Cache) -> dict[str, Preload]:
    """At `tuner`'s first launch of a new problem (with `key`): start the compile-ahead of the
    process if it has not started for this cache, and return this kernel's preloads (its own
    loaded winners, any problem, any candidate list) by key digest."""
    with _lock:
        if tuner._preloads is not None:  # started by the compile-ahead meanwhile
            return tuner._preloads
        ahead = _ahead_for(cache, key.device, key.toolchain)
        own = _scan_launched(ahead, tuner, key)
        if not ahead.tuners_started:
            ahead.tuners_started = True
            _start_others(ahead, [t for _, t in sorted(_tuners.items()) if t is not tuner])
        return own


def _ahead_for(cache: Cache, device: Device, toolchain: Any) -> _Ahead:
    """The compile-ahead of `cache`, started now if it has not been (the caller holds _lock);
    one started for another cache is shut down."""
    global _ahead
    if _ahead is not None and _ahead.cache is cache:
        return _ahead
    if _ahead is not None:
        _ahead.pool.shutdown(wait=False)
    _ahead = _Ahead(cache, device, toolchain, _new_pool(cache), AHEAD_SCAN_LIMIT,
                    AHEAD_SCAN_BYTES, AHEAD_MAX)
    _start_driver()
    return _ahead


def warm_up(cache: Cache, jit_fn: Any, like: CacheKey) -> int:
    """Queue the compiles of the loaded warm-up entries (triton/warmups.py) matching `like`'s
    kernel, source fingerprint, device and toolchain into the plain JIT function `jit_fn`, under
    the one-kernel caps and what is left of the compile-ahead's, each xdist worker from its own
    offset; the number queued. Starts the compile-ahead for `cache` if it has not started."""
    with _lock:
        ahead = _ahead_for(cache, like.device, like.toolchain)
        cost = _fits(ahead, like.kernel)
        if cost is None:
            return 0
        _, new = _take(ahead, jit_fn, like, *cost)
        _queue_rotated(ahead, new)
        return len(new)


def awaiting(jit_fn: Any, jit_key: object) -> Preload | None:
    """The compile ahead that files a kernel of `jit_fn` under Triton's JIT key `jit_key` (the
    one a launch looks up), if one was queued, for the launch to wait for instead of compiling
    it a second time; None in the thread running a preload."""
    ahead = _ahead
    if ahead is None or in_preload() or not ahead.by_jit_key:
        return None
    try:
        text = json.dumps(jit_key)
    except (TypeError, ValueError):
        return None
    return ahead.by_jit_key.get((id(jit_fn), text))


def jit_key_of(specialization: str) -> str | None:
    """Triton's JIT key in recorded specialization data, as JSON text (how `awaiting` compares
    it with a launch's); None when the record has none."""
    try:
        key = json.loads(specialization)["key"]
    except (ValueError, KeyError, TypeError):
        return None
    return json.dumps(key)


def in_preload() -> bool:
    """Whether the calling thread is compiling a preload now."""
    return getattr(_local, "preloading", False)


def _jit_function(fn: Any) -> Any | None:
    """The JIT function under `fn`'s wrapper chain that can preload, or None."""
    while not hasattr(fn, "preload") and hasattr(fn, "fn"):
        fn = fn.fn
    return fn if hasattr(fn, "preload") else None


def _winners(cache: Cache, like: CacheKey, max_entries: int, max_bytes: int) -> dict[str, str]:
    """{key digest: recorded specialization} of the loaded entries matching `like`'s kernel,
    source fingerprint, device and toolchain (none when over the caps or damaged)."""
    try:
        loaded = cache.loaded_entries(like.kernel, max_entries=max_entries,
                                      max_unparsed_bytes=max_bytes)
    except AutotuneCacheError as e:  # a damaged entry: the lookup that needs it says so
        log.debug("autotune_cache: no preload of %s: %s", like.kernel, e)
        return {}
    return {key.digest(): entry.result.triton_specialization for key, entry in loaded
            if key.kernel == like.kernel and key.device == like.device
            and key.source_fingerprint == like.source_fingerprint
            and key.toolchain == like.toolchain and entry.result.triton_specialization}


def _submit(ahead: _Ahead, jit_fn: Any, wanted: dict[str, str], limit: int
            ) -> tuple[dict[str, Preload], list[Preload]]:
    """Preloads for up to `limit` new specializations of `wanted` (and every key whose
    specialization is compiled already or on its way): {digest: Preload}, and the new ones."""
    preloads: dict[str, Preload] = {}
    new: list[Preload] = []
    for digest, spec in wanted.items():
        found = ahead.compiles.get((id(jit_fn), spec))
        if found is None:
            if len(new) >= limit:
                continue
            found = ahead.compiles[(id(jit_fn), spec)] = Preload(jit_fn, spec)
            new.append(found)
            jit_key = jit_key_of(spec)
            if jit_key is not None:
                ahead.by_jit_key.setdefault((id(jit_fn), jit_key), found)
        preloads[digest] = found
    return preloads, new


def _scan_launched(ahead: _Ahead, tuner: Autotuner, key: CacheKey) -> dict[str, Preload]:
    """The launching kernel's preloads: its own scan, under the one-kernel caps."""
    jit_fn = _jit_function(tuner.fn)
    if jit_fn is None:
        return {}
    wanted = _winners(ahead.cache, key, PRELOAD_SCAN_LIMIT, PRELOAD_SCAN_BYTES)
    preloads, new = _submit(ahead, jit_fn, wanted, PRELOAD_MAX)
    for preload in new:
        _queue(ahead, preload)
    return preloads


def _scan_ahead(ahead: _Ahead, tuner: Autotuner) -> tuple[dict[str, Preload], list[Preload]]:
    """A kernel not launched yet: its preloads by key digest, under the one-kernel caps and
    what is left of the compile-ahead's, and those new (to queue); none when it has no loaded
    entries or does not fit."""
    jit_fn = _jit_function(tuner.fn)
    name = tuner.kernel_name
    cost = None if jit_fn is None else _fits(ahead, name)
    if cost is None:
        return {}, []
    try:
        fingerprint = tuner._source_fingerprint or tuner.fresh_source_fingerprint()
    except Exception as e:  # noqa: BLE001 - the launch computes (and reports) its own
        log.debug("autotune_cache: no preload of %s: %s", name, failure_reason(e))
        return {}, []
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


def _take(ahead: _Ahead, jit_fn: Any, like: CacheKey, entries: int, unparsed: int
          ) -> tuple[dict[str, Preload], list[Preload]]:
    """Scan the loaded entries matching `like` (which `_fits` measured) into preloads of
    `jit_fn`, charging the compile-ahead's caps: {digest: Preload}, and those new (to queue)."""
    ahead.entries_left -= entries
    ahead.bytes_left -= unparsed
    wanted = _winners(ahead.cache, like, entries, unparsed)
    preloads, new = _submit(ahead, jit_fn, wanted, min(PRELOAD_MAX, ahead.compiles_left))
    ahead.compiles_left -= len(new)
    return preloads, new


def _start_others(ahead: _Ahead, tuners: list[Autotuner]) -> None:
    """Scan every other tuner not launched yet and queue their compiles, each xdist worker from
    its own offset."""
    new: list[Preload] = []
    names = ahead.cache.loaded_kernels()  # one pass over the files' index, no parsing
    for tuner in tuners:
        if tuner._preloads is None and tuner.kernel_name in names:
            started, added = _scan_ahead(ahead, tuner)
            if started:
                tuner._preloads = started
            new += added
    _queue_rotated(ahead, new)
    if new:
        log.debug("autotune_cache: compiling %d loaded winners of %d kernels ahead", len(new),
                  sum(1 for t in tuners if t._preloads))


def _new_pool(cache: Cache) -> ThreadPoolExecutor:
    """The compile pool: --autotune_compile_workers threads, or a pytest-xdist worker's share."""
    global _exit_hook
    workers = cache.settings.compile_workers
    worker = env.xdist_worker()
    if worker is not None:
        workers = max(1, workers // worker[1])
    pool = ThreadPoolExecutor(workers, thread_name_prefix="autotune-preload")
    _pools.append(pool)
    if not _exit_hook:
        _exit_hook = True
        # Before the interpreter joins the pool's threads (which would first run every queued
        # compile): drop those not started. threading's own hook list, as concurrent.futures.
        register_hook = getattr(threading, "_register_atexit", None)
        with contextlib.suppress(RuntimeError):  # already shutting down
            if register_hook is not None:
                register_hook(_drop_queued)
    return pool


def _drop_queued() -> None:
    for pool in list(_pools):
        pool.shutdown(wait=False, cancel_futures=True)


def _queue_rotated(ahead: _Ahead, new: list[Preload]) -> None:
    """Queue `new` in order, a pytest-xdist worker from its own offset into the list (the
    workers share TRITON_CACHE_DIR: each compiles different ones first)."""
    worker = env.xdist_worker()
    if worker is not None and new:
        offset = len(new) * worker[0] // worker[1]
        new = new[offset:] + new[:offset]
    for preload in new:
        _queue(ahead, preload)


def _queue(ahead: _Ahead, preload: Preload) -> None:
    try:
        ahead.pool.submit(_pool_task, preload)
    except RuntimeError as e:  # shut down (interpreter exit): the launch compiles as usual
        log.debug("autotune_cache: preload not queued: %s", e)


def _pool_task(preload: Preload) -> None:
    """A pool thread's turn: wait while a tuning benchmarks, then compile."""
    global _running
    with _hold:
        _hold.wait_for(lambda: _holders == 0)
        _running += 1
    try:
        preload.run()
    finally:
        with _hold:
            _running -= 1
            _hold.notify_all()


@contextlib.contextmanager
def held() -> Iterator[None]:
    """While a tuning benchmarks: no preload starts, and those in flight are finished first
    (for up to HOLD_TIMEOUT_S), so background compiles do not compete with the timed launches."""
    global _holders
    with _hold:
        _holders += 1
        _hold.wait_for(lambda: _running == 0, timeout=HOLD_TIMEOUT_S)
    try:
        yield
    finally:
        with _hold:
            _holders -= 1
            _hold.notify_all()


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


def _preload(jit_fn: Any, specialization: str) -> bool:
    """Compile one recorded specialization into `jit_fn`'s kernel cache, and build its launcher;
    whether it compiled (never raises)."""
    _local.preloading = True
    try:
        kernel = jit_fn.preload(specialization)
    except Exception as e:  # a foreign or stale record: the launch compiles as usual
        log.debug("autotune_cache: preloading %s failed: %s",
                  getattr(jit_fn, "__name__", jit_fn), failure_reason(e))
        return False
    finally:
        _local.preloading = False
    _build_launcher(kernel)
    return True


def _build_launcher(kernel: Any) -> None:
    """Build the compiled kernel's launcher, which Triton otherwise builds at its first launch,
    on the launching thread: a C module compiled with the host compiler (about 0.2 s per kernel
    signature on the H200 host with an empty compile cache: 2.4 s of a loaded FLA suite's tests)
    and filed in TRITON_CACHE_DIR, where the first launch finds it. Only the build: the
    kernel's own handles (its module loaded on the GPU) are left to that launch, so nothing
    here touches the device. Never raises."""
    if kernel is None or getattr(kernel, "_run", None) is not None:
        return
    try:
        from triton.runtime import driver

        driver.active.launcher_cls(kernel.src, kernel.metadata)
    except Exception as e:  # another Triton's internals: the first launch builds it
        log.debug("autotune_cache: building a launcher ahead failed: %s", failure_reason(e))


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's pool threads: forget their compiles."""
    global _ahead, _generation, _lock, _hold, _holders, _running
    _generation += 1
    _ahead = None
    _lock = threading.RLock()
    _hold = threading.Condition()
    _holders = _running = 0
    _pools.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
