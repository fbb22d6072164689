"""The device-wide benchmarking lock: one process at a time times kernels on a given GPU.

Benchmarking takes a machine-local file lock named after the GPU's UUID, so concurrent test
processes that tune on the same GPU do not skew each other's timings. Compilation stays outside
the lock. The lock is advisory (it orders our tuners, not unrelated work on the GPU), skipped
under the CPU interpreter and when a fake benchmark is installed. A process waits at most
`timeout` seconds, then benchmarks anyway with a warning, so a stuck peer never hangs a test run.
(docs/decisions/0009-device-benchmark-lock.md)
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path

from autotune_cache.errors import LockError
from autotune_cache.foundation import env
from autotune_cache.foundation.locking import file_lock, trusted_lock_dir

log = logging.getLogger("autotune_cache")

LOCK_DIR_ENV = env.AUTOTUNE_BENCH_LOCK_DIR
DEFAULT_TIMEOUT_S = 600.0


def default_lock_dir() -> Path:
    """<tmp>/autotune_cache_bench_locks: one directory for every user's tests on this machine
    when root created it (see lock_dir); otherwise each account uses its own next to it."""
    return Path(tempfile.gettempdir()) / "autotune_cache_bench_locks"


def lock_dir() -> Path:
    """Where device locks live: $AUTOTUNE_BENCH_LOCK_DIR, else default_lock_dir(), when that
    directory is owned by this account or by root; else a private `<dir>-<uid>` next to it
    (locking.trusted_lock_dir: a lock directory another account owns is never trusted, since
    it could plant links at lock paths). LockError when neither can be used.

    Processes must agree on this directory to exclude each other: for one lock shared by every
    account, have root create it (`install -d -m 1777 -o root /tmp/autotune_cache_bench_locks`).
    Under a Bazel sandbox that hides /tmp, set AUTOTUNE_BENCH_LOCK_DIR to a path allowed with
    --sandbox_writable_path."""
    wanted = env.bench_lock_dir() or default_lock_dir()
    try:
        wanted.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise LockError(f"{wanted.parent}: cannot be created ({e.strerror or e})") from e
    return trusted_lock_dir(wanted.parent, wanted.name)


@contextlib.contextmanager
def device_bench_lock(identity: str, timeout: float = DEFAULT_TIMEOUT_S) -> Iterator[bool]:
    """Hold the benchmarking lock of device `identity`; yields whether the lock is held. Any
    problem (locking.py) or a peer holding it past `timeout` means benchmarking without it,
    with a warning: timings may be skewed, nothing fails."""
    with contextlib.ExitStack() as stack:
        try:
            path = lock_dir() / f"bench-{identity}.lock"
            # 0o666: in a shared (root-created, sticky) directory other accounts open it too.
            held = stack.enter_context(file_lock(path, timeout, mode=0o666))
        except LockError as e:
            log.warning("autotune_cache: benchmarking without the device lock (%s)", e)
            held = False
        else:
            if not held:
                log.warning("autotune_cache: device lock %s still held after %.0f s; "
                            "benchmarking anyway (timings may be skewed)", path, timeout)
        yield held
