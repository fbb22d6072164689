"""Compiles ahead of need in forked processes, out of the launching process's GIL.

The compile scheduler's threads (scheduler.py) compile candidates, loaded winners and warm-ups
in the process that launches. Part of every Triton compile is Python that holds the GIL: on the
H200 host, 16 threads compile the gpu_perf workload's 48 candidates 6.9x faster than one, each
compile 1.5x slower than alone, where 16 processes are 10.0x faster
(bench/results/compile_parallelism_h200_run1.md), and the threads slow every other thread of
the process too: the launch's own compile, the test's plain `@triton.jit` compiles.

So a compile that a scheduler thread runs while some thread of the process waits for the
scheduler's compiles (`waiting`: a tuning for its candidates, a launch for its winner or
warm-up, a dump run's end for its deferred tunings) is first done by a forked process, into the
same TRITON_CACHE_DIR; the thread waits for it without the GIL and then runs Triton's own
compile, which finds the binary in the cache (a few ms). A compile the waiting thread runs
itself (a job no worker had started) stays on that thread, at its priority. While no thread
waits, the process is doing its own work (a test compiling its plain `@triton.jit` kernels on
its own thread), and the scheduler's threads compile in the process, nicer, as without the
helper: on the H200, children compiling on every CPU beside a test's own compiles made
Liger-Kernel's dump run 12 % slower, every test slower.

How the processes are made: when the scheduler queues work and nothing is compiling, this
process forks one **compile server** (`start`), once. The server is a copy of this process at
that moment: every module imported so far, `__main__` included, is there, so nothing is
imported again and no interpreter starts. For each compile it forks a child, which
looks the kernel up by module and name, checks that its copy has this process's source
(`cache_key`), takes this process's Triton settings (the cache-invalidating variables, the cache
directory), compiles with Triton's own `compile`, answers and leaves with `os._exit` (no atexit
hook of the user's or ours runs there: nothing is dumped, flushed or written but Triton's cache).
Neither ever touches the GPU: a compile for a given target does not (the CUDA context this
process has is unusable in a fork, and unused).

What is produced never changes: this process always compiles through Triton itself, and the
child only fills Triton's content-addressed cache under the key Triton computes from the same
source, specialisation, options, target and variables. Anything that does not hold makes the
thread compile itself, as without the helper:

- a kernel defined inside a function, or in a module imported after the server was forked;
- a constexpr that is an object (a function, a tensor), a child that fails or differs, the server
  gone or never started (the scheduler's threads were compiling when it could have been);
- Triton's kernel override, IR dumps or TRITON_ALWAYS_COMPILE, or a compile cache manager other
  than Triton's files (a user's TRITON_CACHE_MANAGER, `--autotune_remote_compile_cache`).

A Triton setting made in code (a `triton.knobs` attribute assigned, not a variable) after the
server was forked is not seen by its children; one that changes the binary without changing its
cache key is a Triton bug already (another process sharing the cache would take the binary too).

The fork is made from the thread that queues the work, while no Triton compile runs on any
thread of this process (and none may start until it is made): a fork copies every lock as it
is, and a compile holds LLVM's. The server (compile_server.py) runs nicer than this process
(compile_server.NICENESS, as the scheduler's threads), ignores Ctrl-C (this process handles it)
and ends when its request pipe closes, i.e. with this process.

On by default; `--autotune_compile_helper=false` turns it off (it is never used under the
interpreter, with one compile worker, with a remote compile cache, where there is no fork, or
from a process holding over MAX_RESIDENT_BYTES of its own memory).
Used for every scheduler compile, it took the gpu_perf workload's cold tuning from 0.198x to
0.176x of `triton.autotune` on the H200 and made Liger-Kernel's dump run 12 % slower; hence
only while the process waits (docs/decisions/0029-compile-helper-process.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import select
import sys
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from autotune_cache.foundation import env
from autotune_cache.triton import compile_server as server
from autotune_cache.triton import process

log = logging.getLogger("autotune_cache")

# The longest a scheduler thread waits for a child's compile before it compiles itself (and
# sends no more: a child that long is stuck, or the machine is).
COMPILE_TIMEOUT_S = 300.0
# No server is forked from a process holding more anonymous memory than this: a fork copies
# the page tables of every such page, and the server forks one child per compile, one after
# another. Measured on the 2-core development VM: a fork took 0.3 ms, then about 16 ms per GiB
# touched (8 GiB: 130 ms), against a compile of 0.3-1 s. A test process is a few GiB; a
# training process holding tens of GiB on the host compiles in its threads instead.
MAX_RESIDENT_BYTES = 8 << 30

_local = threading.local()


@contextlib.contextmanager
def allowed(value: bool = True) -> Any:
    """On this thread for the duration (a scheduler worker's job), Triton's compiles may go to
    the helper first, while some thread waits (`waiting`); `allowed(False)`: they may not (a
    job a thread runs itself because it waits for it)."""
    before = getattr(_local, "allowed", False)
    _local.allowed = value
    try:
        yield
    finally:
        _local.allowed = before


# Threads of this process waiting now for the scheduler's compiles (`waiting`). Only while
# there is one do the scheduler's compiles go to the helper: the process is then waiting for
# them, not compiling its own work (a test's plain `@triton.jit` launches) beside them.
_waiters_lock = threading.Lock()
_waiters = 0


@contextlib.contextmanager
def waiting() -> Any:
    """For the duration, this thread waits for the scheduler's compiles (a launch for its
    winner, a tuning for its candidates, a dump run's end for its deferred tunings). A child
    forked meanwhile starts with none (`_after_fork_in_child`) and is not counted down."""
    global _waiters
    pid = os.getpid()
    with _waiters_lock:
        _waiters += 1
    try:
        yield
    finally:
        if os.getpid() == pid:
            with _waiters_lock:
                _waiters -= 1


def waited_for() -> bool:
    """Whether some thread of this process waits for the scheduler's compiles now."""
    return _waiters > 0


# The pipe ends this process holds to its server: a forked child (the server, its children, a
# child the user forks) closes them, so the server sees its pipe close when this process ends.
_parent_ends: set[int] = set()
# Triton compiles running in this process now, on any thread (every compile of a JIT function
# passes `_compile`). The server is forked only while there are none, holding the lock so that
# none starts meanwhile: a fork copies every lock as it is, and a compile holds LLVM's.
_inflight_lock = threading.Lock()
_inflight = 0


def _after_fork_in_child() -> None:
    global _inflight_lock, _inflight, _waiters_lock, _waiters
    for fd in list(_parent_ends):
        with contextlib.suppress(OSError):
            os.close(fd)
    _parent_ends.clear()
    _inflight_lock, _inflight = threading.Lock(), 0  # its holder, if any, is not in the child
    _waiters_lock, _waiters = threading.Lock(), 0  # the waiters are not in the child either


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class CompileHelper:
    """This process's compile server and the compiles sent to it (see the module docstring):
    `process.current().part(...)`, so a forked child of the user's process starts its own."""

    def __init__(self) -> None:
        # Reentrant: an answer's callback may run on the thread that sent the request.
        self.lock = threading.RLock()
        self.reading = threading.Lock()  # held by the one thread reading the answers
        self.pid: int | None = None
        self.requests: int | None = None  # the write end of the server's request pipe
        self.answers: int | None = None  # the read end of the children's answer pipe
        self.modules: frozenset[str] = frozenset()  # what the server has imported
        self.gone: str | None = None
        self.pending: dict[int, Future[tuple[str, str]]] = {}
        self.differs: dict[tuple[str, str], str] = {}  # kernels the server has not the same of
        self.next_id = 0
        self.prefilled = 0
        self.declined: dict[str, int] = {}

    # ----- the server -------------------------------------------------------------------------

    def start(self, prime: Callable[[], None] | None = None) -> bool:
        """Fork the server now, once, unless a compile runs in this process (then not yet:
        whoever calls again later may start it); whether it runs. `prime` first computes what
        every compile computes once per process (Triton's own source hash, the backend's
        ptxas version: scheduler._prime_triton), so that no child computes it again: measured
        on the development VM, a child's matmul compile took 0.62-0.78 s forked before it and
        0.31-0.38 s after."""
        with self.lock:
            if self.pid is not None or self.gone is not None:
                return self.gone is None
        if prime is not None:
            prime()
        with self.lock, _inflight_lock:
            if self.pid is not None or self.gone is not None:
                return self.gone is None
            resident = anonymous_resident_bytes()
            if resident is not None and resident > MAX_RESIDENT_BYTES:
                self.gone = (f"this process holds {resident / (1 << 30):.1f} GiB of its own "
                             f"memory (over {MAX_RESIDENT_BYTES >> 30} GiB): a fork per compile "
                             "would cost more than it saves")
                log.debug("autotune_cache: no compile helper: %s", self.gone)
                return False
            if _inflight:
                return False
            try:
                request_read, request_write = os.pipe()
                answer_read, answer_write = os.pipe()
            except OSError as e:
                self.gone = f"no pipe for the compile helper: {e}"
                return False
            modules = frozenset(name for name, m in list(sys.modules.items()) if m is not None)
            try:
                with warnings.catch_warnings():
                    # Python 3.12 warns of any fork in a process with threads; this one's child
                    # only compiles, with the locks it needs free (see start's docstring).
                    warnings.simplefilter("ignore", DeprecationWarning)
                    pid = os.fork()
            except OSError as e:
                for fd in (request_read, request_write, answer_read, answer_write):
                    os.close(fd)
                self.gone = f"the compile helper did not start: {e}"
                log.debug("autotune_cache: %s", self.gone)
                return False
            if pid == 0:  # the server: never returns into the caller's code
                code = 1
                try:
                    os.close(request_write)
                    os.close(answer_read)
                    server.serve(request_read, answer_write, _original)
                    code = 0
                finally:
                    os._exit(code)
            os.close(request_read)
            os.close(answer_write)
            self.pid, self.requests, self.answers = pid, request_write, answer_read
            self.modules = modules
            _parent_ends.update((request_write, answer_read))
            return True

    def _read_answers(self, wait_s: float) -> None:
        """Read the answers written so far, waiting up to `wait_s` for the first, and hand each
        to its request's future. One thread reads at a time (the one holding `reading`; the
        others wait on their futures); the pipe's end fails every request still waiting."""
        fd = self.answers
        if fd is None:
            return
        ended = False
        try:
            while select.select([fd], [], [], wait_s)[0]:
                wait_s = 0.0
                header = server.read_exactly(fd, server.HEADER.size)
                body = server.read_exactly(fd, server.HEADER.unpack(header)[0]) if header else b""
                if not body:
                    ended = True
                    break
                request_id, status, detail = pickle.loads(body)  # noqa: S301 - our own child
                with self.lock:
                    future = self.pending.pop(request_id, None)
                if future is not None:
                    future.set_result((status, detail))
        except Exception:  # noqa: BLE001 - a torn answer or a closed pipe: trusted no further
            ended = True
        if ended:
            self._end("the compile helper exited")

    def _end(self, why: str) -> None:
        """Send nothing more; every request still waiting is answered with `why`. The request
        pipe is closed, so the server leaves (the answer pipe stays open: a thread may be
        reading it, and a closed descriptor's number is soon another file's)."""
        with self.lock:
            self.gone = self.gone or why
            waiting, self.pending = self.pending, {}
            pid, self.pid = self.pid, None
            requests, self.requests = self.requests, None
            if requests is not None:
                _parent_ends.discard(requests)
                with contextlib.suppress(OSError):
                    os.close(requests)
        for future in waiting.values():
            future.set_result(("error", self.gone))
        if pid is not None:
            with contextlib.suppress(OSError):
                os.waitpid(pid, os.WNOHANG)

    def _wait(self, future: Future[tuple[str, str]], timeout: float) -> tuple[str, str]:
        """The answer to one request, reading the pipe whenever no other thread does."""
        deadline = time.monotonic() + timeout
        while not future.done():
            left = deadline - time.monotonic()
            if left <= 0:
                self._end(f"no answer from the compile helper in {timeout:.0f} s")
                break
            if self.reading.acquire(timeout=min(left, 0.05)):
                try:
                    if not future.done():
                        self._read_answers(min(left, 0.05))
                finally:
                    self.reading.release()
        return future.result()

    def _send(self, request: dict[str, Any]) -> Future[tuple[str, str]]:
        """Send one compile request (the caller holds the lock); the future of its answer."""
        request_id = self.next_id
        self.next_id += 1
        data = pickle.dumps((request_id, request))
        future: Future[tuple[str, str]] = Future()
        self.pending[request_id] = future
        try:
            if self.requests is None:
                raise OSError("closed")
            _write_all(self.requests, server.HEADER.pack(len(data)) + data)
        except OSError as e:
            self.pending.pop(request_id, None)
            self.gone = self.gone or f"the compile helper's pipe closed: {e}"
            future.set_result(("error", self.gone))
        return future

    # ----- compiles ---------------------------------------------------------------------------

    def prefill(self, src: Any, target: Any, options: Any, env_vars: Any) -> str | None:
        """Have a child compile what `triton.compile(src, target, options, _env_vars=env_vars)`
        will, into the compile cache; None when it did, else why not (the caller compiles)."""
        request = _request(src, target, options, env_vars)
        if isinstance(request, str):
            return self._decline(request)
        kernel = (request["module"], request["qualname"])
        with self.lock:
            why = self.gone if self.pid is None else self.differs.get(kernel)
            if self.pid is None and why is None:
                why = "the compile helper was not started (compiles were running)"
        if why is None and request["module"] not in self.modules:
            why = "the kernel's module was imported after the compile helper started"
        if why is None and _cached(src, target, request):
            why = "in the compile cache already"
        if why is None:
            try:
                pickle.dumps(request)
            except Exception as e:  # noqa: BLE001 - an argument only this process can hold
                why = f"the compile does not pickle: {type(e).__name__}"
        if why is not None:
            return self._decline(why)
        share = children_share()
        with self.lock:  # a child compiles from its request's send to its answer (`pending`)
            future = self._send(request) if len(self.pending) < share else None
        if future is None:
            return self._decline(f"this process's share of compile children ({share}) is busy")
        status, detail = self._wait(future, COMPILE_TIMEOUT_S)
        if status == "differs":  # so is every other compile of this kernel: not sent again
            with self.lock:
                self.differs[kernel] = f"differs: {detail}"
        if status != "ok":
            return self._decline(f"{status}: {detail}")
        with self.lock:
            self.prefilled += 1
        return None

    def _decline(self, why: str) -> str:
        with self.lock:
            first = why not in self.declined
            self.declined[why] = self.declined.get(why, 0) + 1
        if first:
            log.debug("autotune_cache: compiled in this process: %s", why)
        return why

    def close(self) -> None:
        """End the server (children in flight finish their compile on their own); for tests
        and callers that know no thread is waiting for an answer."""
        self._end("closed")
        with self.lock:
            answers, self.answers = self.answers, None
        if answers is not None:
            _parent_ends.discard(answers)
            with contextlib.suppress(OSError):
                os.close(answers)


def anonymous_resident_bytes() -> int | None:
    """This process's resident memory that is not file-backed (Linux `/proc/self/statm`:
    resident minus shared pages), which a fork copies the page tables of; None where unknown."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            fields = f.read().split()
        return (int(fields[1]) - int(fields[2])) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _request(src: Any, target: Any, options: Any, env_vars: Any) -> dict[str, Any] | str:
    """What a child needs to compile `src` as this process would, or why it cannot."""
    jit_fn = getattr(src, "fn", None)
    fn = getattr(jit_fn, "fn", None)
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or not qualname or target is None:
        return "not a Triton JIT function's compile"
    if "<locals>" in qualname:
        return f"{module}.{qualname} is defined inside a function"
    try:
        import triton
        import triton.language as tl
        from triton._C.libtriton import get_cache_invalidating_env_vars

        constants = dict(src.constants)
        if not all(_plain(v, tl.dtype) for v in constants.values()):
            return "a constexpr argument is an object (a function, a tensor)"
        knobs = triton.knobs
        if knobs.compilation.override or knobs.compilation.dump_ir:
            return "Triton's kernel override or IR dumps are on"
        if knobs.compilation.always_compile:
            return "Triton compiles always (TRITON_ALWAYS_COMPILE): a child's compile is not used"
        if (env.get("TRITON_CACHE_MANAGER") or knobs.cache.manager_class is not None
                or knobs.cache.remote_manager_class is not None):
            return "a compile cache other than Triton's files (TRITON_CACHE_MANAGER)"
        return {
            "module": module, "qualname": qualname, "fn_key": jit_fn.cache_key,
            "signature": dict(src.signature), "constexprs": constants,
            "attrs": dict(src.attrs or {}),
            "target": (target.backend, target.arch, target.warp_size),
            "options": dict(options or {}),
            "env_vars": dict(get_cache_invalidating_env_vars() if env_vars is None else env_vars),
            "cache_dir": knobs.cache.dir,
        }
    except Exception as e:  # noqa: BLE001 - another Triton's layout: compile here
        return f"this Triton's compile is not understood: {type(e).__name__}"


def _plain(value: Any, dtype: type) -> bool:
    """Whether a constexpr's value is data a child rebuilds exactly from a pickle: numbers,
    strings, None, Triton dtypes and tuples of them (not a JIT function passed as an argument,
    which a child would get as a different object)."""
    if isinstance(value, tuple):
        return all(_plain(v, dtype) for v in value)
    return value is None or isinstance(value, (bool, int, float, str, dtype))


def _cached(src: Any, target: Any, request: dict[str, Any]) -> bool:
    """Whether Triton's compile cache holds this compile already (then Triton only loads it,
    and a child would only cost its fork). False when unsure."""
    try:
        import hashlib

        from triton.compiler.compiler import make_backend
        from triton.runtime.cache import get_cache_key, get_cache_manager

        backend = make_backend(target)
        options = backend.parse_options(dict(request["options"], **src.parse_options()))
        key = get_cache_key(src, backend, options, env_vars=request["env_vars"])
        manager = get_cache_manager(hashlib.sha256(key.encode("utf-8")).hexdigest())
        return manager.get_group(f"{src.name[:150]}.json") is not None
    except Exception:  # noqa: BLE001 - another Triton's layout: ask the helper
        return False


# ----- where Triton's compiles come in ----------------------------------------------------------

def helper() -> CompileHelper:
    """This process's helper."""
    return process.current().part(CompileHelper)


