"""The tiered results cache: memory, then loaded files, then the cache directory."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from autotune_cache import env
from autotune_cache.atomic import current_umask
from autotune_cache.dirstore import DirectoryStore
from autotune_cache.errors import CacheDirError, DumpShardingError, MissingResultError
from autotune_cache.flags import Settings, regen_hint, settings_from_env
from autotune_cache.formats import load_results, save_results
from autotune_cache.key import CacheKey
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.remote import RemoteStore
from autotune_cache.stats import Stats

log = logging.getLogger("autotune_cache")

def _check_writable_parent(path: Path, flag: str) -> None:
    """Fail at startup, naming the flag, when `path` could never be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CacheDirError(f"{flag}={path}: cannot create {path.parent} ({e.strerror or e}); "
                            "point the flag at a writable path.") from e
    if path.is_dir():
        raise CacheDirError(f"{flag}={path}: is a directory; give a file path.")
    if not os.access(path.parent, os.W_OK):
        raise CacheDirError(f"{flag}={path}: {path.parent} is not writable; point the flag at "
                            "a writable path.")


# How long a process waits for another process that is tuning the same key.
DEFAULT_LOCK_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class Found:
    """An entry together with where it came from, for messages."""

    entry: pb.Entry
    key: CacheKey
    origin: str


