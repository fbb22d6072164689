"""What the two XLA per-fusion directory layouts have in common: temp files and safe names."""

from __future__ import annotations

from pathlib import Path

from autotune_cache.errors import CorruptFileError
from autotune_cache.foundation.atomic import TEMP_PREFIX
from autotune_cache.foundation.limits import MAX_ENTRY_BYTES
from autotune_cache.store.dirstore import STALE_TEMP_SECONDS, untouched_for

# XLA renames finished entries out of <dir>/tmp/; files left there belong to killed writers.
XLA_TEMP_DIR = "tmp"
# One entry is a few hundred bytes; anything far larger than MAX_ENTRY_BYTES is not an XLA entry.
__all__ = ["MAX_ENTRY_BYTES", "XLA_TEMP_DIR", "safe_component", "temp_files"]


def temp_files(root: Path, older_than: float = STALE_TEMP_SECONDS) -> list[Path]:
    """Temp files abandoned by killed writers: XLA's in tmp/, ours (TEMP_PREFIX) anywhere."""
    candidates: set[Path] = set()
    tmp = root / XLA_TEMP_DIR
    if tmp.is_dir():
        candidates.update(p for p in tmp.iterdir() if p.is_file())
    candidates.update(p for p in root.rglob(f"{TEMP_PREFIX}*") if p.is_file())
    return untouched_for(older_than, candidates)


def safe_component(name: str, what: str, origin: str) -> str:
    """`name` if it can be one path component of a cache directory; else a clear error.

    Entry keys come from file contents, so a crafted file could otherwise write outside the
    directory (`../..`) when converted to a per-fusion directory.
    """
    if (not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name
            or name == XLA_TEMP_DIR or name.startswith(TEMP_PREFIX)):
        raise CorruptFileError(
            f"{origin}: {what} {name!r} cannot be used as a directory or file name in a "
            "per-fusion cache directory; the entry is damaged or not from XLA. Remove it "
            "(autotune-cache prune) or write a single results file instead."
        )
    return name
