"""The process's one compile scheduler: every compile the engine starts in the background.

Four kinds of work share it, in this order of priority:

1. A compile some thread is waiting for now. Waiting on a job that no worker has started
   (`CompileJob.result()`) runs it on the waiting thread at once, whatever its queue, so a
   launch never queues behind anything; a job a worker already runs is waited for.
2. `Priority.CANDIDATE`: a tuning's candidates (compile.py: compiled before they are
   benchmarked, at the launch or, in a dump run, queued for the end of the run by deferred.py).
3. `Priority.AHEAD`: loaded winners and plain-kernel warm-ups compiled before any launch asks
   for them (preload.py, warmups.py), and the early start's ready-up (early.py). Under
   pytest-xdist a worker runs at most its share of the threads on this kind (the workers share
   the machine), each from its own offset in the list.
4. `Priority.SPECULATIVE`: a dump run's warm-ups recorded under another source or toolchain
   (preload.py `_recorded`), which may not fit any more, and launchers built from the file
   before their kernels exist (early.py): only when nothing else waits, under the same xdist
   share, and no launch ever waits for one.

A worker thread always takes the oldest job of the highest priority that has room. While a
tuning benchmarks (`held()`), no worker starts a job and the jobs in flight are let finish first
(for up to HOLD_TIMEOUT_S), so no compile competes with the timed launches; a thread that waits
for a job still runs it itself. The pool has --autotune_compile_workers threads, started as
work arrives; they stop at interpreter exit once their current job ends, and a job never started
is then run by whoever waits for it (or by no one: work ahead of need is only ever a head
start). A forked child gets a new scheduler (process.py); a job of the parent's that a child
waits for and that the parent had started raises `CancelledError`.

While any worker compiles, Python's thread switch interval is --autotune_switch_interval_us
(200 us; Python's own is 5 ms), and back to what it was when the last one ends
(docs/decisions/0034-switch-interval-while-compiling.md): a compile thread gives up the GIL in
every file write and native call, and a busy main thread (a conftest.py importing a library,
a test) kept it for up to 5 ms each time. On the CPU machine 8 compiles beside a busy main
thread took 2.89 s at 5 ms and 0.88 s at 200 us (0.55 s alone), the main thread's own work
1.21x and 1.19x of its time alone (bench/process_cost.py --switch-interval).

Before this module each of four features built its own thread pool, with no shared priorities:
a launch could wait behind a queue of compiles ahead of need that nobody had asked for yet.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError, Future
from typing import Any

from autotune_cache.foundation import env
from autotune_cache.triton import process

# Waiting for the compiles in flight before a tuning benchmarks: at most this long.
HOLD_TIMEOUT_S = 60.0
# The pool's threads run this much nicer (Linux, per thread) than the thread that started them:
# their work is ahead of need, while a launch compiling what it needs now runs on its own thread
# and must not queue for the CPU behind them. Profiled on the H200 (16 vCPUs; 16 threads compile
# 48 matmul candidates 6.9x faster than one, 16 processes 10.0x; a removed benchmark): in
# Liger-Kernel's dump run, each test's plain @triton.jit compiles took 1.0-1.3 s longer than in
# plain Triton's run, beside the tunings' candidates compiling in the background. A job a
# launch waits for that no worker has started runs on the launch's thread, at its priority.
WORKER_NICENESS = 5
# --autotune_switch_interval_us when no cache is configured yet (a compile ahead at start).
DEFAULT_SWITCH_INTERVAL_US = 200


class Priority(enum.IntEnum):
    """What a queued compile is for; a lower value runs first (see the module docstring)."""

    CANDIDATE = 1
    AHEAD = 2
    SPECULATIVE = 3


_primed: set[Any] = set()  # None (the driver's target) or a target's (backend, arch)
_prime_lock = threading.Lock()


def prime_triton(target: Any | None = None) -> None:
    """Compute, once per target and on one thread, what every Triton compile's cache key starts
    with: the hash of Triton's own sources and 100+ MB libtriton (`triton_key`) and the
    backend's ptxas version (a subprocess). Both are memoized by Triton but not guarded: the
    pool's first jobs, starting together, each computed them. Profiled on the H200 (Liger-Kernel's
    suite, loading its results into an empty compile cache): 8.2 s of the compile threads' 85 s,
    all at the start, while the first test waited for its winner. `target`: Triton's compile
    target, for a compile that must not start the GPU driver (detached.py); None: the driver's
    current one. A failure here is left to the compile."""
    key = None if target is None else (getattr(target, "backend", None),
                                       getattr(target, "arch", None))
    if key in _primed:
        return
    with _prime_lock:
        if key in _primed:
            return
        try:
            from triton.compiler.compiler import make_backend
            from triton.runtime.cache import triton_key

            triton_key()
            if target is None:
                from triton.runtime.driver import driver

                target = driver.active.get_current_target()
            make_backend(target).hash()
        except Exception:  # noqa: BLE001, S110 - only a head start; the compile says what fails
            pass
        finally:
            _primed.add(key)


def _nice() -> int | None:
    """The calling thread's nice value (Linux: a thread has its own), or None elsewhere."""
    if sys.platform != "linux":
        return None
    try:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    except (OSError, AttributeError):
        return None


