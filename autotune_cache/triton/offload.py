"""Triton's back end in processes of our own: a compile's GIL-bound half off the program's process.

A Triton compile holds the GIL for most of its work (MLIR passes and LLVM are native calls that
keep it), so the compile pool's threads (scheduler.py) take turns: on the H100 host one compile
took 0.31 s alone and 1.44 s summed over 16 threads, and a loaded suite's 23 compiles cost 5-7 s
of its tests (docs/decisions/0036-compiling-in-processes.md). So a pool compile is split where
Triton itself can resume one, at the TTIR:

1. here, on the pool thread, the front end: the cache key, Triton's compile cache checked (a
   hit: nothing to do), the kernel's Python AST to TTIR, as `triton.compile` does them (about a
   tenth of the compile; it needs the kernel's Python function, which only this process has);
2. in a compile process, every stage after it (TTIR to TTGIR, LLVM IR, PTX, cubin:
   offload_worker.py), while this thread waits on a pipe, the GIL free;
3. here, every product filed in Triton's compile cache under the key of step 1, as Triton's
   `compile` files them: the same files, byte for byte (tests/triton/test_offload.py compares
   them with Triton's own compile), so the compile Triton then runs on this thread, as before,
   is a compile-cache hit.

Only the compile pool's work is split (compile-ahead jobs and a tuning's candidates), each
from Triton's own `jit_cache_hook` (`split_of`); a launch that compiles on the program's own
thread, because nothing was queued for it, compiles as Triton does. The processes are fresh
interpreters (`subprocess`, never a fork of this one) that import Triton alone, with this
process's `sys.path`, started when the pool first compiles (none for a run that finds
everything compiled), one per pool thread at most (--autotune_compile_workers, an xdist
worker's share, and one for a thread that runs a job it waits for); each lives until this
process ends, in its own session (a terminal's Ctrl-C is for the program), its input and
output our own pipes, its error output discarded, and serves only the values of the variables
a compile reads that it was started with (`relevant`).

Where a compile cannot be split as Triton would run it, it is not: another Triton release than
those the tests check byte for byte, a non-NVIDIA target, a Gluon kernel, Triton's IR override,
dump, `always_compile`, IR locations, store-binary-only and stage-inspection knobs, a
compilation listener, a variable asking a compile for output (`_OUTPUT_RE`). A process that
fails (an error, a crash, another Triton) fails only that split: Triton's compile then runs on
the thread as before, and says what is wrong if anything is. --autotune_compile_in_processes=
false turns it off. (docs/decisions/0036-compiling-in-processes.md)
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import pickle
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune_cache.foundation import env
from autotune_cache.triton import offload_worker, process

log = logging.getLogger(__name__)

WORKER = Path(offload_worker.__file__)


@dataclass
class Stats:
    """What the process's splits did (tests, bench/suite_probe.py)."""

    split: int = 0  # compiles whose back end ran in a compile process
    hits: int = 0  # already in the compile cache: nothing to split
    declined: int = 0  # not splittable as Triton would run it (see the module docstring)
    failed: int = 0  # a process failed: Triton compiled it on the thread
    no_process: int = 0  # every process busy (at the limit): Triton compiled it on the thread
    started: int = 0  # compile processes started


