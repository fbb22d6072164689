"""The cache's tiers: one file per tier, each implementing `tiers.base.Tier`.

`Cache` (autotune_cache/cache.py) holds an ordered list: memory and loaded files first, then the
cache directory, then the Redis server. Adding a tier means one new file here and one line in
`build_tiers`.
"""

from __future__ import annotations

from autotune_cache.config.flags import Settings
from autotune_cache.tiers.base import Found, Tier
from autotune_cache.tiers.directory import DirectoryTier
from autotune_cache.tiers.memory import ProcessTier

__all__ = ["DirectoryTier", "Found", "ProcessTier", "Tier", "build_tiers"]


def build_tiers(settings: Settings, memory: ProcessTier | None = None) -> list[Tier]:
    """The tiers `settings` asks for, in lookup order: this process's memory over the loaded
    files (`memory`, or one built from settings.load_from), the directory, the remote server."""
    writable = settings.cache_mode == "update"
    tiers: list[Tier] = [ProcessTier.from_files(settings.load_from) if memory is None else memory]
    if settings.cache_dir:
        tiers.append(DirectoryTier(settings.cache_dir, writable=writable))
    if settings.remote_cache:
        from autotune_cache.tiers.redis import RedisTier

        tiers.append(RedisTier(settings.remote_cache, writable=writable))
    return tiers
