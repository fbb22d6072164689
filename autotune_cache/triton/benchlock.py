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
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

LOCK_DIR_ENV = "AUTOTUNE_BENCH_LOCK_DIR"
DEFAULT_TIMEOUT_S = 600.0


def default_lock_dir() -> Path:
    """<tmp>/autotune_cache_bench_locks: shared by every user's tests on this machine."""
    return Path(tempfile.gettempdir()) / "autotune_cache_bench_locks"


def lock_dir() -> Path:
    """Where device locks live: $AUTOTUNE_BENCH_LOCK_DIR, else default_lock_dir().

    Processes must agree on this directory to exclude each other; under a Bazel sandbox that
    hides /tmp, set AUTOTUNE_BENCH_LOCK_DIR to a path allowed with --sandbox_writable_path."""
    configured = os.environ.get(LOCK_DIR_ENV)
    if configured:
        return Path(configured)
    return default_lock_dir()


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
        print(f"autotune_cache: benchmarking without the device lock ({directory}: {e.strerror})",
              file=sys.stderr)
        yield False
        return
    lock = FileLock(str(directory / f"bench-{identity}.lock"), mode=0o666)
    try:
        lock.acquire(timeout=timeout)
    except Timeout:
        print(f"autotune_cache: device lock {lock.lock_file} still held after {timeout:.0f} s; "
              "benchmarking anyway (timings may be skewed)", file=sys.stderr)
        yield False
        return
    except OSError as e:
        print(f"autotune_cache: benchmarking without the device lock ({e})", file=sys.stderr)
        yield False
        return
    try:
        yield True
    finally:
        lock.release()
