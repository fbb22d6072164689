"""The compile scheduler (scheduler.py) as the compile-ahead uses it: who runs a job, in which
order, at which priority and niceness, in a forked child and under pytest-xdist. Stand-in
compiles (StubJit, submit_async: test_compile_ahead.py) keep it off the real compiler."""

from __future__ import annotations

import concurrent.futures
import os
import sys
import threading
import time

import pytest
import torch

from autotune_cache.triton import preload, preload_job, process, scheduler
from autotune_cache.triton.scheduler import Priority
from tests.triton import kernels
from tests.triton.test_compile_ahead import (  # noqa: F401 - isolated: an autouse fixture
    StubJit,
    isolated,
    make_a,
    on_gpu,
    submit_async,
)


def test_a_hit_runs_a_compile_not_started_yet_itself_once():
    stub = StubJit(kernels.add_kernel)
    job = scheduler.CompileJob(lambda: preload_job.preload_into(stub, "{}"), Priority.AHEAD)
    preload.wait(job)  # no worker took it: the waiting launch compiles it
    assert job.run() is False  # a worker's turn, later: nothing to do
    preload.wait(job)
    assert stub.preloaded == ["{}"] and job.result() is True


def test_no_compile_starts_while_a_tuning_benchmarks():
    stub = StubJit(kernels.add_kernel)
    pool = scheduler.CompileScheduler().size(1)
    try:
        with pool.held():
            job = pool.submit(lambda: preload_job.preload_into(stub, "{}"), Priority.AHEAD)
            time.sleep(0.2)
            assert stub.preloaded == [] and not job.started()
        concurrent.futures.wait([job], timeout=30)
        assert job.done() and stub.preloaded == ["{}"]
    finally:
        pool.stop()


def test_candidates_run_before_compiles_ahead_and_a_waiter_runs_its_own_at_once():
    """One worker, held while the queue fills: the candidate queued last runs before the
    compiles ahead queued first, and a thread waiting for a job nobody started runs it now."""
    pool = scheduler.CompileScheduler().size(1)
    ran: list[str] = []
    try:
        with pool.held():
            ahead = [pool.submit(lambda i=i: ran.append(f"ahead{i}"), Priority.AHEAD)
                     for i in range(3)]
            candidate = pool.submit(lambda: ran.append("candidate"), Priority.CANDIDATE)
            ahead[2].result()  # waited for: runs on this thread, before the worker starts
            assert ran == ["ahead2"]
        concurrent.futures.wait([candidate, *ahead], timeout=30)
        assert ran == ["ahead2", "candidate", "ahead0", "ahead1"]
    finally:
        pool.stop()


@pytest.mark.skipif(sys.platform != "linux", reason="per-thread nice values are Linux's")
def test_the_pools_threads_run_nicer_than_the_launches_that_wait():
    """Work ahead of need runs at a lower CPU priority than the thread that needs a compile
    now; a job that thread waits for and no worker started runs at its own priority."""
    def nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    pool = scheduler.CompileScheduler().size(2)
    expected = min(19, nice() + scheduler.WORKER_NICENESS)
    try:
        on_worker = pool.submit(nice, Priority.AHEAD)
        concurrent.futures.wait([on_worker], timeout=30)
        assert on_worker.result() == expected
        with pool.held():
            waited = pool.submit(nice, Priority.AHEAD)
            assert waited.result() == nice()  # nobody had started it: run here
    finally:
        pool.stop()

    # A job that queues another while it runs starts the second worker from a worker's thread
    # (which it inherits its nice value from): that worker is as nice as the first, no nicer.
    # Candidates: under pytest-xdist work ahead of need gets one of these two threads.
    pool = scheduler.CompileScheduler().size(2)
    release = threading.Event()
    inner: list[scheduler.CompileJob] = []

    def queues_another() -> None:
        inner.append(pool.submit(nice, Priority.CANDIDATE))
        release.wait(30)

    try:
        pool.submit(queues_another, Priority.CANDIDATE)
        deadline = time.monotonic() + 30
        while not (inner and inner[0].done()) and time.monotonic() < deadline:
            time.sleep(0.01)  # the second worker runs it while the first is held in `outer`
        assert inner and inner[0].done()
        assert inner[0].result() == expected
    finally:
        release.set()
        pool.stop()


