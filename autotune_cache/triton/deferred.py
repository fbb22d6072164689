"""Deferred tuning: a dump run on a GPU tunes its misses at its end, with every compile overlapped.

Why: a regen (a dump run) of a real suite tuned each key when a test first launched it, and a
key's tuning cannot end before its slowest candidate compile does. Measured on the H200 with
FLA's suite (bench/suite_perf.py), before this module: each key's slowest compile, summed over
the keys, was 47.6 s of the 60.6 s the tunings took, while the 16 cores compiled little else.

What happens instead, on a miss in a dump run (Cache.resolve_or_defer offers the rest of the
tuning protocol to `defer`):
1. The launch's arguments are snapshotted: every tensor's storage is cloned and the tensor is
   rebuilt on the clone with its own size, strides and offset, so it specialises as the original
   (same dtype, same alignment) and tensors that shared storage still do. Plain values are kept.
2. Every candidate but one is specialised for the snapshot on this thread (its hooks run on the
   snapshot) and its compile is queued on the process's compile scheduler (compile.py
   queue_candidates; scheduler.py), the costliest first. The compiles of all the run's keys
   now overlap. Candidates whose recorded timings the tuning reuses (a candidate-list change:
   Cache.reusable) are not compiled: a regen after one config was added to a kernel compiles
   that config, not the kernel's whole list (on Liger-Kernel's suite, 17 compiles of 18).
3. The launch goes on with a provisional candidate: the cheapest to compile (compile.compile_cost),
   compiled here, loaded (which surfaces out-of-resources); if it fails, the next cheapest. It is
   one of the kernel's own candidates, so it computes what the kernel computes, which is
   triton.autotune's own premise. The process keeps launching it for that key.
4. Before the dump's final write (Cache.before_final_dump: pytest's session end, or exit), every
   compile is awaited, then each deferred key runs the ordinary protocol (lock, re-read of the
   shared tiers, timing reuse, benchmarks under the device lock, recording) on its snapshot, with
   the GPU otherwise idle. Nothing else differs in the entry: the same benchmarks pick the winner.
   `autotune_cache.triton.tune_deferred()` does the same at a point the program chooses (a
   workload that times its tuning), and a key launched HOT_LAUNCHES times is tuned at that
   launch (a dump run that is a long workload must not run a provisional config for long).

Not deferred (tuned at the launch, as before): a run that does not dump, the flag
--autotune_deferred_tuning=false, the interpreter or an injected fake benchmark (nothing compiles,
so nothing overlaps), a Triton without AsyncCompileMode, an argument that is neither a tensor nor
a plain value (its state cannot be snapshotted), and snapshots beyond the memory budget (the
smaller of MAX_SNAPSHOT_BYTES and FREE_MEMORY_SHARE of the device's free memory, for all the
deferred keys together).

The cost, said in docs/triton.md: until the end, the kernel object reports the provisional
config as `best_config`; a dump run killed before its end records none of its deferred keys.
A forked child forgets the parent's deferred keys (the parent tunes them): they are per-process
state (process.py).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from autotune_cache.errors import AutotuneCacheError
from autotune_cache.triton import process
from autotune_cache.triton.compile import (
    Queued,
    can_queue,
    candidate_kwargs,
    compile_cost,
    forget_queued,
    queue_candidates,
    recording_specializations,
)
from autotune_cache.triton.device import interpreter_active
from autotune_cache.triton.tune import KernelTuning, Tuner

if TYPE_CHECKING:
    from autotune_cache.cache import Cache
    from autotune_cache.store.tuning import Resolved

log = logging.getLogger(__name__)

# The snapshots of all deferred keys together stay under the smaller of these; a key beyond them
# is tuned at its launch.
MAX_SNAPSHOT_BYTES = 4 << 30
FREE_MEMORY_SHARE = 0.25
# A deferred key launched this often is tuned at that launch: a dump run that is a long
# workload (a training loop, a benchmark) must not run a provisional config for long. A test
# launches a key a few times.
HOT_LAUNCHES = 32


class DeferringTuner(Tuner, Protocol):
    """What this module needs of the autotuner (autotuner.py), besides what tuning does."""

    def adopt_deferred(self, resolved: Resolved, tuning: KernelTuning, memo: tuple) -> None: ...


@dataclass
class _Pending:
    """One deferred key: its tuner, tuning (holding the candidates, the snapshot and the queued
    compiles), the rest of the protocol (`finish`) and the Triton-style memo of the launch."""

    tuner: DeferringTuner
    tuning: KernelTuning
    finish: Callable[[], Resolved]
    memo: tuple
    nbytes: int
    launches: int = 1


class _Deferred:
    """The process's deferred keys and the bytes their snapshots hold (process.py)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: list[_Pending] = []
        self.held_bytes = 0


