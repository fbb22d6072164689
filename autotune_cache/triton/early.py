"""Compiling ahead from the start: the loaded winners and warm-ups compile as the program defines
their kernels, before its first launch.

Why. A CI sandbox has nothing warm but the committed file, which lists every kernel and
specialization the suite compiles. Started at the first launch (preload.py), those compiles ran
while the first tests waited: on an H100, Liger-Kernel's loaded suite spent 5.7 s in its tests
against 0.9 s for Triton with a warm compile cache, after 10 s of conftest.py imports during
which nothing compiled. Started here, they run during those imports.

When. `start(settings)` is asked for by startup.py for a configuration that loads files, known
before the first launch (the pytest plugin's, at pytest_load_initial_conftests, before
conftest.py files import the libraries; AUTOTUNE_FLAGS', when `autotune_cache.triton` is
imported) and runs right after the program's own `import triton`, never before (a conftest.py
may set TRITON_INTERPRET first). It starts only where it can help: --autotune_compile_at_start
(off by default: decision 0035), a GPU device node, Triton not interpreting, no remote compile
cache (whose binaries the process reads instead).

What, without the GPU. A read-only view of the loaded files (a `Cache` of those files alone,
so nothing is configured for the program) and the compile-ahead started for it
(`preload.start_early`): each kernel our tuners drive queues its winners once it is decorated
and its module is imported (engine.py calls `decorated`; a kernel compiled or fingerprinted
while its module still runs would miss what the module defines below it), and `scan` queues
the warm-ups of the plain JIT functions of the modules imported so far, at each decoration and
when pytest has collected. The device is the one the
loaded entries name, among the GPU models the kernel driver lists (detached.py `pick`), and the
compiles go into Triton's compile cache only, for that device's target, without starting the
GPU driver (detached.py). At the first launch the real device confirms the guess, or the
compile-ahead starts again for the real one (preload.py `_ahead_for`), and a launch whose
kernel is still compiling waits for it.

What it costs the program: CPU time on the pool's threads (nicer than the program's) during its
imports, and the main thread's share of the GIL that the compiles take
(docs/decisions/0035-compiling-ahead-from-the-start.md).
"""

from __future__ import annotations

import functools
import logging
import sys
from typing import Any

from autotune_cache.cache import Cache
from autotune_cache.config.flags import Settings
from autotune_cache.errors import AutotuneCacheError
from autotune_cache.foundation.key import Device
from autotune_cache.triton import detached, preload, scheduler, warmups
from autotune_cache.triton.device import interpreter_active
from autotune_cache.triton.scheduler import Priority

log = logging.getLogger(__name__)

# How many loaded kernels `scan` looks at to name the device, when no tuner's entries have.
DEVICE_PROBES = 8
# The most launchers built ahead of their kernels (`_get_ready`): distinct signatures.
LAUNCHERS_MAX = 128


def start(settings: Settings) -> None:
    """Start the compile-ahead of `settings`' loaded files now (Triton is imported), unless one
    has started, Triton interprets, or the program has started CUDA already (then the first
    launch starts it, for the device it runs on). Never raises: a file that does not load is
    reported by the configured cache."""
    if interpreter_active() or preload.ahead() is not None or _cuda_started():
        return
    try:
        view = Cache(Settings(load_from=settings.load_from,
                              compile_workers=settings.compile_workers,
                              switch_interval_us=settings.switch_interval_us))
    except Exception as e:  # noqa: BLE001 - the configured cache reports it
        log.debug("autotune_cache: no compile ahead at start: %s", e)
        return
    if preload.start_early(view, stale_too=settings.dump_to is not None):
        scan()
        _get_ready()


