"""XLA's legacy autotune results: `version: 3` AutotuneResults files and per-fusion directories.

A file is one `xla.AutotuneResults` (text or binary by extension, as XLA decides): entries of
device model string, canonical HLO, AutotuneResult and key version. A legacy per-fusion
directory holds one text `xla.AutotuneResult` per fusion, named
`<base64url(sha256("<key model='DEVICE', hlo='HLO', version=N>"))>.textproto`, with XLA's temp
files in `tmp/`. Those files do not store their key: only the name's hash identifies them, so a
directory can be inspected and diffed, but not converted back to a file (whose entries need keys)
unless the entries came from a file.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import message

from autotune_cache.errors import CorruptFileError
from autotune_cache.formats import is_text_path, read_capped
from autotune_cache.foundation.atomic import TEMP_PREFIX, write_atomic
from autotune_cache.resultsets.base import FileFormat, ResultSet, Row, require_same_format
from autotune_cache.xla import codec, layout, wire
from autotune_cache.xla.container import HeaderSet, parse_file
from autotune_cache.xla.proto import xla_autotuning_pb2 as pb
from autotune_cache.xla.summary import hlo_summary, legacy_result_summary, legacy_time_ms

FORMAT_NAME = "xla-legacy"
WHAT = "XLA legacy autotune results file (xla.AutotuneResults)"
ENTRY_WHAT = "XLA legacy per-fusion cache entry (xla.AutotuneResult)"
# The AutotuneResults.version XLA writes and reads (autotuner_util.cc kVersion).
FILE_VERSION = 3
ENTRY_SUFFIX = ".textproto"
_RESULTS_FIELD = 4  # AutotuneResults.results
_SNIFF_BYTES = 64 * 1024
_NAME = re.compile(r"^[A-Za-z0-9_-]{43}$")  # unpadded base64url of a sha256 digest
_RESULT_START = re.compile(
    r"\A(?:\s*#[^\n]*\n)*\s*(?:scratch_bytes|run_time|failure|conv|gemm|triton|cuda_conv_plan"
    r"|custom_kernel_fusion|algorithm|other)\s*[:{]"
)
_TEXT_START = re.compile(
    r"\A(?:\s*#[^\n]*\n)*\s*(?:version\s*:\s*\d+\s*)?results\s*\{"
    r"|\A(?:\s*#[^\n]*\n)*\s*version\s*:\s*[23]\s*\Z"
)


def cache_file_stem(device: str, hlo: str, version: int) -> str:
    """The per-fusion file name XLA uses for this key (without `.textproto`)."""
    key = f"<key model='{device}', hlo='{hlo}', version={version}>"
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass
class LegacyItem:
    """One result; `entry` holds its key when known (read from a file), else None."""

    result: pb.AutotuneResult
    entry: pb.AutotuneResults.Entry | None = None
    raw: bytes | None = None  # the Entry's bytes, when read from a binary file
    raw_text: str | None = None  # the per-fusion file's text, when read from a directory
    source: str = ""


def _item_id(item: LegacyItem, fallback: str) -> str:
    e = item.entry
    return cache_file_stem(e.device, e.hlo, e.version) if e is not None else fallback


@dataclass
class XlaLegacySet(HeaderSet):
    """The entries of one legacy AutotuneResults file or legacy per-fusion directory
    (`entry_file`: read from one DIR/<base64 sha256>.textproto)."""

    ENTRIES_FIELD = "results"
    ENTRIES_NUMBER = _RESULTS_FIELD

    items: dict[str, LegacyItem]
    header: pb.AutotuneResults = field(default_factory=lambda: pb.AutotuneResults(
        version=FILE_VERSION))
    format_name: str = FORMAT_NAME

    def rows(self) -> list[Row]:
        """One Row per entry; entries without a key (directory files) have empty device."""
        out = []
        for ident, item in self.items.items():
            e = item.entry
            out.append(Row(
                id=ident,
                kernel=f"fusion {ident[:12]}",
                problem=hlo_summary(e.hlo) if e is not None else "(key not stored)",
                device=e.device if e is not None else "",
                toolchain=f"version={e.version}" if e is not None else "",
                config=legacy_result_summary(item.result),
                time_ms=legacy_time_ms(item.result),
                tuned_at="",
                # The result alone: the id already encodes device, HLO and version, so a file's
                # entry and the matching per-fusion file compare equal.
                payload=item.result.SerializeToString(deterministic=True),
                source=item.source,
            ))
        return out

    def merge(self, other: ResultSet, prefer_other: set[str]) -> XlaLegacySet:
        """Our entries plus other's; on a shared id ours win unless the id is in prefer_other."""
        require_same_format(self, other)
        assert isinstance(other, XlaLegacySet)
        merged = dict(self.items)
        for ident, item in other.items.items():
            if ident not in merged:
                merged[ident] = item
            elif ident in prefer_other:
                # Keep a known key even when the preferred result came from a directory file.
                mine = merged[ident]
                merged[ident] = item if item.entry is not None or mine.entry is None else \
                    LegacyItem(item.result, _with_result(mine.entry, item.result),
                               source=item.source)
        return XlaLegacySet(merged, self.header_copy(), origin=self.origin)

    def _file_entries(self, path: Path) -> list[tuple[message.Message, bytes | None]]:
        keyless = [i for i, item in self.items.items() if item.entry is None]
        if keyless:
            raise CorruptFileError(
                f"{path}: cannot write {len(keyless)} entries (e.g. {keyless[0]}.textproto) to a "
                "results file: XLA's legacy per-fusion files do not store their device and HLO, "
                "which a results file needs. Write another per-fusion directory instead, or "
                "re-dump the results with --xla_gpu_dump_autotune_results_to."
            )
        return [(item.entry, item.raw) for item in self.items.values()]

    def _save_entry_file(self, path: Path) -> None:
        # Back onto the per-fusion file it came from: one entry, or none (pruned: remove it).
        if len(self.items) > 1 or (self.items and path.stem not in self.items):
            raise CorruptFileError(
                f"{path}: a legacy per-fusion file holds exactly its own entry; write a "
                "directory instead."
            )
        if not self.items:
            path.unlink(missing_ok=True)
            return
        ident, item = next(iter(self.items.items()))
        write_atomic(path, _entry_text(ident, item, path).encode("utf-8"))

    def _save_dir(self, root: Path) -> None:
        contents = {ident: _entry_text(ident, item, root / f"{ident}{ENTRY_SUFFIX}")
                    for ident, item in self.items.items()}
        root.mkdir(parents=True, exist_ok=True)
        for ident, text in contents.items():
            write_atomic(root / f"{ident}{ENTRY_SUFFIX}", text.encode("utf-8"))

    def problems(self) -> list[str]:
        """Damaged files, a file version XLA would refuse, entries without device or HLO."""
        out = list(self.damaged)
        where = str(self.origin) if self.origin else "?"
        if self.origin is not None and not self.origin.is_dir() and \
                self.header.version != FILE_VERSION:
            out.append(f"{where}: AutotuneResults version {self.header.version}; XLA (JAX 0.11.x) "
                       f"only loads version {FILE_VERSION}. Re-dump the results with that XLA.")
        for ident, item in self.items.items():
            e = item.entry
            if e is not None and (not e.device or not e.hlo):
                out.append(f"{where}: entry {ident} has no device or hlo; XLA can never match "
                           "it. Prune it.")
        return out

