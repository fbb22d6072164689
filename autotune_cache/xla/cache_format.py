"""XLA's newer autotune cache format (JAX 0.11.x): AutotuneCache files and per-fusion directories.

A file is one `xla.autotuner.AutotuneCache` (text or binary by extension, as XLA decides). A
directory holds one binary `AutotuneEntry` per fusion at
`<device>/[<explicit_version>/]<hlo_fingerprint>.pb`, with XLA's temp files in `tmp/`.

Entries keep the exact bytes they were read from, so whatever this module does not interpret
(fields from a newer XLA, map order) is written back byte-for-byte by binary saves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import message

from autotune_cache.errors import CorruptFileError
from autotune_cache.formats import is_text_path, read_capped
from autotune_cache.foundation.atomic import TEMP_PREFIX, write_atomic
from autotune_cache.resultsets.base import (
    FileFormat,
    ResultSet,
    Row,
    merge_by_id,
    require_same_format,
)
from autotune_cache.xla import codec, layout, wire
from autotune_cache.xla.container import HeaderSet, parse_file
from autotune_cache.xla.proto import xla_autotuner_pb2 as pb
from autotune_cache.xla.summary import backend_name, config_summary

FORMAT_NAME = "xla"
WHAT = "XLA autotune cache file (xla.autotuner.AutotuneCache)"
ENTRY_SUFFIX = ".pb"
_ENTRIES_FIELD = 3  # AutotuneCache.entries
_SNIFF_BYTES = 64 * 1024
_TEXT_START = re.compile(
    r"\A(?:\s*#[^\n]*\n)*\s*(?:entries\s*\{\s*(?:key|value)\s*\{|device_scope\s*:"
    r"|explicit_version_scope\s*:)"
)


def entry_id(entry: pb.AutotuneEntry) -> str:
    """Identity of an entry, its whole key: `device[/explicit_version]/hlo@codegen[+opts]`."""
    t, env = entry.key.target, entry.key.environment
    where = "/".join(p for p in (t.device, t.explicit_version, t.hlo_fingerprint) if p)
    ident = f"{where}@{env.codegen_version}"
    opts = env.codegen_options_fingerprint
    return f"{ident}+{opts}" if opts else ident


def entry_sort_key(entry: pb.AutotuneEntry) -> tuple[str, ...]:
    """XLA's own order for dumps: device, explicit version, fingerprint, then environment."""
    t, e = entry.key.target, entry.key.environment
    return (t.device, t.explicit_version, t.hlo_fingerprint, e.codegen_version,
            e.codegen_options_fingerprint)


def entry_relpath(entry: pb.AutotuneEntry, origin: str) -> Path:
    """Where XLA's DirectoryStore keeps this entry, relative to the cache directory."""
    t = entry.key.target
    device = layout.safe_component(t.device, "device", origin)
    name = layout.safe_component(t.hlo_fingerprint, "hlo_fingerprint", origin) + ENTRY_SUFFIX
    if t.explicit_version:
        version = layout.safe_component(t.explicit_version, "explicit_version", origin)
        return Path(device) / version / name
    return Path(device) / name


@dataclass
class CacheItem:
    """One entry, with the bytes it was read from (None once built or read from text)."""

    entry: pb.AutotuneEntry
    raw: bytes | None = None
    source: str = ""

    def binary(self) -> bytes:
        """The entry's serialized bytes: the original ones when it was read from binary."""
        if self.raw is not None:
            return self.raw
        return self.entry.SerializeToString(deterministic=True)


