"""autotune_cache's own format as a result set: results files (text or binary) and directories."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from autotune_cache.errors import CorruptFileError
from autotune_cache.formats import (
    duplicate_keys,
    is_text_suffix,
    parse_results,
    read_capped,
    save_results,
    serialize_results,
)
from autotune_cache.foundation.key import CacheKey, is_warmup
from autotune_cache.foundation.validate import entry_problem
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.resultsets.base import (
    FileFormat,
    ResultSet,
    Row,
    is_directory_path,
    merge_by_id,
    require_same_format,
)
from autotune_cache.store.dirstore import (
    ENTRY_NAME,
    ENTRY_SUFFIX,
    STALE_TEMP_SECONDS,
    DirectoryStore,
)

FORMAT_NAME = "autotune_cache"
# What a warm-up entry (a plain @triton.jit specialization, triton/warmups.py) shows as its
# config: it records no tuning, only what a loaded run compiles ahead.
WARMUP_LABEL = "(warm-up: plain @triton.jit, compiled ahead)"


def config_summary(config: pb.Config) -> str:
    """One-line text of a config, e.g. `BLOCK_M=64,BLOCK_N=32 warps=4 stages=3`."""
    parts = [",".join(f"{p.name}={getattr(p, p.WhichOneof('value') or 'int_value')}"
                      for p in config.params)]
    for name in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
        if config.HasField(name):
            parts.append(f"{name.removeprefix('num_')}={getattr(config, name)}")
    return " ".join(p for p in parts if p)


@dataclass
class OurResults:
    """Entries in autotune_cache's own schema, from a results file or a cache directory."""

    entries: dict[str, pb.Entry]
    sources: dict[str, str] = field(default_factory=dict)
    damaged: list[str] = field(default_factory=list)
    damaged_paths: list[Path] = field(default_factory=list)
    origin: Path | None = None
    format_name: str = FORMAT_NAME

    def rows(self) -> list[Row]:
        out = []
        keys = {digest: CacheKey.from_proto(e.key) for digest, e in self.entries.items()}
        for digest, e in self.entries.items():
            key = keys[digest]
            out.append(Row(
                id=digest,
                kernel=key.kernel,
                problem=key.problem,
                device=str(key.device),
                toolchain=key.toolchain_str,
                config=WARMUP_LABEL if is_warmup(key) else config_summary(e.result.config),
                time_ms=e.result.time_ms if e.result.time_ms or e.result.candidates else None,
                tuned_at=e.result.tuned_at,
                payload=e.SerializeToString(deterministic=True),
                source=self.sources.get(digest, ""),
            ))
        return sorted(out, key=lambda r: keys[r.id].sort_key())

    def select(self, ids: set[str]) -> OurResults:
        return OurResults({d: e for d, e in self.entries.items() if d in ids},
                          {d: s for d, s in self.sources.items() if d in ids})

    def without(self, ids: set[str]) -> OurResults:
        return self.select(set(self.entries) - ids)

    def merge(self, other: ResultSet, prefer_other: set[str]) -> OurResults:
        require_same_format(self, other)
        assert isinstance(other, OurResults)
        return OurResults(merge_by_id(self.entries, other.entries, prefer_other))

    def dumps(self, suffix: str) -> bytes:
        return serialize_results(self.entries.values(), text=is_text_suffix(suffix))

    def save(self, path: Path) -> None:
        if is_directory_path(path):
            store = DirectoryStore(path, flag=None)
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
        store = DirectoryStore(self.origin, flag=None)
        return sorted([*store.temp_files(older_than), *store.lock_files(older_than),
                       *self.damaged_paths])


class OurFormat(FileFormat):
    """autotune_cache results files (text or binary) and cache directories."""

    name = FORMAT_NAME

    def sniff_dir(self, path: Path) -> bool:
        names = [p.name for p in path.glob(f"*{ENTRY_SUFFIX}")]
        return any(ENTRY_NAME.fullmatch(n) for n in names) or not any(path.iterdir())

    def sniff_data(self, data: bytes, path: Path) -> bool:
        try:
            parse_results(data, path)
        except CorruptFileError:
            return False
        return True

    def load_dir(self, path: Path) -> OurResults:
        result = OurResults({}, origin=path)
        for file, entry, problem in DirectoryStore(path, flag=None).scan():
            if entry is None:
                result.damaged.append(problem)
                result.damaged_paths.append(file)
                continue
            digest = CacheKey.from_proto(entry.key).digest()
            result.entries[digest] = entry
            result.sources[digest] = str(file)
        return result

    def parse(self, data: bytes, path: Path) -> OurResults:
        msg = parse_results(data, path)
        damaged = [f"{path}: {line}" for line in duplicate_keys(msg.entries)]
        for i, entry in enumerate(msg.entries):
            if (problem := entry_problem(entry)) is not None:
                damaged.append(f"{path}: entry {i} "
                               f"({CacheKey.from_proto(entry.key).describe()}): {problem}")
        return OurResults({CacheKey.from_proto(e.key).digest(): e for e in msg.entries},
                          damaged=damaged)

    def __init__(self) -> None:
        # `sniff` of a file is a whole parse; `load` of the same file reuses it, so a file is
        # parsed once, not once to recognise it and again to load it.
        self._sniffed: tuple[Path, OurResults] | None = None

    def sniff(self, path: Path) -> bool:
        path = Path(path)
        if path.is_dir():
            return super().sniff(path)
        try:
            data = read_capped(path)
        except (CorruptFileError, OSError):
            return False
        try:
            self._sniffed = (path, self.parse(data, path))
        except CorruptFileError:
            return False
        return True

    def load(self, path: Path) -> OurResults:
        path = Path(path)
        if not path.is_dir() and self._sniffed is not None and self._sniffed[0] == path:
            result, self._sniffed = self._sniffed[1], None
            return result
        result = super().load(path)
        assert isinstance(result, OurResults)
        return result
