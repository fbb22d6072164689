"""Reading files that someone else may have planted: regular files only, never blocking, bounded.

read_regular, through which every results file, cache-directory entry and XLA file is read:
- opens with O_NONBLOCK (a FIFO or a device at the path cannot hang the reader) and checks with
  fstat on the open descriptor that it is a regular file (no check-then-open race);
- with `follow_symlinks=False` (entries inside a shared directory), opens with O_NOFOLLOW: a
  symlink at the path is refused, never followed. Files the user names are followed;
- reads at most `limit` bytes (limits.py), refusing anything larger without reading it all.
Every failure is a CorruptFileError that names the path and says what to do, except a missing file
(FileNotFoundError), which callers word themselves. (docs/decisions/0002-planted-files.md)
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from autotune_cache.errors import CorruptFileError
from autotune_cache.foundation.limits import describe

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def kind_of(mode: int) -> str:
    """`a FIFO (named pipe)`, `a directory`, ... for a non-regular file's st_mode."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


class NotRegularFileError(CorruptFileError):
    """A path that should hold a results file holds a directory, FIFO, socket, device or link."""


def open_regular(path: Path | str, *, follow_symlinks: bool = True) -> int:
    """An O_RDONLY descriptor of the regular file at `path` (the caller closes it)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise NotRegularFileError(f"{path}: is a directory, not a regular file") from None
    except PermissionError as e:
        raise CorruptFileError(
            f"{path}: cannot be read (permission denied); ask its owner to make it readable "
            "(chmod a+r) or point the flag at a copy you can read.") from e
    except OSError as e:
        if e.errno == errno.ELOOP:
            if follow_symlinks:
                raise CorruptFileError(f"{path}: symbolic link loop (too many levels of "
                                       "symbolic links); fix or remove the link.") from None
            raise NotRegularFileError(
                f"{path}: is a symbolic link; entries of a shared cache directory are never "
                "followed through links (planted by another user?). Remove it; it will be "
                "re-tuned.") from None
        raise CorruptFileError(f"{path}: cannot be opened ({e.strerror or e})") from e
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(
                f"{path}: is {kind_of(mode)}, not a regular file; only regular files are read "
                "(remove it, or point the flag at a results file).")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path | str, limit: int, *, follow_symlinks: bool = True,
                 hint: str = "") -> bytes:
    """The bytes of the regular file at `path`, refusing files larger than `limit` bytes."""
    fd = open_regular(path, follow_symlinks=follow_symlinks)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        data = b"" if size > limit else f.read(limit + 1)
    if size > limit or len(data) > limit:
        raise CorruptFileError(
            f"{path}: larger than the {describe(limit)} limit for this kind of file "
            f"({max(size, len(data)):,} bytes); is this really a results file?"
            + (f" {hint}" if hint else ""))
    return data


def lexists_kind(path: Path) -> str | None:
    """What is at `path` without following a link: None when nothing, `a regular file`, or the
    kind of the thing in the way (`a symbolic link`, `a directory`, ...)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return kind_of(mode)
