"""The per-kernel cache directory: one self-describing file per entry, shared by processes.

Every path in the directory may have been planted by another account. Entries are read with
safeio (regular files only, never blocking, never through a symlink, at most MAX_ENTRY_BYTES) and
checked with validate.entry_problem; the tuning locks live in a lock directory
locking.trusted_lock_dir accepts; and the store only ever lists, reads or deletes files named as
it names them (`<16 hex>-<64 hex>.textproto`, `.tmp-<that>.<pid>.<hex>`, `.locks*/<64 hex>.lock`):
anything else in the directory (a committed results file, a README) is left alone.
(docs/decisions/0003-shared-cache-directory.md)
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from autotune_cache.errors import CacheDirError, CorruptFileError
from autotune_cache.formats import parse_results, read_capped, serialize_keyed
from autotune_cache.foundation.atomic import TEMP_PREFIX, write_atomic
from autotune_cache.foundation.key import CacheKey
from autotune_cache.foundation.limits import MAX_ENTRY_BYTES
from autotune_cache.foundation.locking import trusted_lock_dir
from autotune_cache.foundation.safeio import lexists_kind
from autotune_cache.foundation.validate import entry_problem, warn_damaged
from autotune_cache.proto import autotune_results_pb2 as pb

log = logging.getLogger("autotune_cache")

ENTRY_SUFFIX = ".textproto"
# Temp files older than this belong to a killed writer and are removed by prune().
STALE_TEMP_SECONDS = 600.0
LOCK_DIR = ".locks"
CACHE_DIR_FLAG = "--autotune_cache_dir"

ENTRY_NAME = re.compile(r"[0-9a-f]{16}-[0-9a-f]{64}" + re.escape(ENTRY_SUFFIX))
_TEMP_NAME = re.compile(re.escape(TEMP_PREFIX) + ENTRY_NAME.pattern + r"\.\d+\.[0-9a-f]+")
_LOCK_NAME = re.compile(r"[0-9a-f]{64}\.lock")
_LOCK_DIR_NAME = re.compile(re.escape(LOCK_DIR) + r"(-\d+)?")


class DirectoryStore:
    """A cache directory of `<group>-<key digest>.textproto` files, one entry and its key each.

    `flag` is how messages name the directory: `--autotune_cache_dir=DIR` for the library, the
    bare path for the CLI (whose user never gave that flag)."""

    def __init__(self, root: Path | str, *, flag: str | None = CACHE_DIR_FLAG) -> None:
        self.root = Path(root)
        self.label = f"{flag}={self.root}" if flag else str(self.root)
        self._flag = flag
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CacheDirError(
                f"{self.label}: cannot create the cache directory ({e.strerror or e}). Create "
                "it yourself or point to a writable path."
            ) from e
        if not self.root.is_dir():
            raise CacheDirError(f"{self.label}: exists but is not a directory.")

    def path_for(self, key: CacheKey) -> Path:
        """`<problem group>-<key digest>.textproto`: both parts are hashes of the key, and the
        group prefix puts every near miss of a key next to it."""
        return self.root / f"{key.problem_group()}-{key.digest()}{ENTRY_SUFFIX}"

    def lock_path(self, key: CacheKey) -> Path:
        """Where the per-key tuning lock for `key` lives: `.locks/` when this account or root
        owns it, else a private `.locks-<uid>/` (locking.trusted_lock_dir); LockError when
        neither can be used."""
        return trusted_lock_dir(self.root, LOCK_DIR) / f"{key.digest()}.lock"

    def _read(self, path: Path) -> pb.Entry:
        data = read_capped(path, MAX_ENTRY_BYTES, follow_symlinks=False)
        msg = parse_results(data, path, text=True)
        if len(msg.entries) != 1:
            raise CorruptFileError(f"{path}: holds {len(msg.entries)} entries, expected 1")
        return msg.entries[0]

    def get(self, key: CacheKey) -> pb.Entry | None:
        """The entry for `key`, or None; a damaged file warns (once) and counts as a miss.
        The caller (Cache) checks the entry's winner with validate.entry_problem."""
        path = self.path_for(key)
        try:
            entry = self._read(path)
        except FileNotFoundError:
            return None
        except (CorruptFileError, OSError) as e:
            warn_damaged(str(path), str(e).removeprefix(f"{path}: "))
            return None
        if CacheKey.from_proto(entry.key) != key:
            warn_damaged(str(path), "it holds a different key than its name says")
            return None
        return entry

    def put(self, entry: pb.Entry, key: CacheKey | None = None) -> Path:
        """Store one entry atomically (under `key`, its key, when the caller has it built);
        concurrent writers of one key leave one whole file. A directory planted at the entry's
        path is left alone with a warning (the result stays in this process's memory)."""
        key = CacheKey.from_proto(entry.key) if key is None else key
        path = self.path_for(key)
        if lexists_kind(path) == "a directory":
            warn_damaged(str(path), "a directory is in the way, so the result is not stored "
                         "there; remove it")
            return path
        try:
            write_atomic(path, serialize_keyed([(key, entry)], text=True))
        except OSError as e:
            hint = (", or use --autotune_cache_mode=read" if self._flag == CACHE_DIR_FLAG
                    else "")
            raise CacheDirError(
                f"{self.label}: cannot write {path.name} ({e.strerror or e}). Check the "
                f"directory's permissions and free space{hint}."
            ) from e
        return path

    def entry_files(self, pattern: str = "*") -> Iterator[Path]:
        """Every entry file (matching `pattern`) named as this store names entries; temp files
        and files of anyone else are skipped."""
        for path in sorted(self.root.glob(f"{pattern}{ENTRY_SUFFIX}")):
            if ENTRY_NAME.fullmatch(path.name):
                yield path

    def same_problem(self, key: CacheKey) -> list[pb.Entry]:
        """Readable, well-formed entries for the same kernel and problem as `key`, any device or
        toolchain (near misses, reusable timings)."""
        out = []
        for path in self.entry_files(f"{key.problem_group()}-*"):
            try:
                entry = self._read(path)
            except (CorruptFileError, OSError):
                continue  # get() warns about damaged files of the key itself
            if entry_problem(entry) is None:
                out.append(entry)
        return out

    def scan(self) -> Iterator[tuple[Path, pb.Entry | None, str]]:
        """(path, entry or None, problem) for every entry file, for inspect/verify/prune; an
        entry under a name its key does not give, or with a malformed winner, is a problem too
        (lookups never use it)."""
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
            elif (problem := entry_problem(entry)) is not None:
                yield path, None, f"{path}: {problem}; lookups ignore it and prune removes it"
            else:
                yield path, entry, ""

    def lock_files(self, older_than: float = STALE_TEMP_SECONDS) -> list[Path]:
        """Our lock files (in `.locks/` and private `.locks-<uid>/`) nobody has touched for a
        while (prune removes them)."""
        found = [p for d in self.root.glob(f"{LOCK_DIR}*") if _LOCK_DIR_NAME.fullmatch(d.name)
                 and d.is_dir() and not d.is_symlink()
                 for p in d.glob("*.lock") if _LOCK_NAME.fullmatch(p.name)]
        return untouched_for(older_than, found)

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
        """Our temp files abandoned by killed writers (`.tmp-<entry name>.<pid>.<hex>`)."""
        return untouched_for(older_than, (p for p in self.root.glob(f"{TEMP_PREFIX}*")
                                          if _TEMP_NAME.fullmatch(p.name)))


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
