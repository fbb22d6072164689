"""The first tier: this process's memory over the files of --load_autotune_results_from."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

from autotune_cache.formats import load_results
from autotune_cache.key import CacheKey
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.tiers.base import Found

log = logging.getLogger("autotune_cache")

THIS_PROCESS = "this process"


class MemoryTier:
    """What this process tuned or looked up, then the loaded files (the last file wins)."""

    name = "memory"
    shared = False
    writable = True

    def __init__(self, loaded: dict[str, Found] | None = None,
                 files: tuple[Path, ...] = ()) -> None:
        self.memory: dict[str, Found] = {}
        self.loaded: dict[str, Found] = loaded or {}
        self.files = files

    @classmethod
    def from_files(cls, paths: Iterable[Path]) -> MemoryTier:
        """Load every results file; a later file overrides an earlier one's entry for a key."""
        paths = tuple(paths)
        loaded: dict[str, Found] = {}
        for path in paths:
            for entry in load_results(path):
                key = CacheKey.from_proto(entry.key)
                digest = key.digest()
                if digest in loaded:
                    log.debug("autotune_cache: %s overrides %s for %s",
                              path, loaded[digest].origin, key.describe())
                loaded[digest] = Found(entry, key, str(path))
        return cls(loaded, paths)

    def searched(self) -> list[str]:
        return [str(p) for p in self.files]

    def in_memory(self, key: CacheKey) -> bool:
        """Whether this process already holds `key` (looked up or tuned here)."""
        return key.digest() in self.memory

    def remember(self, found: Found) -> None:
        """Keep an entry found in any tier, with its origin, for the next lookup."""
        self.memory[found.key.digest()] = found

    def get(self, key: CacheKey) -> Found | None:
        digest = key.digest()
        return self.memory.get(digest) or self.loaded.get(digest)

    def put(self, key: CacheKey, entry: pb.Entry) -> None:
        self.memory[key.digest()] = Found(entry, key, THIS_PROCESS)

    def same_problem(self, key: CacheKey) -> Iterator[Found]:
        for tier in (self.memory, self.loaded):
            yield from list(tier.values())

    def lock(self, key: CacheKey, timeout: float) -> contextlib.nullcontext[bool]:
        """Nothing to lock: no other process sees this tier."""
        return contextlib.nullcontext(False)
