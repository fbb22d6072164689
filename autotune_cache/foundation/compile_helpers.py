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
  TRITON_INTERPRET is off, a results file is loaded, not in a pytest-xdist worker (the
  controller starts them for the run: the workers share its TRITON_CACHE_DIR), and
  --autotune_compile_helpers is above 0 (it is 0 by default until a GPU run measures the
  design as it stands: docs/decisions/0033-compile-helpers-at-start.md).
* stopped (SIGTERM, then SIGKILL) at pytest_unconfigure if still running, and its directory
  removed; a helper whose test process died (SIGKILL, no unconfigure) sees its parent change
  after its current compile, removes the directory and exits.
* at most MAX_WORK compiles among them, each at a lower CPU priority (compile_helper.py).

How the process uses them: the compile-ahead (preload.py) asks `settle` before each preload.
When a helper has the specialization in its plan (every helper writes its share's list before
compiling anything), `settle` waits for its marker, so the preload that follows loads the
binary from the compile cache instead of compiling it a second time; a specialization no helper
planned, a helper that died, or SETTLE_TIMEOUT_S passing, and the process compiles it itself,
as it always did. A helper's failure therefore costs nothing but its CPU time.
"""

from __future__ import annotations

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

from autotune_cache.foundation import env

log = logging.getLogger(__name__)

HELPER_MODULE = "autotune_cache.triton.compile_helper"
JOB_FILE = "job.json"
PLAN_PREFIX = "plan-"
LOG_PREFIX = "helper-"
# Longest a preload waits for a helper's marker (a compile is seconds; a hung helper must not
# hang the run).
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
GPU_NODES = ("/dev/nvidiactl", "/dev/kfd")
HELPER_DROPS = frozenset({env.AUTOTUNE_FLAGS, env.RULES_AUTOTUNE_MACRO_FLAGS})


def digest(specialization: str) -> str:
    """The marker name of one recorded specialization (Triton's JSON text)."""
    return hashlib.sha256(specialization.encode()).hexdigest()[:32]


def relevant(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of an environment whose change restarts the helpers."""
    return {k: v for k, v in environ.items()
            if k in RELEVANT_NAMES or k.startswith(RELEVANT_PREFIXES)}


@dataclass
class _Helpers:
    directory: Path
    files: tuple[str, ...]
    variables: dict[str, str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    planned: set[str] | None = None  # every plan's digests, once all are read

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def plans(self) -> set[str] | None:
        """Every helper's planned digests, or None while a live helper has not written its
        plan yet (a helper that exited without one planned nothing)."""
        if self.planned is not None:
            return self.planned
        found: set[str] = set()
        for i, proc in enumerate(self.procs):
            path = self.directory / f"{PLAN_PREFIX}{i}"
            try:
                found.update(json.loads(path.read_text()))
            except FileNotFoundError:
                if proc.poll() is None:
                    return None
            except (OSError, ValueError, TypeError) as e:
                log.debug("autotune_cache: compile helper plan %s: %s", path, e)
        self.planned = found
        return found


_lock = threading.Lock()
_current: _Helpers | None = None


def wanted(files: Sequence[str | os.PathLike[str]], count: int) -> bool:
    """Whether helpers would start for these files in this process now (module doc)."""
    return (count > 0 and bool(files) and not env.triton_interpret()
            and env.xdist_worker() is None and any(os.path.exists(p) for p in GPU_NODES))


def start(files: Sequence[str | os.PathLike[str]], count: int) -> bool:
    """Start `count` helpers compiling the winners of `files` (already running for the same
    files and environment: kept; otherwise those running are stopped first). Whether helpers
    are running afterwards. Never raises: a helper that cannot start is logged at debug level,
    and the run compiles as it would without."""
    global _current
    paths = tuple(str(Path(p).resolve()) for p in files)
    with _lock:
        now = relevant(env.environ())
        if _current is not None and _current.files == paths and _current.variables == now \
                and len(_current.procs) == count:
            return True
        if _current is not None:
            changed = sorted(k for k in {*now, *_current.variables}
                             if now.get(k) != _current.variables.get(k))
            log.debug("autotune_cache: compile helpers restart (changed: %s)",
                      ", ".join(changed) or "their files or count")
        _stop_locked()
        if not wanted(paths, count):
            return False
        try:
            directory = Path(tempfile.mkdtemp(prefix="autotune-compile-helpers-"))
            (directory / JOB_FILE).write_text(json.dumps(
                {"files": list(paths), "of": count, "sys_path": list(sys.path),
                 "parent": os.getpid()}))
            helpers = _Helpers(directory, paths, now)
            _current = helpers
            for i in range(count):
                with open(directory / f"{LOG_PREFIX}{i}.log", "wb") as err:
                    helpers.procs.append(subprocess.Popen(
                        [sys.executable, "-m", HELPER_MODULE, str(directory), str(i)],
                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                        close_fds=True, env=_helper_environ()))
        except OSError as e:
            log.debug("autotune_cache: no compile helpers: %s", e)
            _stop_locked()
            return False
        log.debug("autotune_cache: %d compile helpers for %s in %s", count, ", ".join(paths),
                  directory)
        return True


def _helper_environ() -> dict[str, str]:
    """The process's environment without our own flags: a helper compiles, and engages
    nothing (no routing, no cache) that AUTOTUNE_FLAGS would ask of the package's import."""
    return {k: v for k, v in env.environ().items() if k not in HELPER_DROPS}


def stop() -> None:
    """Stop the helpers still running and remove their directory."""
    with _lock:
        _stop_locked()


def _stop_locked() -> None:
    global _current
    helpers, _current = _current, None
    if helpers is None:
        return
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
                tail = (helpers.directory / f"{LOG_PREFIX}{i}.log").read_text(errors="replace")
                log.debug("autotune_cache: compile helper %d exited %s:\n%s", i,
                          proc.returncode, tail[-2000:])
    shutil.rmtree(helpers.directory, ignore_errors=True)


def settle(specialization: str) -> bool:
    """Wait until a helper has compiled `specialization` into Triton's compile cache, when one
    planned to and is still running (at most SETTLE_TIMEOUT_S); whether a helper compiled it
    (its compile is then a compile-cache hit). Never raises."""
    helpers = _current
    if helpers is None:
        return False
    marker = helpers.directory / digest(specialization)
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        if marker.exists():
            return _compiled(marker)
        plans = helpers.plans()
        if plans is not None and marker.name not in plans:
            return False
        if not helpers.running() or time.monotonic() > deadline or _current is not helpers:
            return marker.exists() and _compiled(marker)
        time.sleep(_POLL_S)


def planned(specialization: str) -> bool:
    """Whether a running helper has `specialization` in its plan (waiting, while they run, for
    every helper's plan: written before any compile). Never raises."""
    helpers = _current
    if helpers is None:
        return False
    name = digest(specialization)
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        plans = helpers.plans()
        if plans is not None:
            return name in plans
        if not helpers.running() or time.monotonic() > deadline or _current is not helpers:
            return False
        time.sleep(_POLL_S)


def _compiled(marker: Path) -> bool:
    """A marker is empty when its helper compiled the specialization, "-" when it left it."""
    try:
        return marker.stat().st_size == 0
    except OSError:
        return False


def running() -> bool:
    """Whether any helper is still compiling (for tests and diagnostics)."""
    helpers = _current
    return helpers is not None and helpers.running()
