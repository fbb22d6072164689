"""The device-wide benchmarking lock: one process at a time times kernels on a given GPU.

Decision (see docs/triton.md): benchmarking takes a machine-local file lock named after the GPU's
UUID, so concurrent test processes that tune on the same GPU do not skew each other's timings
(`bazel test` runs many tests at once). Compilation stays outside the lock and in parallel. The
lock is advisory: it orders our tuners, not unrelated work on the GPU. It is skipped under the CPU
interpreter (its timings do not rank GPU configs anyway) and when a fake benchmark is installed.
A process waits at most `timeout` seconds, then benchmarks anyway with a warning, so a stuck peer
can never hang a test run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from autotune_cache import env

log = logging.getLogger("autotune_cache")

LOCK_DIR_ENV = env.AUTOTUNE_BENCH_LOCK_DIR
DEFAULT_TIMEOUT_S = 600.0


def default_lock_dir() -> Path:
    """<tmp>/autotune_cache_bench_locks: shared by every user's tests on this machine."""
    return Path(tempfile.gettempdir()) / "autotune_cache_bench_locks"


def lock_dir() -> Path:
    """Where device locks live: $AUTOTUNE_BENCH_LOCK_DIR, else default_lock_dir().

    Processes must agree on this directory to exclude each other; under a Bazel sandbox that
    hides /tmp, set AUTOTUNE_BENCH_LOCK_DIR to a path allowed with --sandbox_writable_path."""
    return env.bench_lock_dir() or default_lock_dir()


@contextlib.contextmanager
def device_bench_lock(identity: str, timeout: float = DEFAULT_TIMEOUT_S) -> Iterator[bool]:
    """Hold the benchmarking lock of device `identity`; yields whether the lock is held."""
    try:
        from filelock import FileLock, Timeout
    except ImportError:
        yield False
        return
    directory = lock_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        # Only our own default directory is made world-writable (with the sticky bit), so other
        # users' tests can lock it too; a configured directory's permissions are the user's.
        if directory == default_lock_dir() and directory.stat().st_uid == os.getuid():
            directory.chmod(0o1777)
    except OSError as e:
        log.warning("autotune_cache: benchmarking without the device lock (%s: %s)", directory,
                    e.strerror)
        yield False
        return
    lock = FileLock(str(directory / f"bench-{identity}.lock"), mode=0o666)
    try:
        lock.acquire(timeout=timeout)
    except Timeout:
        log.warning("autotune_cache: device lock %s still held after %.0f s; benchmarking "
                    "anyway (timings may be skewed)", lock.lock_file, timeout)
        yield False
        return
    except OSError as e:
        log.warning("autotune_cache: benchmarking without the device lock (%s)", e)
        yield False
        return
    try:
        yield True
    finally:
        lock.release()
