"""The shared remote tier: results on a Redis server, for fleets of CI machines."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from google.protobuf import message

from autotune_cache.errors import FlagError
from autotune_cache.key import CacheKey
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.tiers.base import Found

log = logging.getLogger("autotune_cache")

NAMESPACE = "autotune_cache:v1"
# One entry is a few KiB; larger values are not ours and are refused.
MAX_VALUE_BYTES = 4 * 1024 * 1024


def _problem_index(key: CacheKey) -> str:
    return f"{NAMESPACE}:idx:{key.problem_group()}"


class RedisTier:
    """Entries on a Redis server, keyed by key digest, with an index by kernel and problem.

    The remote tier is an accelerator, never a dependency: when the server cannot be reached
    the process warns once and carries on without it."""

    name = "remote"
    shared = True

    def __init__(self, url: str, timeout_s: float = 2.0, *, writable: bool = True) -> None:
        self.writable = writable
        try:
            import redis
        except ImportError as e:
            raise FlagError(
                f"--autotune_remote_cache={url}: the Redis client is not installed; "
                "pip install 'autotune_cache[redis]'"
            ) from e
        try:
            self._client = redis.Redis.from_url(
                url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        except ValueError as e:
            raise FlagError(f"--autotune_remote_cache={url}: not a Redis URL ({e}); "
                            "use redis://HOST:PORT[/DB]") from e
        # Any server-side refusal (down, read-only replica, out of memory, ...) disables the
        # tier for this process; a shared cache must never fail a test.
        self._errors = (redis.exceptions.RedisError,)
        self.url = url
        self.available = True

    @property
    def origin(self) -> str:
        """How messages name this tier."""
        return f"remote {self.url}"

    def searched(self) -> list[str]:
        return [self.origin]

    def _down(self, error: Exception) -> None:
        if self.available:
            log.warning("autotune_cache: remote cache %s is unusable (%s: %s); continuing "
                        "without it for this process", self.url, type(error).__name__, error)
        self.available = False

    def _decode(self, data: bytes, where: str) -> pb.Entry | None:
        if len(data) > MAX_VALUE_BYTES:
            log.warning("autotune_cache: ignoring oversized remote entry %s", where)
            return None
        try:
            return pb.Entry.FromString(data)
        except message.DecodeError as e:
            log.warning("autotune_cache: ignoring damaged remote entry %s (%s); it will be "
                        "re-tuned and overwritten", where, e)
            return None

    def get(self, key: CacheKey) -> Found | None:
        """The remote entry for `key`, or None (also when the server is down or the entry bad)."""
        if not self.available:
            return None
        name = f"{NAMESPACE}:entry:{key.digest()}"
        try:
            data = self._client.get(name)
        except self._errors as e:
            self._down(e)
            return None
        if data is None:
            return None
        entry = self._decode(data, f"{self.url} {name}")
        if entry is None:
            return None
        if CacheKey.from_proto(entry.key) != key:
            log.warning("autotune_cache: remote entry %s holds another key; ignoring it", name)
            return None
        return Found(entry, key, self.origin)

    def put(self, key: CacheKey, entry: pb.Entry) -> None:
        """Publish an entry to the fleet."""
        if not self.available:
            return
        name = f"{NAMESPACE}:entry:{key.digest()}"
        try:
            pipe = self._client.pipeline()
            pipe.set(name, entry.SerializeToString(deterministic=True))
            pipe.sadd(_problem_index(key), key.digest())
            pipe.execute()
        except self._errors as e:
            self._down(e)

    def same_problem(self, key: CacheKey) -> list[Found]:
        """Every remote entry for this kernel and problem, whatever its device or toolchain."""
        if not self.available:
            return []
        try:
            digests = sorted(self._client.smembers(_problem_index(key)))
            if not digests:
                return []
            values = self._client.mget([f"{NAMESPACE}:entry:{d.decode()}" for d in digests])
        except self._errors as e:
            self._down(e)
            return []
        entries = [self._decode(v, self.url) for v in values if v is not None]
        return [Found(e, CacheKey.from_proto(e.key), self.origin) for e in entries
                if e is not None]

    @contextlib.contextmanager
    def lock(self, key: CacheKey, timeout: float) -> Iterator[bool]:
        """A fleet-wide tuning lock for `key`; yields False when the server is down."""
        if not self.available:
            yield False
            return
        lock = self._client.lock(f"{NAMESPACE}:lock:{key.digest()}", timeout=timeout,
                                 blocking_timeout=timeout)
        try:
            acquired = lock.acquire()
        except self._errors as e:
            self._down(e)
            yield False
            return
        if not acquired:
            raise TimeoutError(f"autotune_cache: waited {timeout:.0f} s for another machine "
                               f"tuning {key.describe()} (remote lock on {self.url})")
        try:
            yield True
        finally:
            with contextlib.suppress(*self._errors):
                lock.release()
