"""The compile helper (autotune_cache/triton/compile_helper.py): a process forked from this one
compiles what a scheduler thread is about to, into Triton's compile cache, and the thread's own
compile then finds it there. The scenarios with real compiles for sm_90 (Triton's bundled
ptxas, no GPU needed) run in a process that imported Triton for a GPU
(compile_helper_worker.py); nothing is ever produced by the helper that Triton does not then
load itself."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from autotune_cache.triton import compile_helper, scheduler  # noqa: E402
from autotune_cache.triton.compile_helper import CompileHelper  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")

ROOT = Path(__file__).resolve().parents[2]
TARGET = GPUTarget("cuda", 90, 32)
OPTIONS = {"num_warps": 4, "num_stages": 2}


@pytest.fixture
def helper():
    made = CompileHelper()
    yield made
    made.close()


@pytest.mark.parametrize("scenario", [
    "fills",  # a forked child fills the compile cache; Triton's own compile then only loads
    "main_kernel",  # a script's kernel (in __main__): the server is a copy, so it has it
    "no_exit_hooks",  # neither the server nor a child runs an exit hook (a dump run's write)
    "imported_after",  # a module imported after the fork is compiled here, never sent
    "source_changed",  # a kernel changed since the fork is compiled here, and never sent again
    "variables_of_now",  # a cache-invalidating variable set after the fork reaches the child
    "died",  # a killed server: its requests answered, compiled here, never started again
    "timed_out",  # no answer in time: compiled here, nothing sent again, the server leaves
    "warm_up",  # the server's own first compile: real, and never into the user's cache
])
def test_the_compile_helper_with_real_compiles(scenario, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("TRITON_DISABLE_LINE_INFO", None)
    proc = subprocess.run([sys.executable, "-m", "tests.triton.compile_helper_worker", scenario,
                           str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert f"ok {scenario}" in proc.stdout


def test_a_kernel_defined_in_a_function_is_compiled_here_without_asking(helper, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")

    def local_kernel():
        @triton.jit
        def k(x):
            pass

        return k

    assert helper.start()
    why = helper.prefill(ASTSource(local_kernel(), {"x": "*fp32"}, {}, {}), TARGET, OPTIONS,
                         None)
    assert why is not None and "defined inside a function" in why
    assert helper.next_id == 0


@pytest.mark.parametrize(("variable", "why"), [
    ("TRITON_ALWAYS_COMPILE", "Triton compiles always"),
    ("TRITON_KERNEL_DUMP", "IR dumps are on"),
    ("TRITON_KERNEL_OVERRIDE", "override"),
    ("TRITON_CACHE_MANAGER", "a compile cache other than Triton's files"),
])
def test_settings_under_which_a_childs_compile_is_not_used_are_compiled_here(helper, monkeypatch,
                                                                            variable, why):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setenv(variable, "1" if variable != "TRITON_CACHE_MANAGER" else "my.cache:Cls")
    said = helper.prefill(ASTSource(plain_kernel(monkeypatch), {"x": "*fp32"}, {}, {}), TARGET,
                          OPTIONS, None)
    assert said is not None and why in said
    assert helper.next_id == 0


def test_a_cache_manager_set_in_code_is_compiled_here(helper, monkeypatch):
    """Not only the variable: a class assigned to Triton's knob (restored by the knob's scope)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    kernel = plain_kernel(monkeypatch)
    with triton.knobs.cache.scope():
        triton.knobs.cache.manager_class = object
        said = helper.prefill(ASTSource(kernel, {"x": "*fp32"}, {}, {}), TARGET, OPTIONS, None)
    assert said is not None and "a compile cache other than Triton's files" in said


def plain_kernel(monkeypatch):
    """A plain JIT kernel (for a GPU: the caller sets TRITON_INTERPRET=0 first), named as a
    module-level one would be."""

    @triton.jit
    def k(x):
        pass

    monkeypatch.setattr(k.fn, "__qualname__", "k")
    return k