class _Worker:
    """One compile process and its pipes."""

    def __init__(self, environment: dict[str, str]) -> None:
        self.environment = relevant(environment)  # what it is matched on (see `relevant`)
        self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and script
            [sys.executable, "-I", "-S", str(WORKER)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True,
            env=environment)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        offload_worker.write(self.proc.stdin, [p for p in sys.path if p])
        self.greeted = False
        self.same_triton = True  # until its greeting says otherwise

    def ask(self, request: dict[str, Any]) -> Any:
        """Send one request and wait for its answer (None when the process ended, or imported
        another Triton than this process: `same_triton` then says so)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            offload_worker.write(self.proc.stdin, request)
            if not self.greeted:  # its first message: the Triton it imported
                self.greeted = True
                self.same_triton = offload_worker.read(self.proc.stdout) == _own_triton()
                if not self.same_triton:
                    return None
            return offload_worker.read(self.proc.stdout)
        except (OSError, ValueError, EOFError, pickle.UnpicklingError) as e:
            log.debug("autotune_cache: a compile process failed: %s", e)
            return None

    def close(self) -> None:
        """End it: its input closes, and it exits (after a compile in flight)."""
        for pipe in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()


def _own_triton() -> Any:
    """What a compile process's greeting must say: this process's Triton, by file and version."""
    import triton

    return ["triton", triton.__file__, triton.__version__]


# A compile process that ended or answered nothing this many times in a row: the machine cannot
# run them (a closed standard error, a broken interpreter); every compile stays on the threads.
MAX_FAILURES_IN_A_ROW = 3


@dataclass
class _Pool:
    """The process's compile processes (process.py `offload`)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    idle: list[_Worker] = field(default_factory=list)
    ended: list[_Worker] = field(default_factory=list)  # closed, not yet collected
    started: list[_Worker] = field(default_factory=list)  # every live one, for a forked child
    busy: int = 0
    closed: bool = False
    unsupported: str | None = None  # `supported()`'s answer, once asked
    failures_in_a_row: int = 0
    stats: Stats = field(default_factory=Stats)

    def take(self, limit: int, environment: dict[str, str]) -> _Worker | None:
        """An idle process started in `environment` (its `relevant` part), else a new one
        while fewer than `limit` run; the idle ones of another environment are ended (the
        program changed a variable a compile reads). None at the limit."""
        wanted = relevant(environment)
        with self.lock:
            if self.closed:
                return None
            stale = [w for w in self.idle if w.environment != wanted]
            self.idle = [w for w in self.idle if w.environment == wanted]
            found = self.idle.pop() if self.idle else None
            full = found is None and self.busy >= limit
            if not full:
                self.busy += 1
                if found is None:
                    if not self.stats.started:
                        atexit.register(self.close)
                    self.stats.started += 1
        self._end(stale)
        if full or found is not None:
            return found
        try:
            worker = _Worker(environment)
        except OSError as e:
            log.debug("autotune_cache: starting a compile process failed: %s", e)
            with self.lock:
                self.busy -= 1
                self.closed = True  # this machine cannot: compile on the threads from now on
            return None
        with self.lock:
            self.started.append(worker)
        return worker

    def count(self, what: str) -> None:
        """Add one to a statistic (from any pool thread)."""
        with self.lock:
            vars(self.stats)[what] += 1
            if what == "split":
                self.failures_in_a_row = 0

    def failed(self, broken: bool) -> None:
        """A split failed; `broken`: its process ended or is not usable (several in a row: no
        more processes in this program)."""
        with self.lock:
            self.stats.failed += 1
            if broken:
                self.failures_in_a_row += 1
                if self.failures_in_a_row >= MAX_FAILURES_IN_A_ROW:
                    self.unsupported = "the compile processes keep failing"
                    log.debug("autotune_cache: compiles stay on the threads: %s",
                              self.unsupported)

    def give(self, worker: _Worker, alive: bool) -> None:
        """Return a process after a request; a failed one is ended instead."""
        with self.lock:
            self.busy -= 1
            if alive and not self.closed:
                self.idle.append(worker)
                return
        self._end([worker])

    def _end(self, workers: list[_Worker]) -> None:
        """Close `workers`, and collect those closed earlier that have exited (so none stays
        a zombie for long; the rest exit after their compile in flight)."""
        for worker in workers:
            worker.close()
        with self.lock:
            for worker in workers:
                if worker in self.started:
                    self.started.remove(worker)
            self.ended.extend(workers)
            self.ended = [w for w in self.ended if w.proc.poll() is None]

    def forget(self) -> None:
        """In a forked child (process.py): close the copies of the parent's pipes, so that its
        processes still end when the parent closes them, and never touch them again (not even
        at the child's exit); the child starts its own. Takes no lock: a parent's thread may
        have held it at the fork."""
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        self.closed = True
        for worker in [*self.started, *self.ended]:
            worker.close()
        self.idle, self.started, self.ended = [], [], []

    def close(self) -> None:
        """End every idle process (interpreter exit); a busy one ends when it is given back."""
        with self.lock:
            self.closed = True
            idle, self.idle = self.idle, []
        self._end(idle)


