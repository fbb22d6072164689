"""The shared remote tier: results on a Redis server, for fleets of CI machines.

Everything the server sends is untrusted (docs/security.md):
- every read is bounded before it happens: a value is fetched with GETRANGE up to
  MAX_REMOTE_VALUE_BYTES (its STRLEN, in the same round trip, says whether it is larger); a miss
  reads at most MAX_REMOTE_INDEX_MEMBERS index members (SRANDMEMBER: the cost does not grow with
  the index) and at most MAX_REMOTE_MISS_BYTES of near-miss values; and the connection refuses
  any single reply larger than a value plus a margin, so a server that sends more than asked
  cannot make this process buffer it;
- an oversized, empty, foreign or undecodable value, a value holding another key, a value of
  another Redis type and an index member that is not one of our digests are each a miss with one
  warning (validate.warn_damaged) naming the server and the Redis key;
- a server that does not answer as Redis does (a reply of the wrong type, a protocol error, an
  HTTP server) disables the tier for the process with a warning that says so, as an unreachable
  one does: the remote tier never fails a run;
- the URL is shown with its password replaced by `***` (redact.py) in every message and repr;
- a slow server is given up: the process spends at most TIME_BUDGET_S waiting for the tier's
  lookups and uploads (each call stays under its socket timeout, so a server answering in 1.8 s
  of a 2 s timeout once cost 3.6 s per miss, silently); past the budget the tier is disabled for
  the process with one warning naming the time spent.

The tuning lock is a short lease its holder renews (lease.py), so a killed holder stalls its
peers for at most LOCK_LEASE_S, and a waiter whose own wait runs out tunes without the lock.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from typing import Any

from google.protobuf import message

from autotune_cache.errors import FlagError
from autotune_cache.foundation.budget import REMOTE_TIME_BUDGET_S, TimeBudget
from autotune_cache.foundation.key import CacheKey
from autotune_cache.foundation.lease import renewed_lease
from autotune_cache.foundation.limits import (
    MAX_REMOTE_INDEX_MEMBERS,
    MAX_REMOTE_MISS_BYTES,
    MAX_REMOTE_VALUE_BYTES,
)
from autotune_cache.foundation.redact import redact
from autotune_cache.foundation.validate import warn_damaged
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.tiers.base import Found

log = logging.getLogger("autotune_cache")

NAMESPACE = "autotune_cache:v1"
# One entry is a few KiB; larger values are not ours and are refused.
MAX_VALUE_BYTES = MAX_REMOTE_VALUE_BYTES
# The largest single reply the connection accepts: a value, plus room for the reply's framing
# and an index page of digests.
MAX_REPLY_BYTES = MAX_REMOTE_VALUE_BYTES + 64 * 1024
# The tuning lock's lease: a live holder renews it every third of this; a killed one's runs out.
LOCK_LEASE_S = 10.0
# The most one process waits on the remote tier's lookups and uploads (the tuning lock's waits
# for a peer are not counted) before giving the server up (foundation/budget.py).
TIME_BUDGET_S = REMOTE_TIME_BUDGET_S
_DIGEST = re.compile(rb"[0-9a-f]{64}")


def _problem_index(key: CacheKey) -> str:
    return f"{NAMESPACE}:idx:{key.problem_group()}"


class NotRedisError(Exception):
    """The server's reply is not what a Redis server answers to the command sent."""


# What redis-py itself raises when a reply has a shape no Redis server sends (a number where a
# pipeline expects a list, a string where its lock script returns a number): only ever caught
# around calls into the client, where it means the endpoint does not speak Redis.
_CONFUSED = (TypeError, ValueError, AttributeError, IndexError, KeyError)


def _execute(pipe: Any, **options: Any) -> list[Any]:
    """`pipe.execute(**options)`, with redis-py's confusion at a foreign reply named."""
    try:
        answers = pipe.execute(**options)
    except _CONFUSED as e:
        raise NotRedisError(f"{type(e).__name__} reading a pipeline's replies: {e}") from None
    if not isinstance(answers, list):
        raise NotRedisError(f"a pipeline answered {type(answers).__name__}, not a list")
    return answers


