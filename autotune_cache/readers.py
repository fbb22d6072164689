"""The format registry the CLI reads through: our results files and directories, and XLA's."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from autotune_cache.dirstore import ENTRY_SUFFIX, STALE_TEMP_SECONDS, DirectoryStore
from autotune_cache.errors import CorruptFileError
from autotune_cache.formats import parse_results, read_capped, save_results
from autotune_cache.key import CacheKey
from autotune_cache.proto import autotune_results_pb2 as pb


@dataclass(frozen=True)
class Row:
    """One entry of any format, in the terms the CLI shows and compares."""

    id: str
    kernel: str
    problem: str
    device: str
    toolchain: str
    config: str
    time_ms: float | None
    tuned_at: str
    payload: bytes
    source: str = ""


class ResultSet(Protocol):
    """The entries of one file or directory, in one format."""

    format_name: str

    def rows(self) -> list[Row]: ...

    def select(self, ids: set[str]) -> ResultSet: ...

    def merge(self, other: ResultSet, prefer_other: set[str]) -> ResultSet: ...

    def save(self, path: Path) -> None: ...

    def problems(self) -> list[str]: ...

    def leftovers(self, older_than: float = STALE_TEMP_SECONDS) -> list[Path]:
        """Files `prune` deletes besides dropped entries (abandoned temp files, stale locks,
        damaged or misnamed entries of our own directories)."""
        ...


class Format(Protocol):
    """A file format the CLI can read and write."""

    name: str

    def sniff(self, path: Path) -> bool: ...

    def load(self, path: Path) -> ResultSet: ...


V = TypeVar("V")


def require_same_format(mine: ResultSet, other: ResultSet) -> None:
    """Merging is only defined within one format; say so by name otherwise."""
    if type(mine) is not type(other):
        raise CorruptFileError(
            f"cannot merge {other.format_name} entries into {mine.format_name} entries; "
            "merge files of one format"
        )


def merge_by_id(mine: dict[str, V], theirs: dict[str, V], prefer_other: set[str]) -> dict[str, V]:
    """`mine` plus `theirs`; on a shared id mine wins unless the id is in `prefer_other`."""
    merged = dict(mine)
    for ident, item in theirs.items():
        if ident not in merged or ident in prefer_other:
            merged[ident] = item
    return merged


_ENTRY_NAME = re.compile(r"[0-9a-f]{16}-[0-9a-f]{64}")


def config_summary(config: pb.Config) -> str:
    """One-line text of a config, e.g. `BLOCK_M=64,BLOCK_N=32 warps=4 stages=3`."""
    parts = [",".join(f"{p.name}={getattr(p, p.WhichOneof('value') or 'int_value')}"
                      for p in config.params)]
    for name in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
        if config.HasField(name):
            parts.append(f"{name.removeprefix('num_')}={getattr(config, name)}")
    return " ".join(p for p in parts if p)


def is_directory_path(path: Path) -> bool:
    """Whether a destination path names a cache directory rather than a file."""
    return path.is_dir() or str(path).endswith("/") or not path.suffix


@dataclass
class OurResults:
    """Entries in autotune_cache's own schema, from a results file or a cache directory."""

    entries: dict[str, pb.Entry]
    sources: dict[str, str] = field(default_factory=dict)
    damaged: list[str] = field(default_factory=list)
    damaged_paths: list[Path] = field(default_factory=list)
    origin: Path | None = None
    format_name: str = "autotune_cache"

    def rows(self) -> list[Row]:
        out = []
        for digest, e in self.entries.items():
            key = CacheKey.from_proto(e.key)
            out.append(Row(
                id=digest,
                kernel=key.kernel,
                problem=key.problem,
                device=str(key.device),
                toolchain=key.toolchain_str,
                config=config_summary(e.result.config),
                time_ms=e.result.time_ms if e.result.time_ms or e.result.candidates else None,
                tuned_at=e.result.tuned_at,
                payload=e.SerializeToString(deterministic=True),
                source=self.sources.get(digest, ""),
            ))
        return sorted(out, key=lambda r: CacheKey.from_proto(self.entries[r.id].key).sort_key())

    def select(self, ids: set[str]) -> OurResults:
        return OurResults({d: e for d, e in self.entries.items() if d in ids},
                          {d: s for d, s in self.sources.items() if d in ids})

    def merge(self, other: ResultSet, prefer_other: set[str]) -> OurResults:
        require_same_format(self, other)
        assert isinstance(other, OurResults)
        return OurResults(merge_by_id(self.entries, other.entries, prefer_other))

    def save(self, path: Path) -> None:
        if is_directory_path(path):
            store = DirectoryStore(path)
            for entry in self.entries.values():
                store.put(entry)
        else:
            save_results(path, self.entries.values())

    def problems(self) -> list[str]:
        return list(self.damaged)

    def leftovers(self, older_than: float = STALE_TEMP_SECONDS) -> list[Path]:
        """Abandoned temp files, stale lock files and damaged or misnamed entry files of the
        directory this set was loaded from."""
        if self.origin is None:
            return []
        store = DirectoryStore(self.origin)
        return sorted([*store.temp_files(older_than), *store.lock_files(older_than),
                       *self.damaged_paths])


class OurFormat:
    """autotune_cache results files (text or binary) and cache directories."""

    name = "autotune_cache"

    def sniff(self, path: Path) -> bool:
        if path.is_dir():
            names = [p.stem for p in path.glob(f"*{ENTRY_SUFFIX}")]
            return any(_ENTRY_NAME.fullmatch(n) for n in names) or not any(path.iterdir())
        try:
            parse_results(read_capped(path), path)
        except (CorruptFileError, OSError):
            return False
        return True

    def load(self, path: Path) -> OurResults:
        if path.is_dir():
            result = OurResults({}, origin=path)
            for file, entry, problem in DirectoryStore(path).scan():
                if entry is None:
                    result.damaged.append(problem)
                    result.damaged_paths.append(file)
                    continue
                digest = CacheKey.from_proto(entry.key).digest()
                result.entries[digest] = entry
                result.sources[digest] = str(file)
            return result
        msg = parse_results(read_capped(path), path)
        return OurResults({CacheKey.from_proto(e.key).digest(): e for e in msg.entries})


def formats() -> list[Format]:
    """Every registered format, ours first."""
    found: list[Format] = [OurFormat()]
    try:
        from autotune_cache.xla import formats as xla_formats
    except ImportError:
        return found
    return found + list(xla_formats())


def load_any(path: Path | str) -> ResultSet:
    """Load a file or directory in whichever registered format it is."""
    path = Path(path)
    if not path.exists():
        raise CorruptFileError(f"{path}: no such file or directory")
    fmts = formats()
    for fmt in fmts:
        if fmt.sniff(path):
            return fmt.load(path)
    if path.is_file() and path.suffix.lower() in (".txt", ".textproto", ".pbtxt", ".txtpb",
                                                   ".prototxt", ".pb", ".binpb", ""):
        # Give the error of our own parser, which says what is wrong with the file.
        return OurFormat().load(path)
    raise CorruptFileError(
        f"{path}: not a results file or cache directory of any known format "
        f"({', '.join(f.name for f in fmts)})"
    )