def failure_reason(error: BaseException) -> str:
    """One line for the debug log (compile.py's own formatter imports this module)."""
    return " ".join(f"{type(error).__name__}: {error}".split())[:300]


def _pool() -> _Pool:
    return process.current().made("offload", _Pool)


def stats() -> Stats:
    """This process's counts of splits (a forked child starts at zero)."""
    return _pool().stats


def _limit() -> int:
    """How many compile processes at most: one per pool thread (this xdist worker's share) and
    one for a thread running a job it waits for (scheduler.py), 0 when
    --autotune_compile_in_processes is off: the configured cache's flags, else (an early start,
    before the program configures one) those of the files it compiles from."""
    from autotune_cache.cache import installed_cache

    found = installed_cache()
    ahead = getattr(process.current().compile_ahead, "ahead", None)  # preload.py's, if any
    cache = found if found is not None else None if ahead is None else ahead.cache
    if cache is None:
        return env.xdist_share(os.cpu_count() or 1) + 1
    if not cache.settings.compile_in_processes:
        return 0
    return env.xdist_share(cache.settings.compile_workers) + 1


# The variables a compile may read, by prefix (Triton's knobs and the C++ side's, MLIR's, LLVM's,
# ptxas's, CUDA's) or by name; a process is reused only while these are unchanged, so that a
# variable pytest rewrites at every test (PYTEST_CURRENT_TEST) starts no process.
_COMPILE_PREFIXES = ("TRITON_", "MLIR_", "LLVM_", "NVPTX_", "PTXAS", "CUDA", "NVIDIA_", "AMD",
                     "ROCM", "HIP")
_COMPILE_NAMES = frozenset({"PATH", "LD_LIBRARY_PATH", "HOME", "TMPDIR", "XDG_CACHE_HOME",
                            "CC", "CXX"})
# Output the user asked a compile for (IR dumps, timings, debug logs) is printed by Triton's own
# compile on the thread, where the program's output is, not by a compile process.
_OUTPUT_RE = re.compile(r"DUMP|DEBUG|TIMING|DIAGNOSTIC|REPRODUCER|PRINT|LOG|PROFILE")


def relevant(environment: dict[str, str]) -> dict[str, str]:
    """The part of `environment` a compile can read (what a compile process is matched on)."""
    return {k: v for k, v in environment.items()
            if k.startswith(_COMPILE_PREFIXES) or k in _COMPILE_NAMES}


# The Triton releases whose `compile` this module's front end and offload_worker.py's back end
# repeat, checked byte for byte by tests/triton/test_offload.py (CI runs both); another release
# compiles on the threads until it is checked too.
SPLIT_TRITONS = ("3.6", "3.9")
_PYTHON_RE = re.compile(r"python[0-9.]*(\.exe)?")


def supported() -> str | None:
    """Why compiles cannot be split in this process (None: they can): another Triton release,
    or an interpreter embedded in a program that `sys.executable` would start instead."""
    try:
        from triton import __version__
    except ImportError:
        return "no Triton"
    if ".".join(__version__.split(".")[:2]) not in SPLIT_TRITONS:
        return f"Triton {__version__} is not one of {', '.join(SPLIT_TRITONS)}"
    if not sys.executable or not _PYTHON_RE.fullmatch(os.path.basename(sys.executable)):
        return f"sys.executable ({sys.executable!r}) is not a Python interpreter"
    return None