@dataclass
class XlaCacheSet(HeaderSet):
    """The entries of one XLA AutotuneCache file or per-fusion directory (`entry_file`: read
    from one DIR/<device>/<hlo>.pb)."""

    ENTRIES_FIELD = "entries"
    ENTRIES_NUMBER = _ENTRIES_FIELD

    items: dict[str, CacheItem]
    header: pb.AutotuneCache = field(default_factory=pb.AutotuneCache)
    format_name: str = FORMAT_NAME

    def rows(self) -> list[Row]:
        """One Row per entry, in file order."""
        out = []
        for ident, item in self.items.items():
            e = item.entry
            t, env, value = e.key.target, e.key.environment, e.value
            toolchain = [f"codegen={env.codegen_version}"]
            if env.codegen_options_fingerprint:
                toolchain.append(f"options={env.codegen_options_fingerprint}")
            if value.optimal_backend_version:
                backend = backend_name(value.optimal_config.backend)
                toolchain.append(f"{backend}={value.optimal_backend_version}")
            out.append(Row(
                id=ident,
                kernel=t.hlo_fingerprint,
                problem=f"explicit_version={t.explicit_version}" if t.explicit_version else "",
                device=t.device,
                toolchain=" ".join(toolchain),
                config=config_summary(value.optimal_config),
                time_ms=None,
                tuned_at="",
                payload=e.SerializeToString(deterministic=True),
                source=item.source,
            ))
        return out

    def merge(self, other: ResultSet, prefer_other: set[str]) -> XlaCacheSet:
        """Our entries plus other's; on a shared id ours win unless the id is in prefer_other."""
        require_same_format(self, other)
        assert isinstance(other, XlaCacheSet)
        merged = merge_by_id(self.items, other.items, prefer_other)
        ordered = sorted(merged.items(), key=lambda kv: entry_sort_key(kv[1].entry))
        return XlaCacheSet(dict(ordered), self.header_copy(), origin=self.origin)

    def _file_entries(self, path: Path) -> list[tuple[message.Message, bytes | None]]:
        return [(item.entry, item.raw) for item in self.items.values()]

    def _save_entry_file(self, path: Path) -> None:
        # Back onto the per-fusion file it came from: one entry, or none (pruned: remove it).
        if len(self.items) > 1:
            raise CorruptFileError(
                f"{path}: a per-fusion entry file holds exactly one entry, not "
                f"{len(self.items)}; write a results file or a directory instead."
            )
        if not self.items:
            path.unlink(missing_ok=True)
            return
        write_atomic(path, next(iter(self.items.values())).binary())

    def _save_dir(self, root: Path) -> None:
        # Check every name before writing anything, so a bad entry leaves the directory as it was.
        targets: dict[Path, str] = {}
        for ident, item in self.items.items():
            rel = entry_relpath(item.entry, item.source or str(self.origin or root))
            if rel in targets:
                raise CorruptFileError(
                    f"{root}: entries {targets[rel]} and {ident} share the file {rel}: XLA's "
                    "per-fusion directory keeps one entry per device, explicit version and "
                    "fusion. Prune one of them first, or write a single file instead."
                )
            targets[rel] = ident
        for rel, ident in targets.items():
            dest = root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(dest, self.items[ident].binary())

    def problems(self) -> list[str]:
        """Damaged files, and entries XLA could never match."""
        out = list(self.damaged)
        where = str(self.origin) if self.origin else "?"
        for ident, item in self.items.items():
            t = item.entry.key.target
            if not t.device or not t.hlo_fingerprint:
                out.append(f"{item.source or where}: entry {ident!r} has no device or "
                           "hlo_fingerprint; XLA can never match it. Prune it.")
        return out

def _add(items: dict[str, CacheItem], damaged: list[str], item: CacheItem, where: str) -> None:
    ident = entry_id(item.entry)
    if ident in items:
        damaged.append(f"{where}: entry {ident!r} appears more than once; the first one is kept")
        return
    items[ident] = item


class XlaCacheFormat(FileFormat):
    """Format object for XLA's newer cache files and per-fusion directories."""

    name = FORMAT_NAME
    SNIFF_BYTES = _SNIFF_BYTES

    def sniff_dir(self, path: Path) -> bool:
        """The directory layout."""
        return _looks_like_dir(path)

    def load_dir(self, path: Path) -> XlaCacheSet:
        return _load_dir(path)

    def sniff_data(self, head: bytes, path: Path) -> bool:
        """Cheap test: text's first tokens, or binary's first fields."""
        if is_text_path(path):
            return bool(_TEXT_START.match(head.decode("utf-8", errors="replace")))
        return _looks_like_binary(head) or _entry_file_entry(path, head) is not None

    def load(self, path: Path) -> XlaCacheSet:
        result = super().load(path)
        assert isinstance(result, XlaCacheSet)
        return result

    def parse(self, data: bytes, path: Path) -> XlaCacheSet:
        """One file's bytes: an AutotuneCache, or one per-fusion entry file."""
        text = is_text_path(path)
        single = None if text else _entry_file_entry(path, data)
        if single is not None:
            item = CacheItem(single, data, str(path))
            damaged = [] if _where_xla_looks(single, path) else [
                f"{path}: holds the entry for {entry_id(single)!r}, which XLA looks for in "
                f"{entry_relpath(single, str(path))} under the cache directory; it will never "
                "be read here."]
            return XlaCacheSet({entry_id(single): item}, damaged=damaged, origin=path,
                               entry_file=path)
        header, entries = parse_file(data, pb.AutotuneCache, path, what=WHAT,
                                     entries_field="entries", number=_ENTRIES_FIELD)
        items: dict[str, CacheItem] = {}
        damaged: list[str] = []
        for entry, raw in entries:
            _add(items, damaged, CacheItem(entry, raw), str(path))
        return XlaCacheSet(items, header, damaged, origin=path)


