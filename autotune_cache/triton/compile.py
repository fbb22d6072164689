"""Compile candidate configs in parallel, costliest first, before any of them is benchmarked.

Every candidate is compiled up front through Triton's own `AsyncCompileMode`, on the process's
compile scheduler (scheduler.py, at CANDIDATE priority): `JITFunction.run(..., warmup=True)`
specialises the kernel for the real arguments and the config's constexprs / num_warps / num_stages,
hands the compile to the scheduler and returns a future; nothing is launched. The tuning thread,
waiting for them, compiles itself any candidate no worker has started yet. Compiled kernels land in
the JITFunction's in-memory cache and in TRITON_CACHE_DIR, so the benchmark launches that follow
start immediately.

Candidates are started in order of their estimated compile cost, largest first
(`compile_cost`): a key's compiles cannot end before the slowest one does, so that one starts at
once instead of behind a queue of quick ones. The order changes when a compile starts, never
what is compiled. Each compile is timed on the thread that runs it, so a tuning can say which
candidate held it up.

A candidate's hooks (`prepare(config)`, its `pre_hook`) run on the calling thread right before
that candidate is specialised, one candidate at a time, as Triton runs them before a candidate's
first launch. (docs/decisions/0012-hooks-before-specialisation.md)
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune_cache.triton import hooks, offload, process, scheduler
from autotune_cache.triton.launch import launch_kwargs
from autotune_cache.triton.sandbox import ensure_triton_cache_dir
from autotune_cache.triton.scheduler import Lane, Priority

# Longest failure reason we record, so one ptxas dump cannot bloat a results file.
MAX_REASON_CHARS = 500
# How many chained exceptions failure_reason() follows (a guard against cycles and huge chains).
_MAX_CHAIN = 32

_PATH_RE = re.compile(r"(?:/[\w.@+-]+)+/([\w.@+-]+)")
_DEF_RE = re.compile(r"^\s*def\s+(\w+)", re.MULTILINE)


def _one_line(text: str) -> str:
    return _PATH_RE.sub(r"\1", " ".join(text.split()))


def _is_compilation_error(error: BaseException) -> bool:
    # Duck-typed on Triton's CompilationError (src, node, error_message), so a reason can be
    # computed without importing triton and for every release that has this shape.
    return all(hasattr(error, a) for a in ("src", "node", "error_message"))


def _message(error: BaseException) -> str:
    """What the exception itself says. A Triton CompilationError's str() is a location and a
    source excerpt ending in `^`, with the error (if any) on the last line: only that counts."""
    if _is_compilation_error(error):
        return _one_line(getattr(error, "error_message", None) or "")
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if len(lines) > 2 and lines[0].startswith("at ") and lines[0].endswith(":"):
        lines = [lines[0], lines[-1]]  # the same layout from an error that is not typed as one
    return _one_line(" ".join(lines))


def _location(error: BaseException) -> str:
    """`at 5:13 in _attn_fwd_inner` for a Triton CompilationError, else ''."""
    node = getattr(error, "node", None)
    if not _is_compilation_error(error) or not hasattr(node, "lineno"):
        return ""
    where = f"at {node.lineno}:{getattr(node, 'col_offset', 0)}"
    found = _DEF_RE.search(getattr(error, "src", None) or "")
    return f"{where} in {found.group(1)}" if found else where


def _chain(error: BaseException) -> Iterator[BaseException]:
    """The exception, then what caused it: `__cause__` (`raise … from e`) always, and the
    implicit `__context__` only while the exception so far says nothing itself (an error raised
    while handling another usually describes the failure better than the one it interrupted)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(seen) < _MAX_CHAIN:
        seen.add(id(current))
        yield current
        if current.__cause__ is not None:
            current = current.__cause__
        elif not current.__suppress_context__ and not _message(current):
            current = current.__context__
        else:
            current = None


