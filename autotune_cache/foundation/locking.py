"""Cross-process file locks that another user of a shared directory cannot turn into an attack.

Lock files live in directories other accounts may write, so anyone there can plant a symlink,
a hard link or a directory where a lock file goes
(docs/decisions/0019-lock-files-in-shared-directories.md). So:

- filelock >= 3.20.3 is required; an older filelock found at run time is never called: the lock
  is skipped with a warning that names the release to install;
- a lock directory is used only when it is a real directory (not a link) owned by this account or
  by root; one that another account owns is never trusted, and a private `<name>-<uid>` directory
  next to it is used instead;
- before filelock opens a lock file, whatever is at its path must be nothing or a plain regular
  file with one link; anything else (symlink, hard link, directory, FIFO) is refused;
- every failure is a LockError naming the lock file and the fix. Callers then work without the
  lock (a key may be tuned twice; nothing is lost), because a lock is an optimisation.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autotune_cache.errors import LockError
from autotune_cache.foundation.atomic import current_umask

# filelock is imported by `prepare()`, not with this module: a process that only loads a
# committed file takes no lock and does not pay for it (about 9 ms of a test process's start,
# bench/process_cost.py). What can take a lock at exit (a dump file, a cache directory's tier)
# calls prepare() when it is constructed, so nothing is imported at interpreter shutdown; a lock
# taken while running (the benchmark lock, prune) imports it at its first use.


@functools.cache
def _filelock() -> Any:
    """The filelock module, imported once; None when it is not installed."""
    try:
        import filelock
    except ImportError:  # pragma: no cover - depends on the install
        return None
    return filelock


def prepare() -> None:
    """Import filelock now, so that a lock taken later, at exit too, needs no import."""
    _filelock()


PATCHED_FILELOCK = (3, 20, 3)


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def filelock_problem() -> str | None:
    """Why the installed filelock must not be used, or None when it is a patched release."""
    filelock = _filelock()
    if filelock is None:
        return ("filelock is not installed; pip install 'filelock>=3.20.3' to share a cache "
                "directory between processes")
    version = getattr(filelock, "__version__", "0")
    if _version_tuple(version) < PATCHED_FILELOCK:
        return (f"filelock {version} follows symlinks planted at lock paths (CVE-2025-68146, "
                "CVE-2026-22701); pip install 'filelock>=3.20.3'")
    return None


def _trust_problem(path: Path) -> str | None:
    """Why `path` cannot serve as our lock directory (after creating it if missing), or None."""
    try:
        os.mkdir(path)
    except FileExistsError:
        pass
    except OSError as e:
        return f"{path}: cannot be created ({e.strerror or e})"
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"{path}: cannot be examined ({e.strerror or e})"
    if stat.S_ISLNK(st.st_mode):
        return f"{path}: is a symbolic link, not a directory"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path}: is not a directory"
    if st.st_uid not in (os.geteuid(), 0):
        return f"{path}: belongs to another account (uid {st.st_uid}), so it is not trusted"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"{path}: is not writable by this account"
    return None


def trusted_lock_dir(parent: Path, name: str) -> Path:
    """`parent/name` when it is (or can be made) a directory this account or root owns and this
    account can write; else the private `parent/name-<uid>`; else LockError naming both."""
    problems = []
    for candidate in (parent / name, parent / f"{name}-{os.geteuid()}"):
        problem = _trust_problem(candidate)
        if problem is None:
            return candidate
        problems.append(problem)
    raise LockError("no usable lock directory: " + "; ".join(problems)
                    + ". Remove what is in the way, or ask the directory's owner to.")


def private_lock_dir(name: str) -> Path:
    """A lock directory no other account can take: `~/.cache/autotune_cache/<name>` (made
    0700), since predictable names under the shared temp directory can be pre-created by anyone
    (lock squatting). Where the home directory is missing or unusable, trusted_lock_dir under
    the temp directory (`<name>`, else `<name>-<uid>`); LockError when neither can be used."""
    try:
        base = Path.home() / ".cache" / "autotune_cache"
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        if _trust_problem(base) is None:
            candidate = base / name
            if _trust_problem(candidate) is None:
                return candidate
    except (OSError, RuntimeError):  # no home directory (RuntimeError from Path.home)
        pass
    return trusted_lock_dir(Path(tempfile.gettempdir()), name)


class Liveness:
    """A directory's owner is alive while it holds `<dir>/alive` locked (flock, released by the
    kernel when the process and every child that inherited the descriptor are gone), so
    leftovers of killed runs can be told from live ones and swept."""

    NAME = "alive"

    def __init__(self, directory: Path) -> None:
        # Locked under a private name, then renamed into place: `alive` never exists unlocked,
        # so a sweeper probing it (is_dead) can neither take a starting owner for a dead one
        # nor make the owner's own lock fail by holding its probe at that moment.
        private = directory / f".{self.NAME}.{os.getpid()}.{threading.get_ident()}"
        self._fd = os.open(private, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.replace(private, directory / self.NAME)
        except OSError:
            os.close(self._fd)
            with contextlib.suppress(OSError):
                os.unlink(private)
            raise

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @classmethod
    def is_dead(cls, directory: Path) -> bool:
        """Whether `directory` has an owner marker that no live process holds."""
        try:
            fd = os.open(directory / cls.NAME, os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        finally:
            os.close(fd)
        return True


def sweep_dead(parent: Path, pattern: str, *, unless: str = "") -> list[Path]:
    """Remove this account's directories `parent/<pattern>` whose owner died (Liveness), except
    those holding a file named `unless`; returns what was removed. Never raises."""
    removed = []
    with contextlib.suppress(OSError):
        for candidate in parent.glob(pattern):
            with contextlib.suppress(OSError):
                st = os.lstat(candidate)
                if (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid()
                        or (unless and (candidate / unless).exists())
                        or not Liveness.is_dead(candidate)):
                    continue
                shutil.rmtree(candidate, ignore_errors=True)
                removed.append(candidate)
    return removed


def _check_lock_path(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise LockError(f"{path}: cannot be examined ({e.strerror or e})") from e
    if stat.S_ISLNK(st.st_mode):
        raise LockError(f"{path}: is a symbolic link, not a lock file (planted by someone who "
                        "can write the directory?); it is never followed. Remove it.")
    if not stat.S_ISREG(st.st_mode):
        raise LockError(f"{path}: is not a regular file, so it is not a lock file; remove it.")
    if st.st_nlink > 1:
        raise LockError(f"{path}: has {st.st_nlink} hard links, so it may be another file "
                        "linked in by someone who can write the directory; remove it.")


@contextlib.contextmanager
def file_lock(path: Path, timeout: float, *, mode: int | None = None) -> Iterator[bool]:
    """Hold the exclusive lock file `path`: yields True once held, False when another process
    still holds it after `timeout` seconds; LockError when it cannot be taken safely.
    `mode` is the new lock file's permission bits (default: 0o666 minus the umask)."""
    problem = filelock_problem()
    if problem is not None:
        raise LockError(f"{path}: not locked: {problem}")
    _check_lock_path(path)
    filelock = _filelock()
    FileLock, Timeout = filelock.FileLock, filelock.Timeout  # noqa: N806

    lock = FileLock(str(path), mode=0o666 & ~current_umask() if mode is None else mode)
    try:
        lock.acquire(timeout=timeout)
    except Timeout:
        yield False
        return
    except OSError as e:
        raise LockError(f"{path}: cannot take the lock ({e.strerror or e}); check the lock "
                        "directory's owner and permissions.") from e
    try:
        yield True
    finally:
        with contextlib.suppress(OSError):
            lock.release()


def remove_unheld(path: Path) -> bool:
    """Delete the lock file `path` only while holding it ourselves, so a lock that a live
    process holds (a tuning of any length) is never deleted under it. Returns whether the file
    is gone; False when another process holds it, or it cannot be taken safely (a planted link
    is left for the fix LockError names)."""
    try:
        with file_lock(path, timeout=0) as held:
            if held:
                path.unlink(missing_ok=True)
            return held
    except LockError:
        return False