def _entry_files(root: Path) -> list[tuple[Path, str, str]]:
    """(file, device dir, explicit version dir or "") for every *.pb file in the layout."""
    out = []
    for device_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        if device_dir.name == layout.XLA_TEMP_DIR:
            continue
        for child in sorted(device_dir.iterdir()):
            if child.is_file() and child.suffix == ENTRY_SUFFIX:
                out.append((child, device_dir.name, ""))
            elif child.is_dir():
                out.extend((f, device_dir.name, child.name) for f in sorted(child.iterdir())
                           if f.is_file() and f.suffix == ENTRY_SUFFIX)
    return [t for t in out if not t[0].name.startswith(TEMP_PREFIX)]


def _looks_like_dir(root: Path) -> bool:
    """Entry files in the layout, or (once pruned empty) only device directories of .pb files."""
    try:
        if _entry_files(root):
            return True
        children = [p for p in root.iterdir() if not p.name.startswith(TEMP_PREFIX)]
        device_dirs = [p for p in children if p.is_dir() and p.name != layout.XLA_TEMP_DIR]
        if (not device_dirs or any(not p.is_dir() for p in children)
                or any(p.name.startswith(".") for p in device_dirs)):
            return False
        for d in device_dirs:
            for child in d.rglob("*"):
                if child.is_file() and child.suffix != ENTRY_SUFFIX:
                    return False
        return True
    except OSError:
        return False


def _looks_like_binary(head: bytes) -> bool:
    fields = wire.top_level_fields(head)
    if not fields:
        return False
    # Field 1 is a string here (device_scope); our own format and XLA's legacy one keep a varint
    # version there. Other fields may be of any type (a newer XLA may add scalars).
    if any(f.number == 1 and f.wire_type != wire.LEN for f in fields):
        return False
    first = next((f for f in fields if f.number == _ENTRIES_FIELD), None)
    if first is None:
        return False
    entry = pb.AutotuneEntry()
    try:
        entry.ParseFromString(first.value)
    except Exception:  # noqa: BLE001 - any parse failure just means "not this format"
        return False
    return bool(entry.key.target.hlo_fingerprint)


def _where_xla_looks(entry: pb.AutotuneEntry, file: Path) -> bool:
    """Whether `file` sits where XLA's DirectoryStore would look for this entry."""
    t = entry.key.target
    if t.explicit_version:
        return (file.parent.parent.name, file.parent.name, file.stem) == (
            t.device, t.explicit_version, t.hlo_fingerprint)
    return (file.parent.name, file.stem) == (t.device, t.hlo_fingerprint)


def _entry_file_entry(path: Path, data: bytes) -> pb.AutotuneEntry | None:
    """The entry, when `data` is one per-fusion entry file (`<hlo_fingerprint>.pb`), else None."""
    if path.suffix != ENTRY_SUFFIX or len(data) >= _SNIFF_BYTES:
        return None
    fields = wire.top_level_fields(data)
    if not fields or any(f.wire_type != wire.LEN or f.number not in (1, 2) for f in fields):
        return None
    entry = pb.AutotuneEntry()
    try:
        entry.ParseFromString(data)
    except Exception:  # noqa: BLE001 - any parse failure just means "not an entry file"
        return None
    return entry if entry.key.target.hlo_fingerprint == path.stem else None


def _load_dir(root: Path) -> XlaCacheSet:
    items: dict[str, CacheItem] = {}
    damaged: list[str] = []
    for file, device, version in _entry_files(root):
        try:
            data = read_capped(file, layout.MAX_ENTRY_BYTES, follow_symlinks=False)
            entry = codec.parse(data, pb.AutotuneEntry, file, text=False,
                                what="XLA per-fusion cache entry (xla.autotuner.AutotuneEntry)")
        except (CorruptFileError, OSError) as e:
            damaged.append(str(e))
            continue
        t = entry.key.target
        if (t.device, t.explicit_version, t.hlo_fingerprint) != (device, version, file.stem):
            damaged.append(
                f"{file}: holds the entry for {entry_id(entry)!r}, which XLA looks for elsewhere; "
                "it will never be read. Move it, or remove it with `autotune-cache prune`."
            )
        _add(items, damaged, CacheItem(entry, data, str(file)), str(file))
    ordered = sorted(items.items(), key=lambda kv: entry_sort_key(kv[1].entry))
    return XlaCacheSet(dict(ordered), damaged=damaged, origin=root)