def _bounded_parser() -> type | None:
    """redis-py's RESP2 parser with each reply capped at MAX_REPLY_BYTES as it is received, or
    None when this redis-py lays its parser out differently (then only our own reads, not the
    server's replies, are bounded)."""
    try:
        from redis._parsers.resp2 import _RESP2Parser
        from redis.exceptions import InvalidResponse
    except ImportError:  # pragma: no cover - redis-py < 5 is below our floor
        return None

    class _CountingSocket:
        """The connection's socket, counting what one reply has received so far."""

        def __init__(self, sock: Any) -> None:
            self._sock = sock
            self.received = 0

        def recv(self, size: int) -> bytes:
            data = self._sock.recv(size)
            self.received += len(data)
            if self.received > MAX_REPLY_BYTES:
                raise InvalidResponse(
                    f"the server sent a reply over {MAX_REPLY_BYTES:,} bytes (no reply to our "
                    "commands is that large)")
            return data

        def __getattr__(self, name: str) -> Any:
            return getattr(self._sock, name)

    class BoundedParser(_RESP2Parser):
        _counting: _CountingSocket | None = None

        def on_connect(self, connection: Any) -> None:
            super().on_connect(connection)
            buffer = getattr(self, "_buffer", None)
            if buffer is not None and hasattr(buffer, "_sock"):
                self._counting = _CountingSocket(buffer._sock)
                buffer._sock = self._counting

        def read_response(self, *args: Any, **kwargs: Any) -> Any:
            if self._counting is not None:
                self._counting.received = 0
            return super().read_response(*args, **kwargs)

    return BoundedParser


