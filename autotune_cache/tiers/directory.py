"""The cache directory as a tier: the shared files of dirstore.DirectoryStore, and their locks."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from autotune_cache.errors import LockError
from autotune_cache.foundation import locking
from autotune_cache.foundation.key import CacheKey
from autotune_cache.foundation.locking import file_lock
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store.dirstore import DirectoryStore
from autotune_cache.tiers.base import Found

log = logging.getLogger("autotune_cache")


class DirectoryTier:
    """--autotune_cache_dir: one file per entry, shared by every process on the machine (or
    the network file system), with a per-key file lock for tuning."""

    name = "directory"
    shared = True

    def __init__(self, root: Path | str, *, writable: bool = True) -> None:
        locking.prepare()  # entries recorded at exit take this tier's lock
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
        """The per-key file lock in the directory's lock directory; yields True once held, and
        False (after a warning that names the lock file and the fix) when it cannot be taken
        safely or another process still holds it after `timeout` seconds: the key is then tuned
        without the lock (locking.py says why that is safe)."""
        with contextlib.ExitStack() as stack:
            try:
                path = self.store.lock_path(key)
                held = stack.enter_context(file_lock(path, timeout))
            except LockError as e:
                log.warning("autotune_cache: tuning %s without the lock: %s", key.describe(), e)
                held = False
            else:
                if not held:
                    log.warning("autotune_cache: waited %.0f s for another process tuning %s "
                                "(lock %s); tuning it without the lock (if no such process is "
                                "alive, delete the lock file)", timeout, key.describe(), path)
            yield held
