"""The tier protocol: what every place results can live in offers the cache.

A tier deals in `(CacheKey, pb.Entry)` pairs (a `Found` adds where it came from), so a
key built once by the tuner travels whole through every tier and the dump; only bytes read from
outside (a file, the server) are turned back into a key, to check them. The cache loops over an
ordered list of tiers and never asks which kind a tier is: `shared` says other processes see it
(re-read after waiting for a peer, locked while tuning, back-filled from a later tier), `writable`
says `record` writes to it (false for the shared tiers under --autotune_cache_mode=read)
(docs/decisions/0020-tiers-deal-in-keys-and-entries.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from autotune_cache.foundation.key import CacheKey
from autotune_cache.proto import autotune_results_pb2 as pb


@dataclass(frozen=True)
class Found:
    """An entry together with its key and where it came from, for messages."""

    entry: pb.Entry
    key: CacheKey
    origin: str


class Tier(Protocol):
    """One place results live: memory and loaded files, a cache directory, a Redis server."""

    name: str
    shared: bool
    writable: bool

    def searched(self) -> list[str]:
        """What this tier searches, for the require_complete message (may be empty)."""
        ...

    def get(self, key: CacheKey) -> Found | None:
        """The entry recorded for exactly `key`, or None (a damaged entry is a miss)."""
        ...

    def put(self, key: CacheKey, entry: pb.Entry) -> None:
        """Record `entry` under `key` (the caller checks `writable`)."""
        ...

    def same_problem(self, key: CacheKey) -> Iterable[Found]:
        """Entries that may share key's kernel and problem (near misses, reusable timings);
        the cache filters them, so a tier may return a superset."""
        ...

    def lock(self, key: CacheKey, timeout: float) -> AbstractContextManager[bool]:
        """Hold the cross-process lock for tuning `key`; yields whether a lock is held."""
        ...