def _set_nice(value: int | None) -> None:
    """Set the calling thread's nice value; where that is refused or unknown, nothing changes."""
    if value is None:
        return
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), value)


class CompileJob(Future):  # type: ignore[type-arg]
    """One compile: a `Future` that whoever waits for it runs when no worker has started it."""

    def __init__(self, fn: Callable[[], Any], priority: Priority, label: str = "",
                 target: Any | None = None) -> None:
        super().__init__()
        self.fn = fn
        self.priority = priority
        self.label = label  # what it compiles, for logs and tests
        # The compile target Triton is primed for first (`prime_triton`): None for the driver's,
        # else the one a compile that must not start the GPU driver names (detached.py).
        self.target = target
        self.pid = os.getpid()
        self._claim_lock = threading.Lock()
        self._claimed = False

    def run(self) -> bool:
        """Run the compile unless another thread has started it; whether this call ran it."""
        with self._claim_lock:
            if self._claimed:
                return False
            self._claimed = True
        if not self.set_running_or_notify_cancel():
            return False
        prime_triton(self.target)
        try:
            value = self.fn()
        except BaseException as e:  # noqa: BLE001 - the waiter sees it, as with any Future
            self.set_exception(e)
        else:
            self.set_result(value)
        return True

    def started(self) -> bool:
        """Whether a thread has taken the job (run, running, or cancelled)."""
        return self._claimed or self.cancelled()

    def result(self, timeout: float | None = None) -> Any:
        self._run_here()
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._run_here()
        return super().exception(timeout)

    def _run_here(self) -> None:
        if self.pid != os.getpid() and not self.done():
            raise CancelledError("the compile was started in the parent of this forked process")
        self.run()  # here, at this thread's priority


