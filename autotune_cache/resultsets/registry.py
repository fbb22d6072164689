"""Every result-set format, ours first then XLA's: load a path or bytes in whichever it is."""

from __future__ import annotations

from pathlib import Path

from autotune_cache.errors import CorruptFileError
from autotune_cache.formats import RESULTS_EXTENSIONS
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
    if not path.exists():
        raise CorruptFileError(f"{path}: no such file or directory")
    fmts = formats()
    for fmt in fmts:
        if fmt.sniff(path):
            return fmt.load(path)
    if path.is_file() and path.suffix.lower() in RESULTS_EXTENSIONS:
        # Give the error of our own parser, which says what is wrong with the file.
        return OurFormat().load(path)
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
