"""autotune_cache: deterministic, reviewable GPU kernel autotuning caches for test suites."""

from autotune_cache.cache import Cache, configure, get_cache
from autotune_cache.config.flags import Settings, parse_flags
from autotune_cache.errors import (
    AutotuneCacheError,
    CacheDirError,
    CorruptFileError,
    DumpShardingError,
    FlagError,
    LockError,
    MissingResultError,
    PathPrefixError,
    VersionMismatchError,
)
from autotune_cache.foundation.key import CacheKey, Device
from autotune_cache.proto import autotune_results_pb2 as entry_pb2

# AUTOTUNE_FLAGS' --autotune_all_kernels / --require_complete_autotune_results where the start-up
# hook did not run (python -S, the package only on PYTHONPATH): startup.py.
from autotune_cache.startup import at_first_import as _at_first_import  # noqa: E402
from autotune_cache.version import __version__

_at_first_import()

__all__ = [
    "AutotuneCacheError",
    "Cache",
    "CacheDirError",
    "CacheKey",
    "CorruptFileError",
    "Device",
    "DumpShardingError",
    "FlagError",
    "LockError",
    "MissingResultError",
    "PathPrefixError",
    "Settings",
    "VersionMismatchError",
    "__version__",
    "configure",
    "entry_pb2",
    "get_cache",
    "parse_flags",
]
