"""Plain `@triton.jit` kernels: a dump run records what it compiled, a loaded run compiles it ahead.

Why: a suite's kernels that nothing autotunes (Liger-Kernel's MoE routing kernels, a library's
elementwise helpers) compile at their first launch, one by one on the test's thread, in every
sandbox whose compile cache is empty. On the H200 that was 23.5 s of Liger's loaded suite,
which Triton's best case (a warm compile cache) does not pay. The results file already travels
to every sandbox, so it carries what those launches need.

Recording (a process with --dump_autotune_results_to): every compile Triton starts, seen through
its `knobs.runtime.jit_cache_hook`, of a JIT function that no tuner of ours drives (their
winners are recorded with their entries) and not under the benchmark of one of Triton's own
autotuners (its candidates, compiled again by that autotuner in every run), becomes a warm-up
entry (foundation/key.py `WARMUP_CONFIGS`): the function's module-qualified name, its source
fingerprint (fingerprint.py, as a tuned kernel's), the device and toolchain, and as the problem
a digest of Triton's specialization data, which the result holds. Warm-ups go to the dump
only, never to a shared tier (a tier's entries are untrusted: one there would have every
reader compile what a stranger named) and are written with the next tuning or at exit, not at
each compile. What a dump records is exactly what its launches compiled, so a regeneration
drops what no launch needs any more.

Loading (a process with --load_autotune_results_from): at the first compile Triton starts in
the process (a launch, so the GPU driver is up) and at the first autotuned launch, the loaded
warm-ups of each plain JIT function in a module already imported (nothing is imported here) are
queued on the compile-ahead's pool (preload.py) when their source fingerprint, device and
toolchain match the running ones, under the compile-ahead's caps. A function in a module
imported later is looked for at the next compile. A launch that needs a specialization queued
there waits for it (or, when no thread has started it, compiles it itself) and then finds it in
the compile cache instead of compiling it twice.

Both (a regeneration in place: the ini setup loads the committed file and the dump rewrites
it): the committed file lists the last run's warm-ups, so they are compiled ahead too, but into
Triton's compile cache only (preload.py `compile_cache_only`), never into the JIT function's
memory. Each launch that needs one still misses there, so Triton calls the hook and the dump
records it exactly as without the compile-ahead, and its compile is a compile-cache hit
(decision 0024 says why). Since no launch can use such a compile unseen, the warm-ups of a
kernel recorded on this GPU under another source or toolchain (a regen after an upgrade or an
edit) are compiled too, at the lowest priority and never awaited by a launch: one that no
longer fits costs only its compile (preload.py `_recorded`).

A warm-up is only ever a compile started early: outside a dump run a stale or foreign one
(another source, device or toolchain) is not compiled, and a specialization no launch asks for
is wasted work, never a result. Triton keeps one `jit_cache_hook`: ours chains to the one it
replaced, and a hook set after ours replaces it (then nothing is recorded or compiled ahead).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import logging
import sys
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

from autotune_cache import cache as cache_module
from autotune_cache.cache import Cache
from autotune_cache.foundation.import_hook import still_importing
from autotune_cache.foundation.key import WARMUP_CONFIGS, CacheKey, Device
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.triton import hooks, preload, process, seeding
from autotune_cache.triton.compile import failure_reason, portable_specialization
from autotune_cache.triton.device import current_device, toolchain
from autotune_cache.triton.fingerprint import source_fingerprint

log = logging.getLogger(__name__)

# The JIT function of every tuner of ours (autotuner.py), by id, held weakly: its compiles are
# candidates or winners, recorded with the tuned entries. Kept here, not as an attribute of the
# user's function (nothing is written onto Triton's objects).
_tuned: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
# How many frames up a compile is looked at for a Triton autotuner's benchmark.
_FRAMES = 40


def mark_tuned(kernel: Any) -> None:
    """Mark the JIT function under a tuner of ours (and each wrapper between): its compiles are
    that tuner's candidates and winners, recorded with its entries, never as warm-ups."""
    while kernel is not None and not inspect.isfunction(kernel):
        with contextlib.suppress(TypeError):  # one that cannot be referenced weakly
            _tuned[id(kernel)] = kernel
        kernel = getattr(kernel, "fn", None)


def is_tuned(kernel: Any) -> bool:
    """Whether `kernel` is (under) a tuner of ours (mark_tuned)."""
    return _tuned.get(id(kernel)) is kernel


