"""What XLA's two file formats share: a header message plus a repeated entry field, kept raw.

Both `xla.autotuner.AutotuneCache` (field 3, `entries`) and the legacy `xla.AutotuneResults`
(field 4, `results`) are "a header plus entries". Entries keep the exact bytes they were read
from (docs/decisions/0021-xla-entries-kept-raw.md), so whatever this library does not interpret
(fields from a newer XLA, map order) is written back byte-for-byte by binary saves; a binary
file is written as the header's bytes followed by one length-delimited field per entry, which is
what protobuf itself would write. `HeaderSet` holds what the two result sets share: selecting,
saving (file, directory or the per-fusion file it came from) and leftovers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from google.protobuf import message

from autotune_cache.formats import is_text_path, is_text_suffix
from autotune_cache.foundation.atomic import write_atomic
from autotune_cache.resultsets.base import data_path, is_directory_path
from autotune_cache.xla import codec, layout, wire

H = TypeVar("H", bound=message.Message)
S = TypeVar("S", bound="HeaderSet")


def header_only(header: H, entries_field: str) -> H:
    """A copy of `header` without its entries."""
    out = type(header)()
    out.CopyFrom(header)
    out.ClearField(entries_field)
    return out


def raw_entries(data: bytes, number: int, count: int) -> list[bytes | None]:
    """The bytes of each of the `count` entries (field `number`) protobuf parsed from `data`;
    all None when they cannot be matched up (cannot happen for data protobuf accepted)."""
    fields = wire.top_level_fields(data, limit=None) or []
    found = [f.value for f in fields if f.number == number and f.wire_type == wire.LEN]
    if len(found) != count:
        return [None] * count
    return [v if isinstance(v, bytes) else None for v in found]


def parse_file(data: bytes, cls: type[H], path: Path, *, what: str, entries_field: str,
               number: int) -> tuple[H, list[tuple[Any, bytes | None]]]:
    """A results file's header (entries cleared) and its (entry, raw bytes) pairs; text files
    (by `path`'s extension) have no raw bytes."""
    text = is_text_path(path)
    msg = codec.parse(data, cls, path, text=text, what=what)
    entries = getattr(msg, entries_field)
    raws = [None] * len(entries) if text else raw_entries(data, number, len(entries))
    return header_only(msg, entries_field), list(zip(entries, raws, strict=True))


def encode(header: message.Message, number: int,
           entries: Iterable[tuple[message.Message, bytes | None]]) -> bytes:
    """Binary file bytes: the header, then each entry (its raw bytes when it has them)."""
    return header.SerializeToString(deterministic=True) + b"".join(
        wire.encode_len_field(number, raw if raw is not None
                              else entry.SerializeToString(deterministic=True))
        for entry, raw in entries
    )


@dataclass
class HeaderSet:
    """The result-set side of one XLA file or per-fusion directory: `items` by id, the file's
    header (entries cleared), damaged-file notes, and where it was read from.

    Subclasses set ENTRIES_FIELD/ENTRIES_NUMBER and give `_file_entries` (the entries of a
    results file, with their raw bytes), `_save_entry_file` and `_save_dir`."""

    ENTRIES_FIELD: ClassVar[str] = ""
    ENTRIES_NUMBER: ClassVar[int] = 0

    items: dict[str, Any]
    header: Any = None
    damaged: list[str] = field(default_factory=list)
    origin: Path | None = None
    # Set when the entries were read from one per-fusion entry file of a directory.
    entry_file: Path | None = None

    def header_copy(self) -> Any:
        return header_only(self.header, self.ENTRIES_FIELD)

    def select(self: S, ids: set[str]) -> S:
        """Only the entries with these ids."""
        kept = {i: item for i, item in self.items.items() if i in ids}
        return type(self)(kept, self.header_copy(), origin=self.origin,
                          entry_file=self.entry_file)

    def without(self: S, ids: set[str]) -> S:
        """Every entry but those with these ids."""
        return self.select(set(self.items) - ids)

    def _file_entries(self, path: Path) -> list[tuple[message.Message, bytes | None]]:
        raise NotImplementedError

    def _save_entry_file(self, path: Path) -> None:
        raise NotImplementedError

    def _save_dir(self, root: Path) -> None:
        raise NotImplementedError

    def dumps(self, suffix: str, *, path: Path | None = None) -> bytes:
        """The bytes of a results file named `*<suffix>` (`path` names it in errors)."""
        path = data_path(suffix) if path is None else path
        entries = self._file_entries(path)
        if is_text_suffix(suffix):
            msg = self.header_copy()
            getattr(msg, self.ENTRIES_FIELD).extend(entry for entry, _ in entries)
            return codec.to_text_checked(msg, path).encode("utf-8")
        return encode(self.header, self.ENTRIES_NUMBER, entries)

    def save(self, path: Path) -> None:
        """Write a text file, binary file or per-fusion directory, as the path says."""
        path = Path(path)
        if self.entry_file is not None and path.resolve() == self.entry_file.resolve():
            self._save_entry_file(path)
            return
        if is_directory_path(path):
            self._save_dir(path)
            return
        data = self.dumps(path.suffix, path=path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data)

    def leftovers(self, older_than: float = layout.STALE_TEMP_SECONDS) -> list[Path]:
        """Abandoned temp files of a per-fusion directory (none for a single file)."""
        if self.origin is None or not self.origin.is_dir():
            return []
        return layout.temp_files(self.origin, older_than)