def children_share() -> int:
    """How many children this process may have compiling at once: one per compile worker, and
    under pytest-xdist the worker's share of them (--autotune_compile_workers over the worker
    count), as the scheduler's work ahead of need: each xdist worker forks its own server, and
    every worker's candidates may wait at once (threads held back by the GIL could not all
    compile at once; children can, each with its own memory)."""
    from autotune_cache.cache import get_cache

    return env.xdist_share(get_cache().settings.compile_workers)


def enabled() -> bool:
    """Whether compiles may go to the helper (the flag, not the interpreter, more than one
    compile worker, no remote compile cache, a platform with fork)."""
    from autotune_cache.cache import get_cache
    from autotune_cache.triton.device import interpreter_active

    settings = get_cache().settings
    return (settings.compile_helper and settings.compile_workers > 1
            and not settings.remote_compile_cache and hasattr(os, "fork")
            and not interpreter_active())


def start_if_enabled(prime: Callable[[], None] | None = None) -> bool:
    """Start the server when it is enabled (the scheduler, queueing with no compile of its own
    running); whether that is settled: started, or gone for good. False: off for now (settings
    are read again at a later queueing) or a compile ran on another thread, so ask again then.
    Never raises: the helper is only a head start."""
    try:
        if _original is None or not enabled():
            return False
        made = helper()
        return made.start(prime) or made.gone is not None
    except Exception as e:  # noqa: BLE001
        log.debug("autotune_cache: the compile helper did not start: %s", e)
        return True