def failure_reason(error: BaseException) -> str:
    """A one-line, machine-independent reason for a failed config.

    It is the innermost exception in the chain (see _chain) that has a message, as
    `Type: message`, followed by the innermost Triton compile location when there is one, e.g.
    `AssertionError: Input shapes should have M >= 1, N >= 1 and K >= 16 [at 5:13 in
    _attn_fwd_inner]`. Triton wraps an error inside a called @jit function in one
    CompilationError per call level whose text is only a source excerpt, so the outer error
    alone would say nothing. Whitespace is collapsed and absolute paths are cut to file names;
    an over-long reason keeps its start (the type and the error) and its end."""
    chain = list(_chain(error))
    chosen = next((e for e in reversed(chain) if _message(e)), chain[0])
    text = _message(chosen)
    location = next((loc for loc in map(_location, reversed(chain)) if loc), "")
    reason = f"{type(chosen).__name__}: {text}" if text else type(chosen).__name__
    if location:
        reason += f" [{location}]"
    if len(reason) > MAX_REASON_CHARS:
        keep = MAX_REASON_CHARS - 5
        reason = reason[:keep // 2] + " ... " + reason[len(reason) - (keep - keep // 2):]
    return reason


def candidate_kwargs(kwargs: Mapping[str, Any], config: Any) -> dict[str, Any]:
    """The keywords that specialise `config` for a launch with `kwargs` (no grid, no warmup)."""
    call = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}
    call.update(launch_kwargs(config))
    return call


Prepare = Callable[[Any], None]


@contextlib.contextmanager
def recording_specializations(specs: dict[int, str], lane: Lane | None = None
                              ) -> Iterator[Callable[[int], None]]:
    """While active, the specialization data (the JSON `JITFunction.preload` takes) of every
    compile Triton starts is kept in `specs` under the index last passed to the yielded
    `now(i)`. Triton calls `knobs.runtime.jit_cache_hook` synchronously in the thread that
    starts a compile, so `now(i)` before specialising candidate i attributes it exactly; a
    candidate already compiled in this process starts no compile and records nothing. A hook
    the user installed keeps running (and keeps its say over skipping the compile).

    With the `lane` the compiles are submitted to, each one's back end is split off into a
    compile process (offload.py) before Triton's compile runs on the pool thread: Triton
    submits the compile right after its hook, on this thread, under the lane's current index."""
    current = [-1]

    def now(i: int) -> None:
        current[0] = i
        if lane is not None:
            lane.first.clear()  # one whose compile a hook skipped was never submitted

    def record(kw: dict[str, Any]) -> None:
        data = (kw.get("compile") or {}).get("specialization_data")
        if data and current[0] >= 0:
            specs[current[0]] = portable_specialization(data)
            if lane is not None and (split := offload.split_of(kw)) is not None:
                lane.first[current[0]] = split

    with hooks.recording(record):
        yield now


def portable_specialization(data: str) -> str:
    """Triton's specialization data without what only names this machine: the libraries Triton
    links by default (libdevice, under Triton's own package directory) are recorded by absolute
    path, which a results file committed from one checkout would carry to every other machine,
    where the path does not exist (and every regeneration elsewhere would rewrite). Left out,
    `JITFunction.preload` fills in the loading machine's own, as Triton does for a launch; the
    compile cache hashes the library's content, not its path. Anything else is kept as is."""
    try:
        obj = json.loads(data)
        libs = obj["options"]["extern_libs"]
    except (ValueError, KeyError, TypeError):
        return data
    if not isinstance(libs, list) or not libs:
        return data
    root = _triton_root()
    kept = [lib for lib in libs
            if not (isinstance(lib, list) and len(lib) == 2 and isinstance(lib[1], str)
                    and _real_path(lib[1]).startswith(root))]
    if len(kept) == len(libs):
        return data
    obj["options"]["extern_libs"] = kept or None
    return json.dumps(obj)


# Resolving a path is an lstat per component, and every compile Triton starts passes here with
# the same few library paths: on the H200 machine's filesystem the uncached calls cost 1.5 s of
# the main thread in gpu_perf's C (its 144 candidate specialisations) and 6.4 s in Liger-Kernel's
# dump run (bench/suite_perf.py --profile). Triton's package and its libraries do not move while
# a process runs.
@functools.lru_cache(maxsize=1)
def _triton_root() -> str:
    import triton

    return os.path.realpath(os.path.dirname(triton.__file__)) + os.sep


@functools.lru_cache(maxsize=64)
def _real_path(path: str) -> str:
    return os.path.realpath(path)


