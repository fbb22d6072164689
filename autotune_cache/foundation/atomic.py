"""Atomic file replacement, so that no reader ever sees a partial file."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

TEMP_PREFIX = ".tmp-"


def temp_name(target: Path) -> Path:
    """A unique temp-file path beside `target`; readers ignore names with TEMP_PREFIX."""
    return target.with_name(f"{TEMP_PREFIX}{target.name}.{os.getpid()}.{secrets.token_hex(4)}")


def current_umask() -> int:
    """The process umask, read without changing it (os.umask would, racing other threads)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)  # no /proc: the classic read-and-restore
    os.umask(mask)
    return mask


def write_atomic(target: Path, data: bytes) -> None:
    """Replace `target` with `data` in one step: temp file, flush, fsync, rename. An OSError
    names `target` (a failed write() alone names no file: `[Errno 28] No space left`)."""
    try:
        _write_atomic(target, data)
    except OSError as e:
        if e.filename is not None:
            raise
        raise OSError(e.errno, e.strerror or str(e), str(target)) from e


def _write_atomic(target: Path, data: bytes) -> None:
    tmp = temp_name(target)
    # 0o666 minus the umask, like any plain open(): a shared cache never locks out its users.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:
        dir_fd = os.open(target.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