def _get_ready() -> None:
    """Once the device is named (`scan`): what every compile for it needs and what no kernel
    is needed for, on the pool before any kernel is decorated. Triton primed for the target
    (its source hash, the backend's ptxas version: about 1 s, on the first compile's path
    otherwise), its CUDA utilities module, and the launcher of each recorded signature
    (about 0.4 s of the host compiler each, after each kernel's compile otherwise; Triton 3.6,
    whose launchers are built per signature: 3.9's one generic launcher is not). A library
    whose kernels are defined at its tests' collection (Liger-Kernel's) gives its compiles
    nothing earlier to start from; these start during conftest.py's imports."""
    ahead = preload.ahead()
    if ahead is None or not ahead.early or ahead.device is None or ahead.target is None:
        return
    try:
        scheduler.scheduler().enqueue(scheduler.CompileJob(
            functools.partial(_launchers, ahead.cache, ahead.device, ahead.target),
            Priority.AHEAD, label="ready", target=ahead.target))
    except Exception as e:  # noqa: BLE001 - it runs inside the program's imports
        log.debug("autotune_cache: no ready-up ahead: %s", e)


def _launchers(cache: Cache, device: Device, target: Any) -> int:
    """The job `_get_ready` queues (Triton is primed by then: the job names the target):
    queue one build per distinct launcher the loaded entries of `device` describe, within
    the compile-ahead's caps, at the lowest priority (every kernel's compile goes first; no
    launch waits for one), a pytest-xdist worker from its own offset into the list (the
    workers share the compile cache); how many. Never raises: only a head start."""
    try:
        detached.prime(target)
        if not detached.per_signature_launchers():
            return 0
        launchers = sorted(_recorded_launchers(cache, device))[:LAUNCHERS_MAX]
    except Exception as e:  # noqa: BLE001 - the kernels' own compiles build them
        log.debug("autotune_cache: no launchers built ahead: %s", e)
        return 0
    preload.queue_rotated([
        scheduler.CompileJob(functools.partial(detached.build_launcher_of, launcher),
                             Priority.SPECULATIVE, label="launcher", target=target)
        for launcher in launchers])
    return len(launchers)


def _recorded_launchers(cache: Cache, device: Device) -> set[str]:
    """The distinct launchers (detached.py `launcher_of`) of the loaded entries of `device`,
    reading no more of the files than the compile-ahead's caps (about 0.3 s of parsing per MB
    on the CPU machine, during the program's imports; a kernel with more is skipped)."""
    launchers: set[str] = set()
    entries_left, bytes_left = preload.AHEAD_SCAN_LIMIT, preload.AHEAD_SCAN_BYTES
    for name in sorted(cache.loaded_kernels()):
        if len(launchers) >= LAUNCHERS_MAX:
            break
        entries, unparsed = cache.loaded_cost(name)
        if entries > entries_left or unparsed > bytes_left:
            continue  # too much to read for a head start: its kernel's compile builds it
        entries_left, bytes_left = entries_left - entries, bytes_left - unparsed
        try:
            loaded = cache.loaded_entries(name, max_entries=entries, max_unparsed_bytes=unparsed)
        except AutotuneCacheError:
            continue  # a damaged entry: the lookup that needs it says so
        for key, entry in loaded:
            spec = entry.result.triton_specialization
            launcher = detached.launcher_of(spec) if spec and key.device == device else None
            if launcher is not None:
                launchers.add(launcher)
    return launchers


def _cuda_started() -> bool:
    """Whether the program has started CUDA through torch (nothing is imported to ask)."""
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001 - a torch without CUDA
        return False


def decorated(tuner: Any) -> None:
    """A tuner was decorated: the plain JIT functions defined with it too."""
    del tuner
    scan()


def scan() -> None:
    """Queue the loaded warm-ups of the plain JIT functions defined so far, for the early start's
    device (named now from the loaded entries, if no tuner's did); nothing without an early
    start or once a launch has confirmed it (the warm-ups' own scan goes on from there). Never
    raises: it runs inside the program's imports."""
    try:
        _scan()
    except Exception as e:  # noqa: BLE001 - only a head start
        log.debug("autotune_cache: scanning for compiles ahead failed: %s", e)


def _scan() -> None:
    ahead = preload.ahead()
    if ahead is None or not ahead.early:
        return
    preload.retry_waiting()
    found = None
    if ahead.device is None:
        for name in sorted(ahead.cache.loaded_kernels())[:DEVICE_PROBES]:
            found = preload.early_device(name)
            if found is not None:
                break
    else:
        found = ahead.device, ahead.toolchain
    if found is not None:
        warmups.scan_early(ahead.cache, *found)