def compile_cost(config: Any) -> float:
    """A candidate's estimated compile cost, to start the costly compiles first: the work of one
    thread, the product of its integer meta-parameters (block sizes) over its warps, times its
    pipeline stages. Compile time grows with how much code LLVM and ptxas see per thread: on the
    CPU machine one FLA activation kernel compiled its B=8192 candidate in 11.7 s with 1 warp
    and in 0.14 s with 32. Only an order; a wrong estimate costs time, never a result."""
    work = math.prod(v for v in getattr(config, "kwargs", {}).values()
                     if isinstance(v, int) and not isinstance(v, bool) and v > 1)
    warps = getattr(config, "num_warps", None) or 4
    stages = getattr(config, "num_stages", None) or 1
    return work * stages / warps


@dataclass
class Compiles:
    """What `compile_candidates` did: the `failures` by index (hook or compile errors; the
    others are ready to launch), `seconds` of each compile on its pool thread (queueing not
    counted; none for a candidate compiled earlier in the process or failed before compiling),
    the `wall` time of them all, and the specialization data recorded (see
    recording_specializations)."""

    failures: dict[int, str] = field(default_factory=dict)
    seconds: dict[int, float] = field(default_factory=dict)
    wall: float = 0.0
    specs: dict[int, str] = field(default_factory=dict)

    def reindexed(self, indices: Sequence[int]) -> Compiles:
        """These compiles with candidate j of the compiled list renamed `indices[j]`."""
        return Compiles(failures={indices[j]: r for j, r in self.failures.items()},
                        seconds={indices[j]: t for j, t in self.seconds.items()},
                        wall=self.wall,
                        specs={indices[j]: d for j, d in self.specs.items()})

    def slowest(self) -> tuple[int, float] | None:
        """(index, seconds) of the slowest compile, or None when nothing compiled."""
        if not self.seconds:
            return None
        index = max(self.seconds, key=lambda i: self.seconds[i])
        return index, self.seconds[index]


def _specialise(kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any], config: Any,
                prepare: Prepare | None) -> Any:
    """Run `prepare(config)`, then specialise `kernel` for `config` and start its compile (a
    future under AsyncCompileMode, else the compiled kernel; None when a compile hook skipped
    it). Raises what the hook or the compile raises."""
    if prepare is not None:
        prepare(config)
    return kernel.run(*args, grid=None, warmup=True, **candidate_kwargs(kwargs, config))


def _finish(kernel: Any) -> str | None:
    """Wait for `kernel` when it is a compile under AsyncCompileMode and finish it into the
    JITFunction's in-memory cache (so launches find it); the failure reason of a compile that
    failed (it fails only its config), else None."""
    if hasattr(kernel, "result"):
        try:
            kernel.result()
        except Exception as e:
            return failure_reason(e)
    return None


def compile_candidates(kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any],
                       configs: Sequence[Any], workers: int,
                       prepare: Prepare | None = None) -> Compiles:
    """Compile every config in `configs` for these arguments without launching anything, on
    `workers` threads, costliest first, and wait for all of them.

    `kernel` is what the autotuner wraps (a JITFunction, possibly under @triton.heuristics).
    `prepare(config)`, when given, runs on this thread right before that config is specialised
    (the autotuner passes one that runs the config's hooks; see the module docstring). A hook or
    compile error fails only its config. A no-op under the interpreter, where nothing is
    compiled."""
    from autotune_cache.triton.device import interpreter_active

    compiles = Compiles()
    if interpreter_active() or not configs:
        return compiles
    import triton

    ensure_triton_cache_dir()  # before our first compile, so sandboxed tests keep the result
    started = time.perf_counter()
    order = sorted(range(len(configs)), key=lambda i: -compile_cost(configs[i]))

    def specialise(i: int) -> Any:
        try:
            return _specialise(kernel, args, kwargs, configs[i], prepare)
        except Exception as e:  # any hook or compile error disqualifies only this config
            compiles.failures[i] = failure_reason(e)
            return None

    async_mode = getattr(triton, "AsyncCompileMode", None)
    if async_mode is None or workers <= 1 or len(configs) == 1:
        with recording_specializations(compiles.specs) as now:
            for i in order:
                now(i)
                began = time.perf_counter()
                specialise(i)
                compiles.seconds[i] = time.perf_counter() - began
    else:
        lane = scheduler.scheduler(workers).lane(Priority.CANDIDATE, compiles.seconds)
        with async_mode(lane, ignore_errors=True):
            futures = {}
            with recording_specializations(compiles.specs, lane) as now:
                for i in order:
                    now(i)
                    lane.current = i
                    futures[i] = specialise(i)
            for i, future in futures.items():  # one no worker has started runs here
                reason = _finish(future)
                if reason is not None:
                    compiles.failures[i] = reason
    compiles.wall = time.perf_counter() - started
    return compiles