def fill(src: Any, target: Any, options: dict[str, Any]) -> bool:
    """Compile `src` (Triton's ASTSource) for `target` with `options` into Triton's compile
    cache, its back end in a compile process (the module docstring); whether the compile cache
    now holds it. Never raises: a compile not split is left to Triton's own, on the thread."""
    pool = _pool()
    limit = _limit()
    if limit <= 0 or getattr(target, "backend", None) != "cuda":
        return False
    if pool.unsupported is None:
        pool.unsupported = supported() or ""
        if pool.unsupported:
            log.debug("autotune_cache: compiles stay on the threads: %s", pool.unsupported)
    if pool.unsupported:
        return False
    environment = dict(env.environ())  # before the key: the one the process compiles in
    try:
        front = _front_end(src, target, options, relevant(environment))
    except Exception as e:  # noqa: BLE001 - Triton's own compile raises it again, as usual
        log.debug("autotune_cache: no split compile of %s: %s", getattr(src, "name", src),
                  failure_reason(e))
        pool.count("declined")
        return False
    if front is None:
        pool.count("hits")
        return True
    if isinstance(front, str):
        log.debug("autotune_cache: no split compile of %s: %s", getattr(src, "name", src),
                  front)
        pool.count("declined")
        return False
    worker = pool.take(limit, environment)
    if worker is None:
        pool.count("no_process")
        return False
    answer = worker.ask(front.request)
    ok = isinstance(answer, tuple) and answer and answer[0] == "ok"
    pool.give(worker, alive=answer is not None and worker.same_triton)
    if not ok:
        reason = answer[1] if isinstance(answer, tuple) and len(answer) > 1 else "it ended"
        log.debug("autotune_cache: the back end of %s failed in a compile process (%s): "
                  "compiling it here", front.file_name, reason)
        pool.failed(answer is None or not worker.same_triton)
        return False
    front.file(answer[1], answer[2])
    pool.count("split")
    return True


def source_of(jit_fn: Any, specialization: str, target: Any) -> tuple[Any, dict[str, Any]]:
    """What `JITFunction.preload` compiles for a recorded `specialization` of `jit_fn`, for
    `target`: Triton's ASTSource and the backend's parsed options (as a dict). Raises for a
    record of another kernel, or one that does not parse."""
    import triton.language as tl
    from triton.compiler import ASTSource
    from triton.compiler.compiler import make_backend

    data = json.loads(specialization)
    if data.get("name") != getattr(jit_fn, "_fn_name", data.get("name")):
        raise RuntimeError(f"the record is of {data.get('name')!r}, not of {jit_fn._fn_name!r}")
    constexprs = {
        tuple(key): (tl.dtype(value) if tl.dtype.is_dtype(value)
                     else tl.constexpr(value["constexpr"])
                     if isinstance(value, dict) and "constexpr" in value else value)
        for key, value in zip(data["constant_keys"], data["constant_vals"], strict=True)}
    attrs = dict(zip(map(tuple, data["attrs_keys"]), data["attrs_vals"], strict=True))
    signature = {key: tuples(value) for key, value in data["signature"].items()}
    parsed = make_backend(target).parse_options(_options_of(data))
    return ASTSource(jit_fn, signature, constexprs, attrs), dict(parsed.__dict__)


def tuples(value: Any) -> Any:
    """JSON's lists back to the tuples Triton's signatures hold (as `JITFunction.preload`)."""
    return tuple(tuples(v) for v in value) if isinstance(value, list) else value


def _options_of(data: dict[str, Any]) -> dict[str, Any]:
    """A specialization record's options, its lists back to tuples (as `JITFunction.preload`
    reads them), not parsed by a backend yet."""
    return {key: tuple(value) if isinstance(value, list) else value
            for key, value in data["options"].items()}


