"""The cache directory as a tier: the shared files of dirstore.DirectoryStore, and their locks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from autotune_cache.atomic import current_umask
from autotune_cache.dirstore import DirectoryStore
from autotune_cache.key import CacheKey
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.tiers.base import Found


class DirectoryTier:
    """--autotune_cache_dir: one file per entry, shared by every process on the machine (or
    the network file system), with a per-key file lock for tuning."""

    name = "directory"
    shared = True

    def __init__(self, root: Path | str, *, writable: bool = True) -> None:
        self.store = DirectoryStore(root)
        self.writable = writable

    def searched(self) -> list[str]:
        return [f"cache dir {self.store.root}"]

    def _found(self, key: CacheKey, entry: pb.Entry) -> Found:
        return Found(entry, key, str(self.store.path_for(key)))

    def get(self, key: CacheKey) -> Found | None:
        entry = self.store.get(key)
        return None if entry is None else self._found(key, entry)

    def put(self, key: CacheKey, entry: pb.Entry) -> None:
        self.store.put(entry, key)

    def same_problem(self, key: CacheKey) -> Iterator[Found]:
        for entry in self.store.same_problem(key):
            yield self._found(CacheKey.from_proto(entry.key), entry)

    @contextlib.contextmanager
    def lock(self, key: CacheKey, timeout: float) -> Iterator[bool]:
        """The per-key file lock in the directory's .locks/; yields True once held."""
        try:
            from filelock import FileLock, Timeout
        except ImportError as e:  # pragma: no cover - depends on the install
            raise ImportError(
                "autotune_cache needs `filelock` to share a cache directory between processes: "
                "pip install 'autotune_cache[triton]'"
            ) from e
        # The lock file follows the umask, as every cache file does; filelock 3.x would otherwise
        # force 0644 and lock the other users of a shared directory out.
        lock = FileLock(str(self.store.lock_path(key)), mode=0o666 & ~current_umask())
        try:
            lock.acquire(timeout=timeout)
        except Timeout:
            raise TimeoutError(
                f"autotune_cache: waited {timeout:.0f} s for another process tuning "
                f"{key.describe()} (lock {lock.lock_file}); if no such process is alive, "
                "delete the lock file."
            ) from None
        try:
            yield True
        finally:
            lock.release()