def _entry_text(ident: str, item: LegacyItem, path: Path) -> str:
    """A per-fusion file's text: as read, or printed the way XLA prints it (Any left packed)."""
    if item.raw_text is not None:
        return item.raw_text
    return codec.to_text_checked(item.result, path, expand_any=False)


def _with_result(entry: pb.AutotuneResults.Entry, result: pb.AutotuneResult
                 ) -> pb.AutotuneResults.Entry:
    out = pb.AutotuneResults.Entry()
    out.CopyFrom(entry)
    out.result.CopyFrom(result)
    return out


class XlaLegacyFormat(FileFormat):
    """Format object for XLA's legacy results files and legacy per-fusion directories."""

    name = FORMAT_NAME
    SNIFF_BYTES = _SNIFF_BYTES

    def sniff_dir(self, path: Path) -> bool:
        """Base64url-named .textproto files."""
        return bool(_entry_files(path))

    def load_dir(self, path: Path) -> XlaLegacySet:
        return _load_dir(path)

    def sniff_data(self, head: bytes, path: Path) -> bool:
        """Cheap test: text's first tokens, binary's fields."""
        if is_text_path(path):
            text = head.decode("utf-8", errors="replace")
            return bool(_TEXT_START.match(text) or _is_entry_file(path, text))
        return _looks_like_binary(head)

    def load(self, path: Path) -> XlaLegacySet:
        result = super().load(path)
        assert isinstance(result, XlaLegacySet)
        return result

    def parse(self, data: bytes, path: Path) -> XlaLegacySet:
        """One file's bytes: an AutotuneResults, or one per-fusion result file."""
        if is_text_path(path) and _is_entry_file(path, data.decode("utf-8", errors="replace")):
            result = codec.parse(data, pb.AutotuneResult, path, text=True, what=ENTRY_WHAT)
            item = LegacyItem(result, raw_text=data.decode("utf-8"), source=str(path))
            return XlaLegacySet({path.stem: item}, origin=path, entry_file=path)
        header, entries = parse_file(data, pb.AutotuneResults, path, what=WHAT,
                                     entries_field="results", number=_RESULTS_FIELD)
        items: dict[str, LegacyItem] = {}
        damaged: list[str] = []
        for entry, raw in entries:
            item = LegacyItem(entry.result, entry, raw)
            ident = _item_id(item, "")
            if ident in items:
                damaged.append(f"{path}: the entry for {hlo_summary(entry.hlo) or ident} on "
                               f"{entry.device!r} appears more than once; the first one is kept")
                continue
            items[ident] = item
        return XlaLegacySet(items, header, damaged, origin=path)


