"""The compile helper's forked side: the compile server and its children (compile_helper.py
forks the server from the user's process and talks to it; see its docstring and decision 0029).

Runs only in forked processes, never in the process that imported it. The server reads
requests (a 4-byte big-endian length and a pickle of `(id, request)`) from its request pipe and
forks a child per compile; the child compiles with Triton's own `compile` into the request's
cache directory and answers on the answer pipe, shared by every child, with one write of at
most PIPE_BUF bytes (`(id, status, detail)`: "ok", "differs" when its copy of the kernel is not
the parent's, "error"), then leaves with `os._exit`. A child that dies without answering is
answered for by the server. The server leaves when its request pipe closes.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import struct
import sys
from collections.abc import Callable
from typing import Any

from autotune_cache.foundation import env
from autotune_cache.triton.fingerprint import jit_function

HEADER = struct.Struct(">I")
# Every answer is one write of at most this many bytes (POSIX PIPE_BUF), so that the answers of
# children running at once never interleave on their shared pipe.
_PIPE_BUF = 4096
# The server and its children run this much nicer than the user's process, as the compile
# pool's threads do (scheduler.WORKER_NICENESS): their work is ahead of need, a launch's is not.
NICENESS = 5


def read_exactly(fd: int, size: int) -> bytes:
    """`size` bytes from `fd`, or fewer at its end."""
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def serve(requests: int, answers: int, compile_fn: Callable[..., Any]) -> None:
    """The server's loop: fork a child per compile request until the request pipe closes.
    `compile_fn` is Triton's own `compile` (not the patched one the parent's threads call)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is this process's parent's to handle
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # nothing it or a compile prints reaches the user's output
        os.dup2(devnull, fd)
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    children: dict[int, int] = {}
    target: tuple[str, int, int] | None = None  # the first request's; then warmed up for it
    while True:
        ready = select.select([requests], [], [], 0.0 if target is not None else 0.5)[0]
        _reap(children, answers)
        if not ready:
            if target is not None:  # the first burst is forked; its children compile now
                _warm_up(target, compile_fn)
                target = None
            continue
        header = read_exactly(requests, HEADER.size)
        body = read_exactly(requests, HEADER.unpack(header)[0]) if header else b""
        if not body:
            return
        request_id, request = pickle.loads(body)  # noqa: S301 - our own parent
        if request_id == 0:
            target = request["target"]
        try:
            pid = os.fork()
        except OSError as e:
            _answer(answers, request_id, "error", f"fork: {e}")
            continue
        if pid:
            children[pid] = request_id
            continue
        status, detail = "error", ""
        try:
            os.close(requests)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            status, detail = _compile_here(request, compile_fn)
        except BaseException as e:  # noqa: BLE001 - said to the parent, which compiles itself
            detail = f"{type(e).__name__}: {e}"
        finally:
            try:
                _answer(answers, request_id, status, detail)
            finally:
                os._exit(0)


def _warm_up(target: tuple[str, int, int], compile_fn: Callable[..., Any]) -> None:
    """Compile a tiny kernel here, in the server, into a throwaway cache directory, so that the
    children forked from now on have what a first compile in a process sets up (LLVM's
    targets, the modules Triton imports on its first compile). Measured on the development VM:
    a child's matmul compile took 0.31-0.38 s forked from a server primed only
    (scheduler._prime_triton), 0.26-0.33 s from one that had compiled. Any failure only leaves
    the children as they were."""
    import shutil
    import tempfile

    with contextlib.suppress(Exception):
        import triton
        import triton.language as tl
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource

        @triton.jit
        def autotune_cache_warm_up(x):  # pragma: no cover - compiled, never run
            tl.store(x, tl.load(x) + 1)

        directory = tempfile.mkdtemp(prefix="autotune-compile-helper-")
        knobs, before = triton.knobs, triton.knobs.cache.dir
        knobs.cache.dir = directory
        try:
            compile_fn(ASTSource(autotune_cache_warm_up, {"x": "*fp32"}, {}, {}),
                      target=GPUTarget(*target), options={})
        finally:
            knobs.cache.dir = before
            shutil.rmtree(directory, ignore_errors=True)


def _reap(children: dict[int, int], answers: int) -> None:
    """Wait for the children that ended; answer for one that ended without answering."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        request_id = children.pop(pid, None)
        if request_id is not None and status != 0:
            _answer(answers, request_id, "error", f"the compile process ended with status {status}")


def _answer(fd: int, request_id: int, status: str, detail: str = "") -> None:
    detail = detail[:1000]
    while True:
        data = pickle.dumps((request_id, status, detail))
        if len(data) + HEADER.size <= _PIPE_BUF or not detail:
            break
        detail = detail[: len(detail) // 2]
    os.write(fd, HEADER.pack(len(data)) + data)


def _resolve(module: str, qualname: str) -> Any:
    """The JIT function `qualname` names in `module`, unwrapped from the tuners and heuristics
    around it (fingerprint.jit_function)."""
    found: Any = sys.modules[module]
    for part in qualname.split("."):
        found = getattr(found, part)
    jit_fn = jit_function(found)
    if jit_fn is None:
        raise LookupError("not a Triton JIT function here")
    return jit_fn


def _compile_here(request: dict[str, Any], compile_fn: Callable[..., Any]) -> tuple[str, str]:
    """In a child: compile the request into its cache directory with Triton's own compile."""
    import triton
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    name = f"{request['module']}.{request['qualname']}"
    try:
        fn = _resolve(request["module"], request["qualname"])
    except (AttributeError, KeyError, LookupError) as e:
        return "differs", f"{name}: {e}"
    if fn.cache_key != request["fn_key"]:
        return "differs", f"{name}: another source here"
    wanted = request["env_vars"]
    env.set_process_variables({**{k: None for k in get_cache_invalidating_env_vars()},
                               **wanted})
    if dict(get_cache_invalidating_env_vars()) != wanted:
        return "error", "Triton's settings could not be made the parent's"
    knobs = triton.knobs
    knobs.cache.dir = request["cache_dir"]
    knobs.compilation.listener = None  # the parent's compile notifies, as a cache hit
    src = ASTSource(fn, request["signature"], request["constexprs"], request["attrs"])
    compile_fn(src, target=GPUTarget(*request["target"]), options=request["options"],
               _env_vars=wanted)
    return "ok", ""