@dataclass
class _Process:
    """What this process does with warm-ups for one cache: record, load or nothing."""

    cache: Cache
    record: bool  # a dump run: record what Triton compiles
    load: bool  # files are loaded: compile their warm-ups ahead
    device: Device | None = None
    toolchain: tuple[tuple[str, str], ...] = ()
    started: bool = False
    # Loaded kernel names not resolved to a JIT function yet, and sys.modules' size when they
    # were last looked for.
    pending: set[str] = field(default_factory=set)
    modules_seen: int = -1
    fingerprints: weakref.WeakKeyDictionary[Any, str] = field(
        default_factory=weakref.WeakKeyDictionary)


class _Current:
    """The warm-up state of this process (process.py): one _Process per process cache."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.process: _Process | None = None


def install() -> None:
    """Listen to every compile Triton starts (hooks.py's one `jit_cache_hook` dispatcher): what
    a process that loads or dumps results needs. Costs nothing until Triton compiles."""
    hooks.set_compile_listener(_on_compile)
    seeding.set_pick_recorder(_record_pick)


def _on_compile(kw: dict[str, Any]) -> None:
    info = kw.get("fn")
    jit_fn = getattr(info, "jit_function", None)
    spec = (kw.get("compile") or {}).get("specialization_data")
    if jit_fn is None or not spec or preload.in_preload():
        return
    state = _current()
    if state.record:
        _record(state, jit_fn, portable_specialization(spec))
    if state.load:
        _scan(state)
        preload.wait(preload.awaiting(jit_fn, kw.get("key")))


def start(cache: Cache) -> None:
    """The first autotuned launch: start the loaded warm-ups too, if `cache` loads files."""
    state = _current(cache)
    if state.load:
        _scan(state)


def scan_early(cache: Cache, device: Device, chain: tuple[tuple[str, str], ...]) -> None:
    """The early start (early.py): queue the loaded warm-ups of `cache` (its read-only view of
    the loaded files) of the plain JIT functions defined so far, for `device` and `chain`, the
    device the loaded entries name and its toolchain (the GPU is not asked)."""
    state = _current(cache)
    if state.load:
        _scan(state, early=(device, chain))


def _current(cache: Cache | None = None) -> _Process:
    """This process's warm-up state for the process cache (`cache`, else the process cache)."""
    if cache is None:
        # The one the first autotuned launch would configure (from the flags in the
        # environment); with none set, a cache that neither dumps nor loads.
        cache = cache_module.get_cache()
    current = process.current().made("warmups", _Current)
    with current.lock:
        if current.process is None or current.process.cache is not cache:
            settings = cache.settings
            current.process = _Process(cache, record=settings.dump_to is not None,
                                       load=bool(settings.load_from))
        return current.process


def _device(state: _Process) -> tuple[Device, tuple[tuple[str, str], ...]]:
    if state.device is None:
        state.device = current_device()
        state.toolchain = tuple(sorted(toolchain(state.device).items()))
    return state.device, state.toolchain


def _fingerprint(state: _Process, jit_fn: Any) -> str:
    found = state.fingerprints.get(jit_fn)
    if found is None:
        found = state.fingerprints[jit_fn] = source_fingerprint(jit_fn)
    return found


def _full_name(jit_fn: Any) -> str | None:
    """`module.qualname` of the function, or None when no later process could find it by that
    name (a function defined in a function, a lambda)."""
    fn = getattr(jit_fn, "fn", None)
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        return None
    return f"{module}.{qualname}"


# ----- recording ------------------------------------------------------------------------------

def _record(state: _Process, jit_fn: Any, spec: str) -> None:
    if is_tuned(jit_fn):
        return
    owner = _triton_tuner_above(sys._getframe(1))
    if owner is not None:
        seeded = seeding.of(owner)
        if seeded is None:
            return  # a candidate of Triton's own autotuner, compiled by it in every run
        if seeded.comparing:  # a candidate; its spec is kept in case it is the library's pick
            seeded.candidate_compiled(jit_fn, spec)
            return
    _record_warmup(state, jit_fn, spec)


def _record_pick(jit_fn: Any, spec: str) -> None:
    """A seeded tuner's pick, compiled while it compared its candidates (seeding.py)."""
    state = _current()
    if state.record:
        _record_warmup(state, jit_fn, spec)


def _record_warmup(state: _Process, jit_fn: Any, spec: str) -> None:
    name = _full_name(jit_fn)
    if name is None:
        return
    device, chain = _device(state)
    key = CacheKey(kernel=name, source_fingerprint=_fingerprint(state, jit_fn),
                   configs_fingerprint=WARMUP_CONFIGS,
                   problem={"specialization": hashlib.sha256(spec.encode()).hexdigest()[:16]},
                   device=device, toolchain=chain)
    from autotune_cache.version import __version__

    entry = pb.Entry(key=key.to_proto(),
                     result=pb.Result(triton_specialization=spec, tuner_version=__version__))
    state.cache.record_warmup(key, entry)


def _triton_tuner_above(frame: Any) -> Any:
    """The nearest of Triton's own autotuners (not ours: theirs are marked) running in `frame`
    or the frames above it, if any."""
    try:
        from triton.runtime.autotuner import Autotuner as TritonAutotuner
    except ImportError:
        return None
    for _ in range(_FRAMES):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if isinstance(owner, TritonAutotuner) and not is_tuned(owner.fn):
            return owner
        frame = frame.f_back
    return None


# ----- loading --------------------------------------------------------------------------------

def _scan(state: _Process,
          early: tuple[Device, tuple[tuple[str, str], ...]] | None = None) -> None:
    """Queue the warm-ups of every loaded kernel name that resolves, now, to a plain JIT
    function; the first call takes every loaded name, later ones only those still unresolved,
    and only when a module was imported since. `early`: the early start's device and toolchain
    (scan_early), instead of the current device's."""
    with process.current().made("warmups", _Current).lock:
        if not state.started:
            state.started = True
            try:
                state.pending = set(state.cache.loaded_kernels())
            except Exception as e:  # noqa: BLE001 - a damaged file: its lookups say so
                log.debug("autotune_cache: no warm-ups: %s", failure_reason(e))
                return
        if not state.pending or len(sys.modules) == state.modules_seen:
            return
        state.modules_seen = len(sys.modules)
        resolved = {name: _resolve(name) for name in state.pending}
        found = {name: fn for name, fn in resolved.items()
                 if fn is not _UNKNOWN and fn is not _IMPORTING}
        state.pending -= set(found)
        if any(fn is _IMPORTING for fn in resolved.values()):
            state.modules_seen = -1  # one still being imported: look again at the next scan
        queued = 0
        for name, jit_fn in sorted(found.items()):
            if jit_fn is None or is_tuned(jit_fn):
                continue
            device, chain = early or _device(state)
            try:
                fingerprint = _fingerprint(state, jit_fn)
            except Exception as e:  # noqa: BLE001 - its launch compiles as usual
                log.debug("autotune_cache: no warm-up of %s: %s", name, failure_reason(e))
                continue
            like = CacheKey(kernel=name, source_fingerprint=fingerprint,
                            configs_fingerprint=WARMUP_CONFIGS, problem={}, device=device,
                            toolchain=chain)
            queued += preload.warm_up(state.cache, jit_fn, like, compile_cache_only=state.record,
                                      early=early is not None)
        if queued:
            state.cache.stats.warmups_queued(queued)
            log.debug("autotune_cache: compiling %d plain JIT specializations ahead", queued)


_UNKNOWN = object()
_IMPORTING = object()


def _resolve(name: str) -> Any:
    """The plain JIT function `name` (module-qualified) names in a module already imported;
    None when it names something else (a tuner, a function gone), _UNKNOWN when no module
    holding it is imported yet, _IMPORTING when the deepest one is still being imported (its
    fingerprint and compile would miss what it defines below the function)."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is None:
            continue
        if still_importing(module):
            return _IMPORTING
        value: Any = module
        for attr in parts[cut:]:
            value = getattr(value, attr, None)
            if value is None:  # a submodule not imported yet, or a name gone: look again later
                return _UNKNOWN
        return _plain_jit(value, name)
    return _UNKNOWN


def _plain_jit(value: Any, name: str) -> Any:
    """`value` if it is a JIT function; the JIT function a library's launch wrapper holds as
    `.fn` (FlagGems' LibEntry), when it is the one `name` names; None for anything else, a
    tuner on the way included (its kernel's compiles are not warm-ups), unless it is seeded
    (seeding.py: the launch of its pick was recorded as a warm-up)."""
    if hasattr(value, "preload") and hasattr(value, "fn"):
        return value
    from triton.runtime.autotuner import Autotuner

    for _ in range(3):
        if value is None or (isinstance(value, Autotuner) and seeding.of(value) is None):
            return None  # a tuner's kernel, unless the tuner is seeded (its pick is recorded)
        value = getattr(value, "fn", None)
        if hasattr(value, "preload") and hasattr(value, "fn"):
            return value if _full_name(value) == name else None
    return None