_original: Any = None


def _compile(src: Any, *args: Any, **kwargs: Any) -> Any:
    """Triton's `compile(src, target=None, options=None, _env_vars=None)`, after a child
    compiled the same into the cache, when this runs a scheduler job (`allowed`) while some
    thread waits for the scheduler's compiles (`waiting`)."""
    global _inflight
    with _inflight_lock:
        _inflight += 1
    try:
        if getattr(_local, "allowed", False) and waited_for():
            named = dict(zip(("target", "options", "_env_vars"), args, strict=False), **kwargs)
            try:
                if named.get("target") is not None and enabled():
                    helper().prefill(src, named["target"], named.get("options"),
                                     named.get("_env_vars"))
            except Exception as e:  # noqa: BLE001 - the helper is only a head start
                log.debug("autotune_cache: the compile helper failed: %s", e)
        return _original(src, *args, **kwargs)
    finally:
        with _inflight_lock:
            _inflight -= 1


def patch() -> None:
    """Put `_compile` where Triton's JIT functions take `compile` from when they first launch on
    a device (`triton.compiler.compile`, read by `JITFunction.create_binder`). Once; a Triton
    without that layout is left alone."""
    global _original
    try:
        import triton.compiler as compiler
    except ImportError:
        return
    current = getattr(compiler, "compile", None)
    if current is None or current is _compile or _original is not None:
        return
    _original = current
    compiler.compile = _compile
