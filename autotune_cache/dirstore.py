"""The per-kernel cache directory: one self-describing file per entry, shared by processes."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from autotune_cache.atomic import TEMP_PREFIX, write_atomic
from autotune_cache.errors import CacheDirError, CorruptFileError
from autotune_cache.formats import parse_results, read_capped, serialize_keyed
from autotune_cache.key import CacheKey
from autotune_cache.proto import autotune_results_pb2 as pb

log = logging.getLogger("autotune_cache")

ENTRY_SUFFIX = ".textproto"
# One entry is a few KiB; anything far larger is not ours.
MAX_ENTRY_BYTES = 4 * 1024 * 1024
# Temp files older than this belong to a killed writer and are removed by prune().
STALE_TEMP_SECONDS = 600.0
LOCK_DIR = ".locks"


class DirectoryStore:
    """A cache directory of `<key digest>.textproto` files, each holding one entry and its key."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CacheDirError(
                f"--autotune_cache_dir={self.root}: cannot create the cache directory "
                f"({e.strerror}). Create it yourself or point the flag at a writable path."
            ) from e
        if not self.root.is_dir():
            raise CacheDirError(f"--autotune_cache_dir={self.root}: exists but is not a directory.")

    def path_for(self, key: CacheKey) -> Path:
        """`<problem group>-<key digest>.textproto`: both parts are hashes of the key, and the
        group prefix puts every near miss of a key next to it."""
        return self.root / f"{key.problem_group()}-{key.digest()}{ENTRY_SUFFIX}"

    def lock_path(self, key: CacheKey) -> Path:
        """Where the per-key tuning lock for `key` lives."""
        lock_dir = self.root / LOCK_DIR
        try:
            lock_dir.mkdir(exist_ok=True)
        except OSError as e:
            raise CacheDirError(
                f"--autotune_cache_dir={self.root}: cannot create the lock directory {lock_dir} "
                f"({e.strerror or e}); remove whatever is in its way, or use "
                "--autotune_cache_mode=read."
            ) from e
        return lock_dir / f"{key.digest()}.lock"

    def _read(self, path: Path) -> pb.Entry:
        msg = parse_results(read_capped(path, MAX_ENTRY_BYTES), path, text=True)
        if len(msg.entries) != 1:
            raise CorruptFileError(f"{path}: holds {len(msg.entries)} entries, expected 1")
        return msg.entries[0]

    def get(self, key: CacheKey) -> pb.Entry | None:
        """The entry for `key`, or None; a damaged file warns and counts as a miss."""
        path = self.path_for(key)
        try:
            entry = self._read(path)
        except FileNotFoundError:
            return None
        except (CorruptFileError, OSError) as e:
            log.warning("autotune_cache: ignoring a damaged cache entry (%s); it will be "
                        "re-tuned and overwritten", e)
            return None
        if CacheKey.from_proto(entry.key) != key:
            log.warning("autotune_cache: %s holds a different key than its name says; ignoring "
                        "it (it will be re-tuned and overwritten)", path)
            return None
        return entry

    def put(self, entry: pb.Entry, key: CacheKey | None = None) -> Path:
        """Store one entry atomically (under `key`, its key, when the caller has it built);
        concurrent writers of one key leave one whole file."""
        key = CacheKey.from_proto(entry.key) if key is None else key
        path = self.path_for(key)
        try:
            write_atomic(path, serialize_keyed([(key, entry)], text=True))
        except OSError as e:
            raise CacheDirError(
                f"--autotune_cache_dir={self.root}: cannot write {path.name} ({e.strerror}). "
                "Check the directory's permissions, or use --autotune_cache_mode=read."
            ) from e
        return path

    def entry_files(self, pattern: str = "*") -> Iterator[Path]:
        """Every entry file (matching `pattern`), skipping temp files left by writers."""
        for path in sorted(self.root.glob(f"{pattern}{ENTRY_SUFFIX}")):
            if not path.name.startswith(TEMP_PREFIX):
                yield path

    def same_problem(self, key: CacheKey) -> list[pb.Entry]:
        """Readable entries for the same kernel and problem as `key`, any device or toolchain."""
        out = []
        for path in self.entry_files(f"{key.problem_group()}-*"):
            try:
                out.append(self._read(path))
            except (CorruptFileError, OSError):
                continue  # get() warns about damaged files of the key itself
        return out

    def scan(self) -> Iterator[tuple[Path, pb.Entry | None, str]]:
        """(path, entry or None, problem) for every file, for inspect/verify/prune; an entry
        under a name its key does not give is a problem too (lookups never find it)."""
        for path in self.entry_files():
            try:
                entry = self._read(path)
            except (CorruptFileError, OSError) as e:
                yield path, None, str(e)
                continue
            expected = self.path_for(CacheKey.from_proto(entry.key)).name
            if path.name != expected:
                yield path, None, (f"{path}: holds the entry for {expected}, so lookups never "
                                   "find it (copied or renamed by hand?); prune removes it")
            else:
                yield path, entry, ""

    def lock_files(self, older_than: float = STALE_TEMP_SECONDS) -> list[Path]:
        """Lock files nobody has touched for a while (prune removes them)."""
        return untouched_for(older_than, (self.root / LOCK_DIR).glob("*.lock"))

    def entries(self) -> list[pb.Entry]:
        """Every readable entry; damaged files are skipped with a warning."""
        out = []
        for path, entry, problem in self.scan():
            if entry is None:
                log.warning("autotune_cache: skipping damaged cache entry %s: %s", path, problem)
            else:
                out.append(entry)
        return out

    def temp_files(self, older_than: float = STALE_TEMP_SECONDS) -> list[Path]:
        """Temp files abandoned by killed writers."""
        return untouched_for(older_than, self.root.glob(f"{TEMP_PREFIX}*"))


def untouched_for(seconds: float, paths: Iterable[Path]) -> list[Path]:
    """The paths not modified for at least `seconds`, sorted; vanished ones are skipped."""
    now = time.time()
    out = []
    for path in paths:
        try:
            if now - path.stat().st_mtime >= seconds:
                out.append(path)
        except FileNotFoundError:
            continue
    return sorted(out)
