"""autotune_cache: deterministic, reviewable GPU kernel autotuning caches for test suites.

The package's names are imported on first use (PEP 562), so that `import autotune_cache` (and
the start-up hook, which imports `autotune_cache.startup`) costs no protobuf and no Triton:
a process pays for what it uses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# AUTOTUNE_FLAGS' --autotune_all_kernels / --require_complete_autotune_results where the start-up
# hook did not run (python -S, the package only on PYTHONPATH): startup.py.
from autotune_cache import startup as _startup
from autotune_cache.foundation import import_hook as _import_hook
from autotune_cache.version import __version__

if TYPE_CHECKING:
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

_LAZY = {
    "Cache": "autotune_cache.cache",
    "configure": "autotune_cache.cache",
    "get_cache": "autotune_cache.cache",
    "Settings": "autotune_cache.config.flags",
    "parse_flags": "autotune_cache.config.flags",
    "AutotuneCacheError": "autotune_cache.errors",
    "CacheDirError": "autotune_cache.errors",
    "CorruptFileError": "autotune_cache.errors",
    "DumpShardingError": "autotune_cache.errors",
    "FlagError": "autotune_cache.errors",
    "LockError": "autotune_cache.errors",
    "MissingResultError": "autotune_cache.errors",
    "PathPrefixError": "autotune_cache.errors",
    "VersionMismatchError": "autotune_cache.errors",
    "CacheKey": "autotune_cache.foundation.key",
    "Device": "autotune_cache.foundation.key",
}


def __getattr__(name: str) -> Any:
    if name == "entry_pb2":
        value: Any = importlib.import_module("autotune_cache.proto.autotune_results_pb2")
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'autotune_cache' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


# A configured cache's asks of Triton, and a run's before it configures one: startup.py.
_import_hook.set_engage(_startup.engage, _startup.compile_at_start)
_startup.at_first_import()

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