def split_of(hook_kwargs: dict[str, Any]) -> Callable[[], bool] | None:
    """The `fill` of the compile Triton is about to start, from what its `jit_cache_hook` is
    given (the JIT function, the signature, constexprs, attributes and the specialization
    data holding the options), to run before Triton's compile on the thread that runs it
    (compile.py, scheduler.py `Lane.first`); None when it cannot be split."""
    if _limit() <= 0:
        return None
    try:
        from triton.compiler import ASTSource
        from triton.runtime.driver import driver

        compile_args = hook_kwargs["compile"]
        jit_fn = hook_kwargs["fn"].jit_function
        options = _options_of(json.loads(compile_args["specialization_data"]))
        target = driver.active.get_current_target()
        src = ASTSource(jit_fn, compile_args["signature"], compile_args["constants"],
                        compile_args["configs"][0])
    except Exception as e:  # noqa: BLE001 - another Triton's hook: compiled as before
        log.debug("autotune_cache: no split compile: %s", failure_reason(e))
        return None
    return lambda: fill(src, target, options)


@dataclass
class _Front:
    """A compile's front end done: what the compile process needs, and where its products go."""

    request: dict[str, Any]
    file_name: str
    cache: Any  # Triton's cache manager for the compile's key
    group: dict[str, str]  # the files filed so far, by name

    def file(self, products: list[tuple[str, Any]], metadata: dict[str, Any]) -> None:
        """File the back end's products and the metadata as Triton's `compile` does."""
        for ext, product in products:
            name = f"{self.file_name}.{ext}"
            self.group[name] = self.cache.put(product, name)
        name = f"{self.file_name}.json"
        self.group[name] = self.cache.put(json.dumps(metadata, default=vars), name, binary=False)
        self.cache.put_group(name, self.group)


def _front_end(src: Any, target: Any, options: dict[str, Any], environment: dict[str, str]
               ) -> _Front | str | None:
    """`triton.compile`'s steps up to and including TTIR, for `src`, in `environment` (the
    relevant part of the program's when the split began): the back end's request, None when the
    compile cache has the kernel, or why the compile cannot be split (text)."""
    from triton import __version__, knobs
    from triton._C.libtriton import get_cache_invalidating_env_vars, ir
    from triton.compiler.compiler import get_cache_key, make_backend
    from triton.runtime.cache import get_cache_manager

    compilation = knobs.compilation
    if (compilation.override or compilation.dump_ir or compilation.always_compile
            or compilation.use_ir_loc or compilation.store_binary_only or compilation.listener
            or getattr(knobs.runtime, "add_stages_inspection_hook", None) is not None):
        return "a Triton knob that changes how a compile runs is set"
    if not getattr(knobs, "propagate_env", True):
        return "Triton's knobs set in code are not written to the environment (propagate_env)"
    asked = sorted(k for k in environment if _OUTPUT_RE.search(k))
    if asked:
        return f"{', '.join(asked)} asks the compile for output"
    backend = make_backend(target)
    parsed = backend.parse_options(dict(options or {}, **src.parse_options()))
    if getattr(parsed, "ir_override", None):
        return "the kernel's options override its IR"
    env_vars = get_cache_invalidating_env_vars()
    key = get_cache_key(src, backend, parsed, env_vars=env_vars)
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
    cache = get_cache_manager(digest)
    file_name = src.name[:150]
    if (cache.get_group(f"{file_name}.json") or {}).get(f"{file_name}.json") is not None:
        return None
    stages: dict[str, Any] = {}
    backend.add_stages(stages, parsed, src.language)
    if list(stages)[:1] != ["ttir"] or src.ext != "ttir":
        return "its language does not start at TTIR"
    metadata = {"hash": digest, "target": target, **parsed.__dict__, **env_vars,
                "triton_version": __version__}
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    module = src.make_ir(target, parsed, backend.get_codegen_implementation(parsed),
                         backend.get_module_map(), context)
    group = {f"{file_name}.source": cache.put(module, f"{file_name}.source")}
    module = stages["ttir"](module, metadata)
    group[f"{file_name}.ttir"] = cache.put(module, f"{file_name}.ttir")
    if relevant(dict(env.environ())) != environment:
        return "the environment changed during the front end"
    # The parsed options themselves: parsed again there, a field left to the backend's default
    # would take that process's default, set when it imported Triton.
    request = {"ttir": str(module), "target": target, "options": parsed,
               "metadata": metadata, "language": src.language}
    return _Front(request, file_name, cache, group)