def test_the_first_jobs_hash_tritons_sources_once_not_each(monkeypatch):
    """Every compile's cache key starts with `triton_key()`, a hash of Triton's sources that
    Triton memoizes without a lock: 8 jobs starting together compute it once, on one thread,
    and every job runs after it."""
    import triton.runtime.cache as triton_cache

    calls: list[str] = []

    def slow_key() -> str:
        calls.append(threading.current_thread().name)
        time.sleep(0.2)
        return "key"

    monkeypatch.setattr(triton_cache, "triton_key", slow_key)
    monkeypatch.setattr(scheduler, "_primed", set())
    pool = scheduler.CompileScheduler().size(8)
    try:
        jobs = [pool.submit(lambda i=i: i, Priority.CANDIDATE) for i in range(8)]
        concurrent.futures.wait(jobs, timeout=30)
        assert [job.result() for job in jobs] == list(range(8))
        assert len(calls) == 1
        pool.submit(lambda: None, Priority.AHEAD).result()
        assert len(calls) == 1
    finally:
        pool.stop()


def test_outdated_warmups_never_take_the_room_a_compile_ahead_waits_for(monkeypatch):
    """Under pytest-xdist (2 workers: 1 of this pool's 2 threads for work ahead of need), a
    SPECULATIVE job waits while an AHEAD one runs, and runs after the AHEAD queue is empty."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    pool = scheduler.CompileScheduler().size(2)
    release = threading.Event()
    entered = threading.Event()
    ran: list[str] = []

    def blocking_ahead() -> None:
        ran.append("ahead0")
        entered.set()
        release.wait(30)

    try:
        with pool.held():
            first = pool.submit(blocking_ahead, Priority.AHEAD)
            second = pool.submit(lambda: ran.append("ahead1"), Priority.AHEAD)
            outdated = pool.submit(lambda: ran.append("speculative"), Priority.SPECULATIVE)
        # Wait for the job's body, not for `started()`: a job is claimed before the pool's
        # first job primes Triton's source hash, which on a loaded 2-core runner outlasts any
        # fixed sleep (the cause of a red CI run).
        assert entered.wait(60)
        time.sleep(0.3)  # the other thread is free: it must not start the speculative job
        assert ran == ["ahead0"] and not outdated.started()
        release.set()
        concurrent.futures.wait([first, second, outdated], timeout=30)
        assert ran == ["ahead0", "ahead1", "speculative"]
    finally:
        release.set()
        pool.stop()


def test_a_forked_child_starts_its_own_engine_state():
    """The per-process state (process.py) is new in a forked child: the parent's compile-ahead,
    scheduler and deferred keys are not the child's."""
    parent = process.current()
    parent_scheduler = scheduler.scheduler()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        fresh = process.current()
        ok = fresh is not parent and fresh.scheduler is None
        ok = ok and preload.ahead() is None and scheduler.scheduler() is not parent_scheduler
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1" and status == 0
    assert process.current() is parent and scheduler.scheduler() is parent_scheduler


@pytest.mark.parametrize("worker, count, expected", [
    ("gw1", "4", (1, 4)), ("", "", None), ("gw4", "4", None), ("master", "2", None),
    ("gw0", "x", None)])
def test_xdist_worker_is_read_from_the_environment(monkeypatch, worker, count, expected):
    from autotune_cache.foundation import env

    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", count)
    assert env.xdist_worker() == expected


def test_a_small_tuning_does_not_shrink_the_shared_pool(monkeypatch):
    """A tuning of a kernel with two candidates compiles on the process's one pool at the
    configured size: sizing it to its own two candidates would leave every compile ahead of
    need (hundreds on a loaded suite) two threads."""
    from autotune_cache.triton import compile as compile_mod

    class Specialising:
        """Stands in for a JIT function: a compile submitted through AsyncCompileMode."""

        def run(self, *args, warmup: bool = False, **kwargs):
            return submit_async(repr(sorted(kwargs.items())))

    monkeypatch.setattr(compile_mod, "ensure_triton_cache_dir", lambda: None)
    import autotune_cache.triton.device as device

    monkeypatch.setattr(device, "interpreter_active", lambda: False)
    scheduler.scheduler(8)
    compiles = compile_mod.compile_candidates(Specialising(), (), {}, kernels.configs(16, 32), 8)
    assert compiles.failures == {} and sorted(compiles.seconds) == [0, 1]
    assert scheduler.scheduler().cap(Priority.CANDIDATE) == 8


def test_warmup_returns_while_no_worker_runs(use_cache, monkeypatch):
    """`Autotuner.warmup` waits for its compiles itself: with the pool stopped (interpreter
    exit) or held by a benchmarking thread, the calling thread compiles what no worker took."""
    use_cache(compile_workers=4)

    class Warming(StubJit):
        def warmup(self, *args, **kwargs):
            return submit_async(repr(sorted(kwargs)) + str(kwargs.get("BLOCK_SIZE")))

    kernel = make_a(Warming(kernels.add_kernel))
    on_gpu(monkeypatch)
    scheduler.scheduler(4).stop()  # no worker starts from now on
    done: list[list] = []
    thread = threading.Thread(target=lambda: done.append(kernel.warmup(torch.zeros(1), n=1)),
                              daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert done == [["binary"] * 4]
