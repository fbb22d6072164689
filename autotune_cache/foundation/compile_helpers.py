"""Compile helpers: separate processes that fill Triton's compile cache with the loaded files'
recorded specializations while a pytest run is still starting.

Why processes. A loaded run (a CI sandbox with nothing warm but the committed file) spends its
first tests compiling the recorded winners, and Triton's compile holds the GIL for most of its
work: the compile-ahead's threads (preload.py) took 1.44 s per compile summed over 16 threads
against 0.31 s on one, so 23 compiles cost about 7 s of a Liger suite's tests wherever they ran
in the process. Helper processes compile in parallel for real, and they can start before the
process has imported anything: at `pytest_load_initial_conftests`, before the rootdir's
conftest.py files import the libraries (13 s of the Liger suite's start-up on an H100 host).

What a helper is, so that the user's process stays as it was:

* a fresh interpreter (`python -m autotune_cache.triton.compile_helper`), started with
  `subprocess` (fork and exec at once: no Python code, no fork handler, runs in between), its
  standard input and output closed and its standard error going to a log file in its own
  temporary directory: it holds none of the user's pipes and runs none of their signal
  handlers. Nothing is imported into the user's process to start one.
* it writes only what Triton itself writes (TRITON_CACHE_DIR, by Triton's atomic renames) and
  one empty marker file per specialization into its temporary directory.
* the same environment the tests will see. Helpers are started before the conftest.py files
  run, which may set TRITON_CACHE_DIR, TRITON_INTERPRET or CUDA_VISIBLE_DEVICES; at
  pytest_configure (after them) every variable that can change what a helper compiles or where
  (RELEVANT_PREFIXES, RELEVANT_NAMES) is compared with what the helpers were given, and on any
  difference they are stopped and started again with the new environment. Other variables a
  conftest or an import sets (a seed's, torch's CUDA_MODULE_LOADING) keep them running.
* started only where it can help: a GPU device node exists (/dev/nvidiactl, /dev/kfd),
  TRITON_INTERPRET is off, a results file is loaded, not in a pytest-xdist worker, and
  --autotune_compile_helpers is above 0 (0 by default: on an H100 they did not pay for
  themselves on Liger's suite, docs/decisions/0033-compile-helpers-at-start.md). Under
  pytest-xdist the controller starts them for the run and hands each worker `shared()`; a
  worker that loads the same files `attach`es to them (it waits for their compiles as the
  controller would, tells a live helper from a dead one by its pid, and never stops them),
  since the workers share the controller's TRITON_CACHE_DIR.
* a child that never exits on its own: once its work is done it replaces itself (exec, same
  pid) with a minimal interpreter that waits for the test process to end, so no helper turns
  into a zombie that the user's own `os.wait()` or SIGCHLD handler would collect.
* stopped (SIGTERM, then SIGKILL) at pytest_unconfigure, or at interpreter exit when the run
  failed before it configured, and its directory removed; a helper whose test process died
  (SIGKILL) notices within a compile or a second, removes the directory and exits. A stopped
  helper leaves no compiler files behind (SIGTERM unwinds it).
* at most MAX_WORK compiles among them, each at a lower CPU priority (compile_helper.py).
* owned by the pytest run that started it: a nested in-process run (pytester's inline runs)
  neither stops nor replaces it.

How the process uses them: the compile-ahead (preload.py) asks `settle` before each preload.
Every helper writes its plan (its share of the winners) before it imports anything heavy. For a
specialization in a plan, `settle` claims it (a link created only if none exists, the way the
helper claims what it starts): if the helper has not started it, the process keeps the claim
and compiles it itself, as it always did, and the helper skips it; if the helper has, the
process waits for its marker, so the preload that follows loads the binary from the compile
cache. The process never waits for a compile that no helper is running: not for one no helper
planned, not for one a dead helper planned, not once the helpers' environment is no longer the
process's, and not at all after SETTLE_TIMEOUT_S without the awaited marker (then it stops
asking). A helper's failure therefore costs nothing but its CPU time.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from autotune_cache.foundation import env, machine

log = logging.getLogger(__name__)

HELPER_MODULE = "autotune_cache.triton.compile_helper"
JOB_FILE = "job.json"
PLAN_PREFIX = "plan-"
LOG_PREFIX = "helper-"
CLAIM_SUFFIX = ".claim"
PROCESS_CLAIM = "process"
# Longest the process waits for one helper's compile before it stops asking helpers at all (a
# compile is seconds; a hung helper must not hang the run).
SETTLE_TIMEOUT_S = 120.0
_POLL_S = 0.005
# The variables whose change (by a conftest.py) restarts the helpers: Triton's own settings
# (where its cache is, whether it interprets, what its compiles' hash covers), which GPUs are
# visible, and where the compile cache defaults to (~/.triton, sandbox.py's $TEST_TMPDIR).
# Not more: libraries change others as they import (torch sets CUDA_MODULE_LOADING, a test
# utility PYTHONHASHSEED), and a restart throws away the helpers' head start.
RELEVANT_PREFIXES = ("TRITON_",)
RELEVANT_NAMES = frozenset({"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                            "ROCR_VISIBLE_DEVICES", "HOME", "TEST_TMPDIR"})
GPU_NODES = machine.GPU_NODES
HELPER_DROPS = frozenset({env.AUTOTUNE_FLAGS, env.RULES_AUTOTUNE_MACRO_FLAGS})


def digest(specialization: str) -> str:
    """The marker name of one recorded specialization (Triton's JSON text)."""
    return hashlib.sha256(specialization.encode()).hexdigest()[:32]


def relevant(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of an environment whose change restarts the helpers."""
    return {k: v for k, v in environ.items()
            if k in RELEVANT_NAMES or k.startswith(RELEVANT_PREFIXES)}


def claim(directory: Path, name: str, who: str) -> bool:
    """Claim the compile of marker `name` for `who` (a helper's index, or PROCESS_CLAIM):
    whether this call made the claim. The claim file appears whole or not at all (a link to a
    file already written), and only once."""
    tmp = directory / f"{name}{CLAIM_SUFFIX}.{who}.{os.getpid()}"
    tmp.write_text(who)
    try:
        os.link(tmp, directory / f"{name}{CLAIM_SUFFIX}")
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


@dataclass
class _Helpers:
    directory: Path
    files: tuple[str, ...]
    variables: dict[str, str]
    owner: object
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    planners: dict[str, int] | None = None  # {digest: helper index}, once every plan is read
    given_up: bool = False
    pids: list[int] = field(default_factory=list)  # attached (an xdist worker): no procs

    @property
    def count(self) -> int:
        return len(self.procs) or len(self.pids)

    def alive(self, index: int) -> bool:
        if self.procs:
            return self.procs[index].poll() is None
        return _pid_alive(self.pids[index])

    def plans(self) -> dict[str, int] | None:
        """Which helper planned each digest, or None while a live helper has not written its
        plan yet (a helper that exited without one planned nothing)."""
        if self.planners is not None:
            return self.planners
        found: dict[str, int] = {}
        for i in range(self.count):
            path = self.directory / f"{PLAN_PREFIX}{i}"
            try:
                found.update((name, i) for name in json.loads(path.read_text()))
            except FileNotFoundError:
                if self.alive(i):
                    return None
            except (OSError, ValueError, TypeError) as e:
                log.debug("autotune_cache: compile helper plan %s: %s", path, e)
        self.planners = found
        return found

    def usable(self) -> bool:
        """Whether the process may still wait for these helpers: not given up, and the
        process's environment still the one they compile for (a fixture may change
        TRITON_CACHE_DIR after they started)."""
        return not self.given_up and relevant(env.environ()) == self.variables


def _pid_alive(pid: int) -> bool:
    """Whether process `pid` (another process's child) runs: it exists and is no zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc: the signal's answer
    return state not in ("Z", "X")


_lock = threading.Lock()
_current: _Helpers | None = None
_atexit_registered = False


def wanted(files: Sequence[str | os.PathLike[str]], count: int) -> bool:
    """Whether helpers would start for these files in this process now (module doc)."""
    return (count > 0 and bool(files) and not env.triton_interpret()
            and env.xdist_worker() is None and machine.gpu_node_present(GPU_NODES))


def start(files: Sequence[str | os.PathLike[str]], count: int, owner: object = None) -> bool:
    """Start `count` helpers compiling the winners of `files` for the run `owner` (already
    running for the same files and environment: kept; otherwise those `owner` started are
    stopped first; another run's are left alone and none start). Whether helpers are running
    afterwards. Never raises: a helper that cannot start is logged at debug level, and the run
    compiles as it would without."""
    with _lock:
        try:
            return _start_locked(files, count, owner)
        except Exception as e:  # noqa: BLE001 - helpers are an optimisation, never an error
            log.debug("autotune_cache: no compile helpers: %s: %s", type(e).__name__, e)
            if _current is not None and _current.owner is owner:
                _stop_locked()
            return False


def _start_locked(files: Sequence[str | os.PathLike[str]], count: int, owner: object) -> bool:
    global _current, _atexit_registered
    if _current is not None and _current.owner is not owner:
        return False  # a nested run inside another's: the outer run's helpers stay its own
    if not wanted(files, count):
        _stop_locked()
        return False
    paths = tuple(str(Path(p).resolve()) for p in files)
    now = relevant(env.environ())
    if _current is not None:
        if _current.files == paths and _current.variables == now \
                and len(_current.procs) == count:
            return True
        changed = sorted(k for k in {*now, *_current.variables}
                         if now.get(k) != _current.variables.get(k))
        log.debug("autotune_cache: compile helpers restart (changed: %s)",
                  ", ".join(changed) or "their files or count")
        _stop_locked()
    if not _atexit_registered:
        atexit.register(stop)  # a run that fails before pytest_configure never unconfigures
        _atexit_registered = True
    # TMPDIR read as it is now, not through tempfile's cache: a conftest.py setting TMPDIR
    # after this must still see it take effect.
    directory = Path(tempfile.mkdtemp(prefix="autotune-compile-helpers-",
                                      dir=env.get("TMPDIR") or "/tmp"))
    helpers = _current = _Helpers(directory, paths, now, owner)
    sys_path = [os.fspath(p) for p in sys.path if isinstance(p, (str, os.PathLike))]
    (directory / JOB_FILE).write_text(json.dumps(
        {"files": list(paths), "of": count, "sys_path": sys_path, "parent": os.getpid()}))
    for i in range(count):
        with open(directory / f"{LOG_PREFIX}{i}.log", "wb") as err:
            helpers.procs.append(subprocess.Popen(
                [sys.executable, "-m", HELPER_MODULE, str(directory), str(i)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                close_fds=True, env=_helper_environ()))
    log.debug("autotune_cache: %d compile helpers for %s in %s", count, ", ".join(paths),
              directory)
    return True


def shared() -> dict[str, object] | None:
    """What a pytest-xdist worker needs to `attach` to the helpers this process started (None
    without any): their directory, files, environment and pids, as plain data."""
    helpers = _current
    if helpers is None or not helpers.procs:
        return None
    return {"directory": str(helpers.directory), "files": list(helpers.files),
            "variables": dict(helpers.variables), "pids": [p.pid for p in helpers.procs]}


def attach(info: object, files: Sequence[str | os.PathLike[str]], owner: object = None
           ) -> bool:
    """In a pytest-xdist worker: use the controller's helpers (`info`, its `shared()`) for
    the run `owner`, when they compile the same `files`. Whether attached. Never raises: an
    unusable `info` attaches nothing, and the worker compiles as it would without."""
    global _current
    with _lock:
        try:
            if _current is not None or not isinstance(info, dict) or not files:
                return False
            paths = tuple(str(Path(p).resolve()) for p in files)
            if tuple(info["files"]) != paths:
                return False
            _current = _Helpers(Path(info["directory"]), paths, dict(info["variables"]), owner,
                                pids=[int(pid) for pid in info["pids"]])
            return True
        except Exception as e:  # noqa: BLE001 - helpers are an optimisation, never an error
            log.debug("autotune_cache: not attached to compile helpers: %s: %s",
                      type(e).__name__, e)
            return False


def _helper_environ() -> dict[str, str]:
    """The process's environment without our own flags: a helper compiles, and engages
    nothing (no routing, no cache) that AUTOTUNE_FLAGS would ask of the package's import."""
    return {k: v for k, v in env.environ().items() if k not in HELPER_DROPS}


def stop(owner: object = None) -> None:
    """Stop the helpers still running and remove their directory (only those `owner`
    started, when given)."""
    with _lock:
        if owner is None or (_current is not None and _current.owner is owner):
            _stop_locked()


def _stop_locked() -> None:
    global _current
    helpers, _current = _current, None
    if helpers is None or not helpers.procs:
        return  # none, or attached: the controller's to stop
    try:
        for proc in helpers.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in helpers.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if log.isEnabledFor(logging.DEBUG):
            for i, proc in enumerate(helpers.procs):
                with contextlib.suppress(OSError):
                    tail = (helpers.directory / f"{LOG_PREFIX}{i}.log").read_text(
                        errors="replace")
                    log.debug("autotune_cache: compile helper %d exited %s:\n%s", i,
                              proc.returncode, tail[-2000:])
    finally:
        shutil.rmtree(helpers.directory, ignore_errors=True)


def settle(specialization: str) -> bool:
    """Before the process compiles `specialization`: when a live helper planned it, claim it,
    and if the helper claimed it first, wait for its compile (module doc); whether a helper
    compiled it (the process's compile is then a compile-cache hit). Never raises."""
    helpers = _current
    if helpers is None or not helpers.usable():
        return False
    name = digest(specialization)
    try:
        index = _planner(helpers, name)
        if index is None or claim(helpers.directory, name, PROCESS_CLAIM):
            return False  # no helper's, or not started by one: the process compiles it
        if (helpers.directory / f"{name}{CLAIM_SUFFIX}").read_text() == PROCESS_CLAIM:
            return False  # this or another test process (an xdist worker) claimed it first
        return _await(helpers, name, index)
    except OSError as e:  # the directory went away (the run stopped them): compile here
        log.debug("autotune_cache: compile helpers: %s", e)
        return False


def _planner(helpers: _Helpers, name: str) -> int | None:
    """The live helper that planned `name`, waiting for the plans while a live helper has not
    written its own (before it imports anything heavy); None when none did."""
    started = time.monotonic()
    while True:
        plans = helpers.plans()
        if plans is not None:
            index = plans.get(name)
            return index if index is not None and helpers.alive(index) else None
        if _expired(helpers, started):
            return None
        time.sleep(_POLL_S)


def _await(helpers: _Helpers, name: str, index: int) -> bool:
    """Wait for helper `index`'s marker of `name` while it runs."""
    marker = helpers.directory / name
    started = time.monotonic()
    while not marker.exists():
        if not helpers.alive(index) or _expired(helpers, started):
            return False
        time.sleep(_POLL_S)
    return marker.stat().st_size == 0  # empty: compiled; "-": left to the process


def _expired(helpers: _Helpers, started: float) -> bool:
    """Whether to stop waiting: the run replaced them, or this wait passed SETTLE_TIMEOUT_S
    (then no later call waits for them either)."""
    if _current is not helpers or helpers.given_up:
        return True
    if time.monotonic() - started > SETTLE_TIMEOUT_S:
        helpers.given_up = True
        log.debug("autotune_cache: compile helpers gave no answer in %.0f s; the process "
                  "compiles on its own from now on", SETTLE_TIMEOUT_S)
        return True
    return False


def planned(specialization: str) -> bool:
    """Whether a live helper has `specialization` in its plan (a speculative preload is then
    left to it). Never raises."""
    helpers = _current
    if helpers is None or not helpers.usable():
        return False
    try:
        return _planner(helpers, digest(specialization)) is not None
    except OSError:
        return False


def running() -> bool:
    """Whether any helper is still running (for tests and diagnostics)."""
    helpers = _current
    return helpers is not None and any(helpers.alive(i) for i in range(helpers.count))