def _state() -> _Deferred:
    return process.current().made("deferred", _Deferred)


def applies(cache: Cache, tuning: KernelTuning) -> bool:
    """Whether a miss of this tuning is deferred: a dump run, the flag on, and compiles to
    overlap (a GPU benchmark, not the interpreter, a Triton with AsyncCompileMode)."""
    settings = cache.settings
    return (settings.dump_to is not None and settings.deferred_tuning
            and _compiles_to_overlap(tuning))


def _compiles_to_overlap(tuning: KernelTuning) -> bool:
    return tuning.benchmark.method != "fake" and not interpreter_active() and can_queue()


def defer(cache: Cache, tuner: DeferringTuner, tuning: KernelTuning,
          finish: Callable[[], Resolved], memo: tuple, reused: Collection[int] = ()
          ) -> Any | None:
    """Take over a miss of `tuning` (built for the launch's arguments; see the module
    docstring): returns the provisional config to launch, or None when this key must be tuned
    now (an argument that cannot be snapshotted, or no memory budget left). `reused`: the
    candidates whose recorded timings the tuning will reuse, compiled only if it needs them
    after all (a candidate it then times compiles at its benchmark)."""
    state = _state()
    args, kwargs = tuning.args, tuning.kwargs
    storages = _storages([*args, *(v for k, v in kwargs.items() if k != "grid")])
    if storages is None:
        return None
    nbytes = sum(s.nbytes() for s in storages.values())
    with state.lock:
        if state.held_bytes + nbytes > _budget(storages, state.held_bytes):
            log.info("autotune_cache: %s is tuned at its launch: the snapshots of the deferred "
                     "tunings would pass their memory budget", tuner.kernel_name)
            return None
        state.held_bytes += nbytes
    try:
        clones = {ptr: storage.clone() for ptr, storage in storages.items()}
        snap_args = tuple(_rebuilt(v, clones) for v in args)
        snap_kwargs = {k: v if k == "grid" else _rebuilt(v, clones) for k, v in kwargs.items()}
        configs = tuning.configs
        order = sorted(range(len(configs)), key=lambda i: compile_cost(configs[i]))
        tuning.use_snapshot(snap_args, snap_kwargs)
        if interpreter_active():  # nothing compiles (tests force deferral here)
            queued = Queued()
            provisional = configs[order[0]]
        else:
            with arguments_of(tuner, snap_args):
                queued = queue_candidates(tuner.fn, snap_args, snap_kwargs, configs,
                                          cache.settings.compile_workers,
                                          prepare=tuning.prepare(),
                                          skip=[*order[:1], *reused])
            provisional = _provisional(tuner, configs, order, args, kwargs, queued)
        tuning.queued = queued
    except BaseException:
        with state.lock:
            state.held_bytes -= nbytes
        raise
    with state.lock:
        state.pending.append(_Pending(tuner, tuning, finish, memo, nbytes))
    cache.before_final_dump(finish_all)
    return provisional


def launched_again(tuner: DeferringTuner, memo: tuple) -> Any | None:
    """Count another launch of a deferred key; at HOT_LAUNCHES, tune it now (waiting for its
    queued compiles) and return the winner; otherwise None (the provisional config stays)."""
    state = _state()
    with state.lock:
        found = next((p for p in state.pending if p.tuner is tuner and p.memo == memo), None)
        if found is None:
            return None
        found.launches += 1
        if found.launches < HOT_LAUNCHES:
            return None
        state.pending.remove(found)
    try:
        _await_compiles(found)
        _tune(found)
    finally:
        with state.lock:
            state.held_bytes -= found.nbytes
    log.info("autotune_cache: %s was launched %d times with a provisional config; tuned it "
             "now instead of at the end of the run", tuner.kernel_name, HOT_LAUNCHES)
    return tuner.best_config


def finish_all() -> None:
    """Tune every deferred key now (Cache.before_final_dump calls this before the dump's final
    write; `autotune_cache.triton.tune_deferred` is this): wait for all their compiles, then run
    each key's protocol on its snapshot; later launches of those keys launch their winners. A
    key that fails is named in the error raised after the others are recorded."""
    state = _state()
    with state.lock:
        pending, state.pending[:] = list(state.pending), []
    try:
        for p in pending:  # every compile first: no benchmark shares the CPU with a compile
            _await_compiles(p)
        failed: list[tuple[_Pending, Exception]] = []
        for p in pending:
            try:
                _tune(p)
            except Exception as e:  # noqa: BLE001 - named below, after the other keys
                failed.append((p, e))
    finally:
        with state.lock:
            state.held_bytes -= sum(p.nbytes for p in pending)
            done = not state.pending
        if done:
            forget_queued()
    if failed:
        names = "; ".join(f"{p.tuner.kernel_name}: {e}" for p, e in failed)
        raise AutotuneCacheError(
            f"deferred tuning failed for {len(failed)} key(s) at the end of the dump run ({names})."
            " The other keys were recorded. Run again with AUTOTUNE_FLAGS="
            "--autotune_deferred_tuning=false to tune each key at its launch and see the error "
            "in the test that launched it.") from failed[0][1]