class Cache:
    """Looks results up across tiers and records new ones to every writable tier."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self.stats = Stats()
        self._lock = threading.RLock()
        self._memory: dict[str, Found] = {}
        self._loaded: dict[str, Found] = {}
        self._used: dict[str, pb.Entry] = {}
        self._dump_dirty = False
        if self.settings.dump_to and (shards := env.total_shards()) > 1:
            raise DumpShardingError(
                f"--dump_autotune_results_to={self.settings.dump_to}: this test runs in "
                f"{shards} shards, so no shard sees every result and the "
                "dump would be incomplete. Run the dump with --test_sharding_strategy=disabled "
                "(the `.dump` target of autotuned_py_test already has shard_count = 1; do not "
                "force shards on it)."
            )
        if self.settings.dump_to is not None:
            _check_writable_parent(self.settings.dump_to, "--dump_autotune_results_to")
        for path in self.settings.load_from:
            for entry in load_results(path):
                key = CacheKey.from_proto(entry.key)
                digest = key.digest()
                if digest in self._loaded:
                    log.debug("autotune_cache: %s overrides %s for %s",
                              path, self._loaded[digest].origin, key.describe())
                self._loaded[digest] = Found(entry, key, str(path))
        settings = self.settings
        self.store = DirectoryStore(settings.cache_dir) if settings.cache_dir else None
        self.remote = RemoteStore(settings.remote_cache) if settings.remote_cache else None

    # ----- lookups -------------------------------------------------------------------------

    def _find(self, key: CacheKey) -> Found | None:
        digest = key.digest()
        found = self._memory.get(digest) or self._loaded.get(digest)
        if found is None and self.store is not None:
            entry = self.store.get(key)
            if entry is not None:
                found = Found(entry, key, str(self.store.path_for(key)))
        if found is None and self.remote is not None:
            entry = self.remote.get(key)
            if entry is not None:
                found = Found(entry, key, f"remote {self.remote.url}")
                if self.store is not None and self.settings.cache_mode == "update":
                    self.store.put(entry)  # keep a local copy for the next process
        return found

    def lookup(self, key: CacheKey) -> pb.Entry | None:
        """The recorded entry for `key`, or None on a miss (an error under require_complete)."""
        with self._lock:
            digest = key.digest()
            in_memory = digest in self._memory
            found = self._find(key)
            if found is not None:
                self.stats.hit(0.0 if in_memory else found.entry.result.tuning_seconds)
                self._memory[digest] = found
                self._mark_used(found.entry)
                return found.entry
            near = self.near_misses(key)
            # Entries that differ only in the candidate list are not stale: their timings are
            # reused by an incremental re-tune.
            stale = [f for f in near if f.key.source_fingerprint != key.source_fingerprint
                     or f.key.device != key.device or f.key.toolchain != key.toolchain]
            self.stats.miss(key.describe() if stale else None,
                            candidates_changed=bool(near) and not stale)
            if stale:
                log.warning("autotune_cache: stale cache for %s: %s", key.describe(),
                            "; ".join(", ".join(key.stale_reasons(f.key)) for f in stale))
            elif near:
                log.info("autotune_cache: candidate list of %s changed; re-tuning only the new "
                         "candidates", key.describe())
            if self.settings.require_complete:
                raise MissingResultError(self.missing_message(key, near))
            return None

    def refresh(self, key: CacheKey) -> pb.Entry | None:
        """Re-read the shared tiers (directory, remote) for `key`, after waiting for another
        process's tuning of it."""
        with self._lock:
            found = None
            if self.store is not None and (entry := self.store.get(key)) is not None:
                found = Found(entry, key, str(self.store.path_for(key)))
            elif self.remote is not None and (entry := self.remote.get(key)) is not None:
                found = Found(entry, key, f"remote {self.remote.url}")
            if found is None:
                return None
            self._memory[key.digest()] = found
            self.stats.from_peer(found.entry.result.tuning_seconds)
            self._mark_used(found.entry)
            return found.entry

    def _same_problem(self, key: CacheKey) -> Iterator[Found]:
        """Every known entry for key's kernel and problem, from every tier, once each."""
        seen: set[str] = set()

        def fresh(entry: pb.Entry, origin: str) -> Found | None:
            k = CacheKey.from_proto(entry.key)
            if k.kernel != key.kernel or k.problem != key.problem or k.digest() in seen:
                return None
            seen.add(k.digest())
            return Found(entry, k, origin)

        for tier in (self._memory, self._loaded):
            for found in list(tier.values()):
                if (f := fresh(found.entry, found.origin)) is not None:
                    yield f
        if self.store is not None:
            for entry in self.store.same_problem(key):
                k = CacheKey.from_proto(entry.key)
                if (f := fresh(entry, str(self.store.path_for(k)))) is not None:
                    yield f
        if self.remote is not None:
            for entry in self.remote.same_problem(key):
                if (f := fresh(entry, f"remote {self.remote.url}")) is not None:
                    yield f

    def near_misses(self, key: CacheKey) -> list[Found]:
        """Entries for the same kernel and problem under another device, toolchain or source."""
        return [f for f in self._same_problem(key) if f.key != key]

    def same_source(self, key: CacheKey) -> list[pb.Entry]:
        """Entries that differ from `key` only in the candidate list: reusable timings."""
        return [f.entry for f in self.near_misses(key)
                if f.key.source_fingerprint == key.source_fingerprint
                and f.key.device == key.device and f.key.toolchain == key.toolchain]

    def missing_message(self, key: CacheKey, near: list[Found]) -> str:
        """The require_complete error: what is missing, what is stale, how to regenerate."""
        sources = [str(p) for p in self.settings.load_from]
        if self.settings.cache_dir:
            sources.append(f"cache dir {self.settings.cache_dir}")
        if self.settings.remote_cache:
            sources.append(f"remote {self.settings.remote_cache}")
        lines = [
            "autotune_cache: no tuned result for",
            f"  kernel:    {key.kernel}",
            f"  problem:   {key.problem}",
            f"  device:    {key.device}",
            f"  toolchain: {key.toolchain_str}",
            "and --require_complete_autotune_results forbids tuning it here.",
            f"Searched: {', '.join(sources) or 'nothing (no results loaded)'}.",
        ]
        if near:
            lines.append("The cache is stale: it has this kernel and problem only for")
            for f in near[:10]:
                lines.append(f"  - {'; '.join(key.stale_reasons(f.key))}  (in {f.origin})")
        hint = regen_hint()
        if hint:
            lines.append(f"Regenerate the cache with:\n  {hint}")
        else:
            lines.append(
                "Regenerate the cache by running once with "
                "--dump_autotune_results_to=PATH (on this device) and committing PATH."
            )
        return "\n".join(lines)

    # ----- recording -----------------------------------------------------------------------

    def record(self, entry: pb.Entry, *, benchmarks: int = 0) -> None:
        """Store a newly tuned entry in memory, the directory (unless read mode) and the dump."""
        key = CacheKey.from_proto(entry.key)
        with self._lock:
            self._memory[key.digest()] = Found(entry, key, "this process")
            self.stats.tuning_done(entry.result.tuning_seconds, benchmarks)
            if self.settings.cache_mode == "update":
                if self.store is not None:
                    self.store.put(entry)
                if self.remote is not None:
                    self.remote.put(entry)
            self._mark_used(entry)
            self.flush_dump()

    def _mark_used(self, entry: pb.Entry) -> None:
        if self.settings.dump_to is not None:
            self._used[CacheKey.from_proto(entry.key).digest()] = entry
            self._dump_dirty = True

    def flush_dump(self) -> None:
        """Write the dump file now if it has changed since it was last written."""
        with self._lock:
            if self.settings.dump_to is not None and self._dump_dirty:
                try:
                    save_results(self.settings.dump_to, self._used.values())
                except OSError as e:
                    raise CacheDirError(
                        f"--dump_autotune_results_to={self.settings.dump_to}: cannot write the "
                        f"dump ({e.strerror or e}); point the flag at a writable path."
                    ) from e
                self._dump_dirty = False

    def close(self) -> None:
        """Final dump write (an empty dump is still written) and the exit summary."""
        with self._lock:
            if self.settings.dump_to is not None and not self.settings.dump_to.exists():
                self._dump_dirty = True
            self.flush_dump()
        self.stats.report_at_exit()

    @contextlib.contextmanager
    def tune_lock(self, key: CacheKey, timeout: float = DEFAULT_LOCK_TIMEOUT_S) -> Iterator[bool]:
        """Hold the cross-process lock for tuning `key` (the directory's, else the remote
        server's); yields False when nothing is shared (nothing to lock), True once held."""
        if self.settings.cache_mode == "read" or (self.store is None and self.remote is None):
            yield False
            return
        if self.store is None:
            assert self.remote is not None
            with self.remote.lock(key, timeout) as held:
                yield held
            return
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


_cache: Cache | None = None
_cache_lock = threading.Lock()
_atexit_registered = False


def _at_exit() -> None:
    if _cache is not None:
        _cache.close()


def _install(settings: Settings) -> Cache:
    """Make a new process-wide cache; the caller holds _cache_lock."""
    global _cache, _atexit_registered
    if _cache is not None:
        _cache.close()
    _cache = Cache(settings)
    if not _atexit_registered:
        atexit.register(_at_exit)
        _atexit_registered = True
    return _cache


def configure(settings: Settings | None = None) -> Cache:
    """Replace the process-wide cache: the Python equivalent of AUTOTUNE_FLAGS."""
    with _cache_lock:
        return _install(settings if settings is not None else settings_from_env())


def get_cache() -> Cache:
    """The process-wide cache, configured from AUTOTUNE_FLAGS on first use."""
    cache = _cache
    if cache is not None:
        return cache
    with _cache_lock:
        if _cache is None:
            _install(settings_from_env())
        assert _cache is not None
        return _cache