class CompileScheduler:
    """The pool and its queues (see the module docstring). Made through `scheduler()`."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queues: dict[Priority, collections.deque[CompileJob]] = {
            p: collections.deque() for p in Priority}
        self._running: dict[Priority, int] = dict.fromkeys(Priority, 0)
        self._threads: list[threading.Thread] = []
        self._workers = 1
        self._holders = 0
        # Every worker's nice value: WORKER_NICENESS above the thread that started the first
        # worker. Absolute, so that a worker started from another worker's job (which inherits
        # that worker's value) is not made nicer again.
        self._worker_nice: int | None = None
        self._stopping = False
        self._exit_hook = False
        # The switch interval while workers compile (None: the configured cache's flag), and
        # the one it replaced with the value we set, while ours is in force.
        self.switch_interval_us: int | None = None
        self._switched: tuple[float, float] | None = None

    # ----- configuration --------------------------------------------------------------------

    def size(self, workers: int) -> CompileScheduler:
        """Use `workers` threads from now on (--autotune_compile_workers); returns self."""
        with self._cond:
            self._workers = max(1, workers)
            self._cond.notify_all()  # threads over the new size leave when idle
        return self

    def cap(self, priority: Priority) -> int:
        """How many threads may run `priority` at once: all, but work ahead of need (AHEAD,
        SPECULATIVE) under pytest-xdist, both kinds together (`_busy`)."""
        if priority is not Priority.CANDIDATE:
            return env.xdist_share(self._workers)
        return self._workers

    def _busy(self, priority: Priority) -> int:
        """Threads running work that counts against `priority`'s cap (the caller holds _cond):
        the kinds of work ahead of need share one, so SPECULATIVE never takes the room an
        AHEAD job waits for."""
        if priority is Priority.CANDIDATE:
            return self._running[priority]
        return sum(n for p, n in self._running.items() if p is not Priority.CANDIDATE)

    # ----- submitting -------------------------------------------------------------------------

    def submit(self, fn: Callable[[], Any], priority: Priority) -> CompileJob:
        """Queue `fn` (a compile) at `priority`; the job to wait for."""
        return self.enqueue(CompileJob(fn, priority))

    def enqueue(self, job: CompileJob) -> CompileJob:
        """Queue a job made beforehand (a caller that hands out jobs before queueing them in
        an order of its own); returns it."""
        with self._cond:
            self._queues[job.priority].append(job)
            self._start_thread()
            self._cond.notify()
        return job

    def lane(self, priority: Priority, seconds: dict[int, float]) -> Lane:
        """An executor for Triton's `AsyncCompileMode` that submits at `priority` and times each
        compile into `seconds`, under the index its `current` holds at submission."""
        return Lane(self, priority, seconds)

    # ----- holding ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """While a tuning benchmarks: no worker starts a job, and those in flight are finished
        first (for up to HOLD_TIMEOUT_S)."""
        with self._cond:
            self._holders += 1
            self._cond.wait_for(lambda: sum(self._running.values()) == 0,
                                timeout=HOLD_TIMEOUT_S)
        try:
            yield
        finally:
            with self._cond:
                self._holders -= 1
                self._cond.notify_all()

    # ----- workers ---------------------------------------------------------------------------

    def _start_thread(self) -> None:
        """Start a worker when there is room (the caller holds _cond)."""
        if self._stopping or len(self._threads) >= self._workers:
            return
        if not self._exit_hook:
            # Before the interpreter joins the workers: they stop after their current job.
            # threading's own hook list, as concurrent.futures uses.
            register = getattr(threading, "_register_atexit", None)
            try:
                if register is not None:
                    register(self.stop)
            except RuntimeError:  # already shutting down: whoever waits runs the job
                return
            self._exit_hook = True
        if self._worker_nice is None:
            base = _nice()
            self._worker_nice = None if base is None else min(19, base + WORKER_NICENESS)
        thread = threading.Thread(target=self._work, name="autotune-compile", daemon=False)
        self._threads.append(thread)
        thread.start()

    def _next(self) -> CompileJob | None:
        """The job a free worker takes now, or None (the caller holds _cond)."""
        if self._holders:
            return None
        for priority in Priority:
            queue = self._queues[priority]
            while queue and queue[0].started():
                queue.popleft()  # run by a thread that waited for it
            if queue and self._busy(priority) < self.cap(priority):
                return queue.popleft()
        return None

    def _work(self) -> None:
        me = threading.current_thread()
        _set_nice(self._worker_nice)
        while True:
            with self._cond:
                job = self._next()
                while job is None:
                    if self._stopping or len(self._threads) > self._workers:
                        self._threads.remove(me)
                        return
                    self._cond.wait()
                    job = self._next()
                if not any(self._running.values()):
                    self._switch_fast()
                self._running[job.priority] += 1
            try:
                job.run()
            finally:
                with self._cond:
                    self._running[job.priority] -= 1
                    if not any(self._running.values()):
                        self._switch_back()
                    self._cond.notify_all()

    def _switch_fast(self) -> None:
        """The first job in flight: shorten Python's switch interval to ours, unless it is
        shorter already (the caller holds _cond)."""
        wanted = self.switch_interval_us
        if wanted is None:
            wanted = _configured_switch_interval_us()
        before = sys.getswitchinterval()
        if wanted <= 0 or wanted / 1e6 >= before:
            return
        sys.setswitchinterval(wanted / 1e6)
        self._switched = (before, sys.getswitchinterval())

    def _switch_back(self) -> None:
        """No job in flight: put the switch interval back, unless the program set one of its
        own meanwhile (the caller holds _cond)."""
        if self._switched is None:
            return
        before, ours = self._switched
        self._switched = None
        if sys.getswitchinterval() == ours:
            sys.setswitchinterval(before)

    def stop(self) -> None:
        """Let the workers end after their current job (interpreter exit); queued jobs stay for
        whoever waits for them."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()


class Lane:
    """What `AsyncCompileMode` sees as its executor (it only calls `submit`): each compile is
    queued at one priority and timed on the thread that runs it."""

    def __init__(self, scheduler: CompileScheduler, priority: Priority,
                 seconds: dict[int, float]) -> None:
        self.scheduler = scheduler
        self.priority = priority
        self.seconds = seconds
        self.current = -1
        # What runs before the compile of an index, on the same thread: its back end split off
        # into a compile process (compile.py from Triton's jit_cache_hook, offload.py).
        self.first: dict[int, Callable[[], Any]] = {}

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> CompileJob:
        index, seconds = self.current, self.seconds  # as they are now, at submission
        before = self.first.pop(index, None)

        def timed() -> Any:
            started = time.perf_counter()
            try:
                if before is not None:
                    before()
                return fn(*args, **kwargs)
            finally:
                seconds[index] = time.perf_counter() - started

        return self.scheduler.submit(timed, self.priority)


def _configured_switch_interval_us() -> int:
    """--autotune_switch_interval_us of the process cache, if one is configured."""
    from autotune_cache.cache import installed_cache

    found = installed_cache()
    return DEFAULT_SWITCH_INTERVAL_US if found is None else found.settings.switch_interval_us


def scheduler(workers: int | None = None) -> CompileScheduler:
    """This process's scheduler; sized to `workers` threads when given."""
    found = process.current().made("scheduler", CompileScheduler)
    return found if workers is None else found.size(workers)