def _await_compiles(pending: _Pending) -> None:
    queued = pending.tuning.queued
    assert queued is not None
    queued.wait(range(len(pending.tuning.configs)))


def _tune(pending: _Pending) -> None:
    """Run the rest of the key's protocol on its snapshot, and hand the result to its tuner."""
    with arguments_of(pending.tuner, pending.tuning.args):
        resolved = pending.finish()
        pending.tuner.adopt_deferred(resolved, pending.tuning, pending.memo)


@contextlib.contextmanager
def arguments_of(tuner: Tuner, args: Sequence[Any]) -> Iterator[None]:
    """The tuner's `nargs` (what its hooks and problem key read) are `args` inside the block."""
    saved = tuner.nargs
    tuner.nargs = dict(zip(tuner.arg_names, args, strict=False))
    try:
        yield
    finally:
        tuner.nargs = saved


def _provisional(tuner: Tuner, configs: Sequence[Any], order: Sequence[int],
                 args: Sequence[Any], kwargs: Mapping[str, Any], queued: Queued) -> Any:
    """The config the launch goes on with: the cheapest to compile that compiles and loads
    (compiled here, on the launch's own arguments, or finished from the queue). Every candidate
    failing raises the first one's error, as the launch would have."""
    first_error: Exception | None = None
    for i in order:
        try:
            kernel = queued.kernels.get(i)
            if hasattr(kernel, "result"):
                kernel = kernel.result()  # the queue's compile (queued.wait finishes it too)
            elif i not in queued.kernels:
                with recording_specializations(queued.specs) as now:
                    now(i)
                    kernel = tuner.fn.run(*args, grid=None, warmup=True,
                                          **candidate_kwargs(kwargs, configs[i]))
            load = getattr(kernel, "_init_handles", None)
            if load is not None:
                load()  # out of shared memory or registers shows here, not at the launch
            return configs[i]
        except Exception as e:  # noqa: BLE001 - the next candidate; all failing raises
            first_error = first_error or e
    assert first_error is not None
    raise first_error


def _storages(values: Sequence[Any]) -> dict[tuple[str, int], Any] | None:
    """The distinct storages of the tensors among `values` (tuples and lists looked into), by
    device and address; None when a value is neither a tensor nor a plain value."""
    import torch

    found: dict[tuple[str, int], Any] = {}
    todo = list(values)
    while todo:
        value = todo.pop()
        if isinstance(value, torch.Tensor):
            storage = value.untyped_storage()
            found.setdefault((str(value.device), storage.data_ptr()), storage)
        elif isinstance(value, (tuple, list)):
            todo.extend(value)
        elif not _plain(value):
            return None
    return found


def _plain(value: Any) -> bool:
    import torch

    if value is None or isinstance(value, (bool, int, float, str, torch.dtype)):
        return True
    try:
        import triton.language as tl
    except ImportError:
        return False
    return isinstance(value, (tl.constexpr, tl.dtype))


def _rebuilt(value: Any, clones: Mapping[tuple[str, int], Any]) -> Any:
    """`value` with every tensor rebuilt on its storage's clone (same size, strides, offset)."""
    import torch

    if isinstance(value, torch.Tensor):
        clone = clones[(str(value.device), value.untyped_storage().data_ptr())]
        with torch.no_grad():
            return torch.empty(0, dtype=value.dtype, device=value.device).set_(
                clone, value.storage_offset(), value.size(), value.stride())
    if isinstance(value, (tuple, list)):
        return type(value)(_rebuilt(v, clones) for v in value)
    return value


def _budget(storages: Mapping[tuple[str, int], Any], held_bytes: int) -> int:
    """How many bytes the deferred keys' snapshots may hold in all: MAX_SNAPSHOT_BYTES, or less
    on a GPU with less than four times that free."""
    budget = MAX_SNAPSHOT_BYTES
    import torch

    for device in {d for d, _ in storages}:
        if device.startswith("cuda"):
            free, _total = torch.cuda.mem_get_info(torch.device(device))
            budget = min(budget, int(free * FREE_MEMORY_SHARE) + held_bytes)
    return budget