def _is_entry_file(path: Path, text: str) -> bool:
    """Whether this is one legacy per-fusion file: an XLA name and AutotuneResult text."""
    return (path.suffix == ENTRY_SUFFIX and bool(_NAME.match(path.stem))
            and bool(_RESULT_START.match(text)))


def _entry_files(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir()
                  if p.is_file() and p.suffix == ENTRY_SUFFIX and _NAME.match(p.stem)
                  and not p.name.startswith(TEMP_PREFIX))


def _looks_like_binary(head: bytes) -> bool:
    fields = wire.top_level_fields(head)
    if not fields:
        return False
    allowed = {(1, wire.VARINT), (_RESULTS_FIELD, wire.LEN)}
    if any((f.number, f.wire_type) not in allowed for f in fields):
        return False
    first = next((f for f in fields if f.number == _RESULTS_FIELD), None)
    if first is None:
        return any(f.number == 1 and f.value in (2, FILE_VERSION) for f in fields)
    entry = pb.AutotuneResults.Entry()
    try:
        entry.ParseFromString(first.value)
    except Exception:  # noqa: BLE001 - any parse failure just means "not this format"
        return False
    return bool(entry.hlo)


def _load_dir(root: Path) -> XlaLegacySet:
    items: dict[str, LegacyItem] = {}
    damaged: list[str] = []
    for file in _entry_files(root):
        try:
            data = read_capped(file, layout.MAX_ENTRY_BYTES, follow_symlinks=False)
            result = codec.parse(data, pb.AutotuneResult, file, text=True, what=ENTRY_WHAT)
        except (CorruptFileError, OSError) as e:
            damaged.append(str(e))
            continue
        items[file.stem] = LegacyItem(result, raw_text=data.decode("utf-8"), source=str(file))
    return XlaLegacySet(items, damaged=damaged, origin=root)
