"""Every result-set format, ours first then XLA's: load a path or bytes in whichever it is."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from autotune_cache.errors import CorruptFileError, VersionMismatchError
from autotune_cache.formats import RESULTS_EXTENSIONS, XlaFileError
from autotune_cache.foundation.safeio import NotRegularFileError, kind_of
from autotune_cache.resultsets.base import Format, ResultSet
from autotune_cache.resultsets.ours import OurFormat
from autotune_cache.xla import formats as xla_formats


def formats() -> list[Format]:
    """Every registered format, ours first."""
    return [OurFormat(), *xla_formats()]


def _unknown(what: Path | str, fmts: list[Format]) -> CorruptFileError:
    return CorruptFileError(
        f"{what}: not a results file or cache directory of any known format "
        f"({', '.join(f.name for f in fmts)})"
    )


def load_any(path: Path | str) -> ResultSet:
    """Load a file or directory in whichever registered format it is."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise CorruptFileError(f"{path}: no such file or directory") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise CorruptFileError(f"{path}: symbolic link loop (too many levels of symbolic "
                                   "links); fix or remove the link.") from None
        raise CorruptFileError(f"{path}: cannot be examined ({e.strerror or e})") from None
    if not stat.S_ISDIR(mode) and not stat.S_ISREG(mode):
        raise NotRegularFileError(f"{path}: is {kind_of(mode)}, not a regular file or a "
                                  "directory; give a results file or a cache directory.")
    fmts = formats()
    failures: list[CorruptFileError] = []
    for fmt in fmts:
        if fmt.sniff(path):
            try:
                return fmt.load(path)
            except CorruptFileError as e:
                failures.append(e)
    if stat.S_ISREG(mode):
        # Our own parser says best what is wrong with a file that is ours but damaged (a missing
        # version line, a newer version), even when another format's sniffer claimed it.
        try:
            return OurFormat().load(path)
        except XlaFileError:
            if failures:  # XLA's parser already said what is wrong with XLA's file
                raise failures[0] from None
            raise
        except VersionMismatchError:
            raise
        except CorruptFileError as e:
            if failures:
                raise failures[0] from None
            if path.suffix.lower() in RESULTS_EXTENSIONS:
                raise e from None
    raise _unknown(path, fmts)


def loads(data: bytes, suffix: str) -> ResultSet:
    """The bytes of a results file named `*<suffix>`, in whichever registered format they are
    (text or binary by the extension, as for files)."""
    fmts = formats()
    for fmt in fmts:
        if fmt.sniff_bytes(data, suffix):
            return fmt.loads(data, suffix)
    if suffix.lower() in RESULTS_EXTENSIONS:
        return OurFormat().loads(data, suffix)
    raise _unknown(f"<bytes>{suffix}", fmts)
