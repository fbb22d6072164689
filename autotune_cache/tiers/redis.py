"""The shared remote tier: results on a Redis server, for fleets of CI machines.

Decision (issue 11): every value read from the server is untrusted. An oversized, empty, foreign
or undecodable value, a value holding another key, and an index member that is not one of our
digests are each a miss with one warning (validate.warn_damaged) that names the server and the
Redis key; the Cache then checks the entry's winner like any other tier's. The tuning lock is a
short lease its holder renews (lease.py), so a killed holder stalls its peers for at most
LOCK_LEASE_S, and a waiter whose own wait runs out tunes without the lock.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator

from google.protobuf import message

from autotune_cache.errors import FlagError
from autotune_cache.key import CacheKey
from autotune_cache.lease import renewed_lease
from autotune_cache.limits import MAX_REMOTE_VALUE_BYTES
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.tiers.base import Found
from autotune_cache.validate import warn_damaged

log = logging.getLogger("autotune_cache")

NAMESPACE = "autotune_cache:v1"
# One entry is a few KiB; larger values are not ours and are refused.
MAX_VALUE_BYTES = MAX_REMOTE_VALUE_BYTES
# The tuning lock's lease: a live holder renews it every third of this; a killed one's runs out.
LOCK_LEASE_S = 10.0
_DIGEST = re.compile(rb"[0-9a-f]{64}")


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

    def _decode(self, data: bytes, where: str) -> tuple[CacheKey, pb.Entry] | None:
        """The (key, entry) in a value, or None after a warning when it is not one of ours."""
        if len(data) > MAX_VALUE_BYTES:
            warn_damaged(where, f"the value is {len(data):,} bytes, over the "
                         f"{MAX_VALUE_BYTES:,}-byte limit", kind="remote")
            return None
        try:
            entry = pb.Entry.FromString(data)
        except message.DecodeError as e:
            warn_damaged(where, f"not an entry ({e})", kind="remote")
            return None
        if not entry.key.kernel:
            warn_damaged(where, "empty, or an entry without a key", kind="remote")
            return None
        try:
            return CacheKey.from_proto(entry.key), entry
        except ValueError as e:
            warn_damaged(where, f"its key is malformed ({e})", kind="remote")
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
        where = f"{self.origin} {name}"
        decoded = self._decode(data, where)
        if decoded is None:
            return None
        if decoded[0] != key:
            warn_damaged(where, "it holds the entry of another key", kind="remote")
            return None
        return Found(decoded[1], key, where)

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
            # Index members are written by anyone: only our 64-hex digests name entries.
            digests = sorted(d.decode() for d in self._client.smembers(_problem_index(key))
                             if isinstance(d, bytes) and _DIGEST.fullmatch(d))
            if not digests:
                return []
            names = [f"{NAMESPACE}:entry:{d}" for d in digests]
            values = self._client.mget(names)
        except self._errors as e:
            self._down(e)
            return []
        found = []
        for name, value in zip(names, values, strict=True):
            if value is None:
                continue
            decoded = self._decode(value, f"{self.origin} {name}")
            if decoded is not None:
                found.append(Found(decoded[1], decoded[0], f"{self.origin} {name}"))
        return found

    @contextlib.contextmanager
    def lock(self, key: CacheKey, timeout: float) -> Iterator[bool]:
        """A fleet-wide tuning lock for `key`, held as a renewed lease (lease.py); yields False
        when the server is down, or after a warning when a live peer still holds it after
        `timeout` seconds (the key is then tuned without the lock)."""
        if not self.available:
            yield False
            return
        name = f"{NAMESPACE}:lock:{key.digest()}"
        with contextlib.ExitStack() as stack:
            try:
                held = stack.enter_context(
                    renewed_lease(self._client, name, LOCK_LEASE_S, timeout, self._errors))
            except self._errors as e:
                self._down(e)
                held = False
            else:
                if not held:
                    log.warning("autotune_cache: waited %.0f s for another machine tuning %s "
                                "(remote lock %s on %s); tuning it without the lock", timeout,
                                key.describe(), name, self.url)
            yield held