class RedisTier:
    """Entries on a Redis server, keyed by key digest, with an index by kernel and problem.

    The remote tier is an accelerator, never a dependency: when the server cannot be reached,
    refuses, or does not speak Redis, the process warns once and carries on without it."""

    name = "remote"
    shared = True

    def __init__(self, url: str, timeout_s: float = 2.0, *, writable: bool = True) -> None:
        self.writable = writable
        self.url = redact(url)  # how messages name the server; the password never leaves here
        try:
            import redis
        except ImportError as e:
            raise FlagError(
                f"--autotune_remote_cache={self.url}: the Redis client is not installed; "
                "pip install 'redis>=5' (what the package's [redis] extra adds)"
            ) from e
        options: dict[str, Any] = {"socket_timeout": timeout_s,
                                   "socket_connect_timeout": timeout_s}
        parser = _bounded_parser()
        if parser is not None:
            options.update(parser_class=parser, protocol=2)
        try:
            self._client = redis.Redis.from_url(url, **options)
        except ValueError as e:
            raise FlagError(redact(f"--autotune_remote_cache={url}: not a Redis URL ({e}); "
                                   "use redis://HOST:PORT[/DB]")) from None
        # Any server-side refusal (down, read-only replica, out of memory, ...) disables the
        # tier for this process; a shared cache must never fail a test.
        self._errors: tuple[type[BaseException], ...] = (redis.exceptions.RedisError,
                                                         NotRedisError)
        self._response_error = redis.exceptions.ResponseError
        self._not_redis = (NotRedisError, redis.exceptions.InvalidResponse)
        self.available = True
        self._large_indexes: set[str] = set()
        self._budget = TimeBudget(TIME_BUDGET_S)  # waiting for the server

    def __repr__(self) -> str:
        return f"RedisTier({self.url!r}, writable={self.writable})"

    @property
    def origin(self) -> str:
        """How messages name this tier."""
        return f"remote {self.url}"

    def searched(self) -> list[str]:
        return [self.origin]

    def _down(self, error: BaseException) -> None:
        if self.available:
            what = ("does not answer as a Redis server"
                    if isinstance(error, self._not_redis) else "is unusable")
            log.warning("autotune_cache: remote cache %s %s (%s: %s); continuing without it "
                        "for this process", self.url, what, type(error).__name__,
                        redact(str(error)))
        self.available = False

    @property
    def spent_s(self) -> float:
        """Seconds this process has waited for the server (its lookups and uploads)."""
        return self._budget.spent_s

    @contextlib.contextmanager
    def _timed(self) -> Iterator[None]:
        """Count the time spent waiting for the server; past the budget, give it up."""
        with self._budget.waiting(f"remote cache {self.url}",
                                  "continuing without it for this process", self._give_up):
            yield

    def _give_up(self, warning: str) -> None:
        if self.available:
            self.available = False
            log.warning(warning)

    def _decode(self, data: bytes, where: str) -> tuple[CacheKey, pb.Entry] | None:
        """The (key, entry) in a value, or None after a warning when it is not one of ours."""
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

    def _fetch(self, names: list[str]) -> list[bytes | None]:
        """The values at `names` (None: no such key), each read only after its length says it
        fits, within MAX_REMOTE_MISS_BYTES in all; a value too large, of another Redis type or
        past the budget is None after a warning naming it."""
        pipe = self._client.pipeline(transaction=False)
        for name in names:
            pipe.exists(name)
            pipe.strlen(name)
        answers = _execute(pipe, raise_on_error=False)
        wanted: list[str] = []
        budget = MAX_REMOTE_MISS_BYTES
        for i, name in enumerate(names):
            exists, size = answers[2 * i], answers[2 * i + 1]
            where = f"{self.origin} {name}"
            if isinstance(exists, self._response_error) or isinstance(size, self._response_error):
                warn_damaged(where, "it is not a string value (another Redis type)",
                             kind="remote")
                continue
            exists, size = _integer(exists, "EXISTS"), _integer(size, "STRLEN")
            if not exists:
                continue
            if size > MAX_VALUE_BYTES:
                warn_damaged(where, f"the value is {size:,} bytes, over the "
                             f"{MAX_VALUE_BYTES:,}-byte limit (not read)", kind="remote")
                continue
            if size > budget:
                log.warning("autotune_cache: %s: skipped; this miss already read %s of near-miss "
                            "values from the server (the limit per miss)", where,
                            f"{MAX_REMOTE_MISS_BYTES:,} bytes")
                continue
            budget -= size
            wanted.append(name)
        values: dict[str, bytes | None] = {}
        if wanted:
            pipe = self._client.pipeline(transaction=False)
            for name in wanted:
                pipe.getrange(name, 0, MAX_VALUE_BYTES - 1)
            for name, value in zip(wanted, _execute(pipe, raise_on_error=False), strict=True):
                if isinstance(value, self._response_error):
                    warn_damaged(f"{self.origin} {name}", "it is not a string value",
                                 kind="remote")
                    continue
                values[name] = _bytes(value, "GETRANGE")
        return [values.get(name) for name in names]

    def get(self, key: CacheKey) -> Found | None:
        """The remote entry for `key`, or None (also when the server is down or the entry bad)."""
        if not self.available:
            return None
        name = f"{NAMESPACE}:entry:{key.digest()}"
        try:
            with self._timed():
                data = self._fetch([name])[0]
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
            with self._timed():
                pipe = self._client.pipeline()
                pipe.set(name, entry.SerializeToString(deterministic=True))
                pipe.sadd(_problem_index(key), key.digest())
                _execute(pipe)
        except self._errors as e:
            self._down(e)

    def same_problem(self, key: CacheKey) -> list[Found]:
        """Remote entries for this kernel and problem, whatever their device or toolchain: at
        most MAX_REMOTE_INDEX_MEMBERS of them, however large the index has grown."""
        if not self.available:
            return []
        index = _problem_index(key)
        try:
            with self._timed():
                return self._same_problem(index)
        except self._errors as e:
            self._down(e)
            return []

    def _same_problem(self, index: str) -> list[Found]:
        """same_problem's reads, timed by the caller."""
        pipe = self._client.pipeline(transaction=False)
        pipe.scard(index)
        pipe.srandmember(index, MAX_REMOTE_INDEX_MEMBERS)
        size, members = _execute(pipe, raise_on_error=False)
        if isinstance(size, self._response_error):
            warn_damaged(f"{self.origin} {index}", "this index is not a set (it is ignored)",
                         kind="remote index")
            return []
        if (_integer(size, "SCARD") > MAX_REMOTE_INDEX_MEMBERS
                and index not in self._large_indexes):
            self._large_indexes.add(index)
            log.warning("autotune_cache: %s %s has %s members, more than the %s a lookup "
                        "reads; near misses (stale-entry names, reusable timings) come from "
                        "a sample of them", self.origin, index, f"{size:,}",
                        f"{MAX_REMOTE_INDEX_MEMBERS:,}")
        if not isinstance(members, list):
            raise NotRedisError(f"SRANDMEMBER answered {type(members).__name__}, not a list")
        # Index members are written by anyone: only our 64-hex digests name entries.
        digests = sorted({d.decode() for d in members
                          if isinstance(d, bytes) and _DIGEST.fullmatch(d)})
        if not digests:
            return []
        names = [f"{NAMESPACE}:entry:{d}" for d in digests]
        values = self._fetch(names)
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
                # Renewal and release swallow these too (lease.py): a foreign endpoint's
                # replies confuse redis-py's lock, never this process.
                held = stack.enter_context(renewed_lease(
                    self._client, name, LOCK_LEASE_S, timeout, (*self._errors, *_CONFUSED)))
            except self._errors as e:
                self._down(e)
                held = False
            except _CONFUSED as e:
                self._down(NotRedisError(f"{type(e).__name__} in the lock's reply: {e}"))
                held = False
            else:
                if not held:
                    log.warning("autotune_cache: waited %.0f s for another machine tuning %s "
                                "(remote lock %s on %s); tuning it without the lock", timeout,
                                key.describe(), name, self.url)
            yield held


def _integer(value: object, command: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise NotRedisError(f"{command} answered {type(value).__name__}, not an integer")
    return value


def _bytes(value: object, command: str) -> bytes:
    if not isinstance(value, bytes):
        raise NotRedisError(f"{command} answered {type(value).__name__}, not a string")
    return value