@dataclass
class Queued:
    """One tuning's candidates handed to a CompileQueue: what each specialisation returned (a
    future of the compile, a kernel compiled earlier in the process, or None), the failures of
    those that could not even be specialised, the specialization data recorded, and each
    compile's seconds on its pool thread (filled in as they finish)."""

    started: float = field(default_factory=time.perf_counter)
    kernels: dict[int, Any] = field(default_factory=dict)
    failures: dict[int, str] = field(default_factory=dict)
    specs: dict[int, str] = field(default_factory=dict)
    seconds: dict[int, float] = field(default_factory=dict)

    def wait(self, indices: Sequence[int]) -> Compiles:
        """Wait for the compiles of `indices` and finish them into the JITFunction's in-memory
        cache (so launches find them); what compile_candidates would have returned for them."""
        compiles = Compiles(specs={i: s for i, s in self.specs.items() if i in indices})
        for i in indices:
            if i in self.failures:
                compiles.failures[i] = self.failures[i]
                continue
            reason = _finish(self.kernels.get(i))
            if reason is not None:
                compiles.failures[i] = reason
            if i in self.seconds:
                compiles.seconds[i] = self.seconds[i]
        compiles.wall = time.perf_counter() - self.started
        return compiles


class _QueueMode:
    """The process's one `AsyncCompileMode` for queued candidates (see queue_candidates): it
    starts one compile per distinct kernel binary however many keys ask for it. It is made
    current only while a tuning hands its candidates over (Triton's `AsyncCompileMode` would
    wait for every compile when its `with` block ends)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.mode: Any = None
        self.lane: Lane | None = None

    def reset(self) -> None:
        """Forget the compiles handed over so far (the deferred keys were all tuned)."""
        with self.lock:
            self.mode = self.lane = None


def can_queue() -> bool:
    """Whether this Triton has what queue_candidates needs (AsyncCompileMode and its context
    variable, Triton >= 3.4)."""
    try:
        import triton
        from triton.runtime import _async_compile
    except ImportError:
        return False
    return hasattr(triton, "AsyncCompileMode") and hasattr(_async_compile, "active_mode")


def queue_candidates(kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any],
                     configs: Sequence[Any], workers: int, prepare: Prepare | None = None,
                     skip: Sequence[int] = ()) -> Queued:
    """Specialise each config of `configs` (but those in `skip`) on this thread, costliest
    first, running `prepare(config)` right before, and queue its compile on the process's
    scheduler (`workers` threads) without waiting (triton/deferred.py: the compiles of every
    key of a run overlap); returns at once."""
    import triton
    from triton.runtime import _async_compile

    state = process.current().made("queue_mode", _QueueMode)
    queued = Queued()
    order = sorted((i for i in range(len(configs)) if i not in skip),
                   key=lambda i: -compile_cost(configs[i]))
    pool = scheduler.scheduler(workers)
    with state.lock:
        if state.mode is None or state.lane is None:
            state.lane = pool.lane(Priority.CANDIDATE, {})
            state.mode = triton.AsyncCompileMode(state.lane, ignore_errors=True)
        lane = state.lane
        lane.seconds = queued.seconds
        token = _async_compile.active_mode.set(state.mode)
        try:
            with recording_specializations(queued.specs, lane) as now:
                for i in order:
                    now(i)
                    lane.current = i
                    try:
                        queued.kernels[i] = _specialise(kernel, args, kwargs, configs[i],
                                                        prepare)
                    except Exception as e:  # any hook or compile error fails only this config
                        queued.failures[i] = failure_reason(e)
        finally:
            _async_compile.active_mode.reset(token)
    return queued


def forget_queued() -> None:
    """Drop the process's queued-candidates mode (and the compiled kernels it holds)."""
    found = process.current().queue_mode
    if found is not None:
        found.reset()
