"""Exception types raised by autotune_cache; every message names the file, flag or key at fault."""

from __future__ import annotations


class AutotuneCacheError(Exception):
    """Base class of every error autotune_cache raises on purpose."""


class FlagError(AutotuneCacheError, ValueError):
    """An AUTOTUNE_FLAGS flag is unknown or has a malformed value."""


class PathPrefixError(AutotuneCacheError, ValueError):
    """A TEST_UNDECLARED_OUTPUTS_DIR/ or TEST_WORKSPACE/ path prefix cannot be resolved."""


class CorruptFileError(AutotuneCacheError):
    """A results file or cache entry cannot be parsed, or is too large to read."""


class VersionMismatchError(CorruptFileError):
    """A results file was written with a schema version this reader does not read."""


class CacheDirError(AutotuneCacheError, OSError):
    """The cache directory cannot be created or written."""


class MissingResultError(AutotuneCacheError, LookupError):
    """A lookup missed under --require_complete_autotune_results."""


class UnroutedTuningError(MissingResultError):
    """Triton's own autotuner began tuning a kernel the cache does not serve, under
    --require_complete_autotune_results (triton/classroute.py)."""


class DumpShardingError(AutotuneCacheError):
    """A dump run was sharded, so no process would see every result."""


class LockError(AutotuneCacheError, OSError):
    """A cross-process lock cannot be taken safely (a planted link, an untrusted or unwritable
    lock directory, a vulnerable filelock); callers tune without it and say so."""


class AllConfigsFailedError(AutotuneCacheError, RuntimeError):
    """Every candidate config failed to compile or run, so there is no winner to record."""