def test_a_helper_not_started_compiles_nothing(helper, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    why = helper.prefill(ASTSource(plain_kernel(monkeypatch), {"x": "*fp32"}, {}, {}), TARGET,
                         OPTIONS, None)
    assert why == "the compile helper was not started (compiles were running)"
    assert helper.next_id == 0


@pytest.mark.parametrize("settles_at", [1, 2])
def test_the_scheduler_starts_the_helper_when_it_queues_with_nothing_compiling(monkeypatch,
                                                                              settles_at):
    """Asked at each queueing while no pool thread compiles, until the start is settled (made,
    gone or off); not settled means a compile ran on another thread: asked again later."""
    asked: list[int] = []

    def start_if_enabled(prime=None) -> bool:
        asked.append(sum(pool._running.values()))
        return len(asked) >= settles_at

    monkeypatch.setattr(compile_helper, "start_if_enabled", start_if_enabled)
    pool = scheduler.CompileScheduler().size(2)
    for i in range(3):
        assert pool.submit(lambda i=i: i, scheduler.Priority.CANDIDATE).result(timeout=30) == i
    assert asked == [0] * settles_at


def test_no_helper_is_forked_from_a_process_holding_much_memory(helper, monkeypatch):
    """Each child's fork copies the page tables of the process's own memory: a training
    process holding tens of GiB compiles in its threads. Settled for good, and said why."""
    monkeypatch.setattr(compile_helper, "anonymous_resident_bytes", lambda: 9 << 30)
    assert helper.start() is False and helper.pid is None
    assert helper.gone == ("this process holds 9.0 GiB of its own memory (over 8 GiB): a fork "
                           "per compile would cost more than it saves")
    assert helper.start() is False  # not tried again


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs Linux /proc")
def test_the_memory_a_fork_copies_is_read_from_proc():
    before = compile_helper.anonymous_resident_bytes()
    block = bytearray(64 << 20)
    block[::4096] = b"\1" * len(block[::4096])  # touched: resident
    after = compile_helper.anonymous_resident_bytes()
    assert before is not None and after is not None
    assert after - before >= 48 << 20


@pytest.mark.parametrize(("xdist", "share"), [(None, 16), (("gw3", "8"), 2), (("gw0", "32"), 1)])
def test_children_at_once_are_the_workers_share_of_the_compile_workers(monkeypatch, xdist,
                                                                      share):
    """Each xdist worker forks its own server, and every worker may wait at once: children,
    unlike threads held back by the GIL, would all compile at once, each with its memory."""
    import types

    import autotune_cache.cache

    settings = types.SimpleNamespace(compile_workers=16)
    monkeypatch.setattr(autotune_cache.cache, "get_cache",
                        lambda: types.SimpleNamespace(settings=settings))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    if xdist is not None:
        monkeypatch.setenv("PYTEST_XDIST_WORKER", xdist[0])
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", xdist[1])
    assert compile_helper.children_share() == share


def test_a_compile_over_the_share_of_children_is_compiled_here(helper, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    kernel = plain_kernel(monkeypatch)
    monkeypatch.setattr(compile_helper, "children_share", lambda: 2)
    monkeypatch.setattr(compile_helper, "_cached", lambda *a: False)
    monkeypatch.setattr(helper, "pid", -1)  # undone before the fixture closes the helper
    helper.modules = frozenset({kernel.fn.__module__})
    helper.pending = {7: Future(), 8: Future()}  # two requests sent, not answered yet
    why = helper.prefill(ASTSource(kernel, {"x": "*fp32"}, {}, {}), TARGET, OPTIONS, None)
    assert why == "this process's share of compile children (2) is busy"
    assert helper.next_id == 0 and set(helper.pending) == {7, 8}  # nothing sent


def test_the_helper_is_not_forked_while_a_compile_runs(helper, monkeypatch):
    """Any thread's compile (every JIT compile passes the patch) defers the fork: it would copy
    LLVM's locks as that compile holds them."""
    monkeypatch.setattr(compile_helper, "_original", lambda *a, **k: entered.wait(30))
    entered = threading.Event()
    compiling = threading.Thread(target=compile_helper._compile, args=("src",))
    compiling.start()
    try:
        deadline = time.monotonic() + 30
        while compile_helper._inflight == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert helper.start() is False and helper.pid is None and helper.gone is None
    finally:
        entered.set()
        compiling.join(30)
    assert compile_helper._inflight == 0


@pytest.fixture
def fake_helper(monkeypatch):
    """The helper's prefills, recorded instead of sent; Triton's compile returns "kernel"."""
    asked: list[object] = []

    class Fake:
        def prefill(self, src, target, options, env_vars):
            asked.append((src, target, options, env_vars))

    monkeypatch.setattr(compile_helper, "helper", Fake)
    monkeypatch.setattr(compile_helper, "enabled", lambda: True)
    monkeypatch.setattr(compile_helper, "_original", lambda src, *a, **k: "kernel")
    monkeypatch.setattr(compile_helper, "start_if_enabled", lambda prime=None: True)
    return asked


def test_only_the_scheduler_workers_compiles_go_to_the_helper_while_a_thread_waits(fake_helper):
    """A launch's own compile never goes; a worker's goes only while some thread waits for the
    scheduler's compiles: otherwise the process is doing its own work (a test compiling its
    plain kernels), which children on every CPU slowed on the H200 (decision 0029)."""
    assert compile_helper._compile("src", target=TARGET, options=OPTIONS) == "kernel"
    with compile_helper.waiting():
        assert compile_helper._compile("src", target=TARGET, options=OPTIONS) == "kernel"
    assert fake_helper == []  # a launch's own thread: Triton compiles at once
    with compile_helper.allowed():
        assert compile_helper._compile("src", TARGET, OPTIONS) == "kernel"
        assert fake_helper == []  # nobody waits: compiled here, beside the process's own work
        with compile_helper.waiting():
            assert compile_helper._compile("src", TARGET, OPTIONS, _env_vars={"A": "1"}) == \
                "kernel"
    assert fake_helper == [("src", TARGET, OPTIONS, {"A": "1"})]
    assert not compile_helper.waited_for()


def test_a_thread_waiting_for_a_job_sends_the_workers_compiles_to_the_helper(fake_helper):
    """`CompileJob.result()` on a job a worker runs makes the process a waiting one: a worker's
    compile that starts meanwhile goes to the helper. A job nobody has started runs on the
    waiting thread itself, in this process, at that thread's priority."""
    pool = scheduler.CompileScheduler().size(2)
    release = threading.Event()
    running = threading.Event()

    def first() -> str:
        running.set()
        release.wait(30)
        return "first"

    blocker = pool.submit(first, scheduler.Priority.CANDIDATE)
    assert running.wait(30)
    seen: list[bool] = []

    def watch() -> None:  # a worker's compile, started while the main thread waits
        deadline = time.monotonic() + 30
        while not compile_helper.waited_for() and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(compile_helper.waited_for())
        with compile_helper.allowed():
            compile_helper._compile("worker-src", TARGET, OPTIONS)
        release.set()

    threading.Thread(target=watch).start()
    try:
        assert blocker.result(timeout=30) == "first"
    finally:
        release.set()
    assert seen == [True]
    assert [a[0] for a in fake_helper] == ["worker-src"]
    assert not compile_helper.waited_for()

    with pool.held():  # no worker starts it: the waiting thread runs it, not the helper,
        # even when that thread is itself a worker running a job (`allowed`)
        here = pool.submit(lambda: compile_helper._compile("own-src", TARGET, OPTIONS),
                           scheduler.Priority.SPECULATIVE)
        with compile_helper.allowed():
            assert here.result(timeout=30) == "kernel"
    assert [a[0] for a in fake_helper] == ["worker-src"]


def test_a_child_forked_while_a_thread_waits_counts_no_waiter():
    """The child has none of the parent's threads: it starts with no waiter, and the forking
    thread's wait ending in the child does not count it below zero."""
    import warnings

    read, write = os.pipe()
    with compile_helper.waiting(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12: a threaded fork
        pid = os.fork()
    if pid == 0:  # the child, after its copy of the wait ended
        os.write(write, str(compile_helper._waiters).encode())
        os._exit(0)
    os.close(write)
    got = os.read(read, 16).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert got == "0"
    assert compile_helper._waiters == 0


def test_a_compile_candidates_thread_waits_from_its_first_submission(monkeypatch):
    """A tuning's thread only specialises its candidates, then waits for them: the workers'
    compiles may go to the helper from the first, not from the first `result()`."""
    from autotune_cache.triton import compile as compile_module

    seen: list[bool] = []

    class Mode:  # Triton's AsyncCompileMode, recording whether its thread counts as waiting
        def __init__(self, lane, ignore_errors):
            seen.append(compile_helper.waited_for())

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            seen.append(compile_helper.waited_for())

    monkeypatch.setattr(triton, "AsyncCompileMode", Mode)
    monkeypatch.setattr(compile_module, "_specialise", lambda *a: None)
    monkeypatch.setattr(compile_module, "ensure_triton_cache_dir", lambda: None)
    monkeypatch.setattr("autotune_cache.triton.device.interpreter_active", lambda: False)
    compile_module.compile_candidates(object(), (), {}, [triton.Config({})] * 3, workers=2)
    assert seen == [True, True] and not compile_helper.waited_for()


def test_triton_takes_compile_from_the_patch():
    import triton.compiler

    import autotune_cache.triton  # noqa: F401 - installs the patch

    assert triton.compiler.compile is compile_helper._compile


def test_the_flag_turns_it_off():
    """On by default, used only while the process waits for its compiles (decision 0029)."""
    from autotune_cache.config.flags import parse_flags

    assert parse_flags("").compile_helper is True
    assert parse_flags("--autotune_compile_helper").compile_helper is True
    assert parse_flags("--autotune_compile_helper=false").compile_helper is False
