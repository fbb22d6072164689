"""Share compiled kernels across a CI fleet: Triton's remote compile cache on our Redis server.

`--autotune_remote_compile_cache` (with `--autotune_remote_cache=redis://HOST:PORT[/DB]`) points
Triton's compile cache at the same server as our results, so a fleet compiles each winner once:
the first machine compiles it and uploads the binaries, every later sandbox downloads them.

- It sets `TRITON_CACHE_MANAGER=triton.runtime.cache:RemoteCacheManager` (through `env`, so
  child processes inherit it), with this module's backend: the URL of --autotune_remote_cache,
  2 s timeouts, keys under `autotune_cache:v1:triton:`, and, when the server is down, one warning
  and "not cached" answers, so Triton compiles locally. A TRITON_CACHE_MANAGER the user set wins,
  with a warning.
- The flags decide at every tuner's slow path: configured without the flag, the process (and
  the children it starts from then on) stops using the server (`disable`). A child process that
  inherited the variables decides from its own AUTOTUNE_FLAGS at its first compile: without the
  flag it compiles locally and removes them for its own children.
- Values larger than MAX_VALUE_BYTES are neither uploaded nor used.
- Compiled kernels are code, and anyone who can write the server could plant one. Every value
  is written as TAG_PREFIX, an HMAC-SHA256 tag under AUTOTUNE_REMOTE_COMPILE_KEY (a secret the
  fleet's machines hold, never the server) over the Redis key and the bytes, then the bytes; a
  value whose tag does not verify is never used (Triton compiles locally) and is counted in one
  warning. The flag refuses to start without the key (docs/security.md).
- `--autotune_cache_mode=read` reads the server and never uploads to it.
- A slow server is given up after its time budget (foundation/budget.py) of waiting in this
  process, with one warning.
(docs/decisions/0011-remote-compile-cache.md)
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

try:
    from triton.runtime.cache import RemoteCacheBackend
except ImportError:  # a Triton without a remote cache: the flag then has nothing to configure
    RemoteCacheBackend = object  # type: ignore[assignment,misc]

from autotune_cache.errors import FlagError
from autotune_cache.foundation import env
from autotune_cache.foundation.budget import TimeBudget
from autotune_cache.foundation.redact import redact
from autotune_cache.foundation.urls import docs_url
from autotune_cache.triton import process

if TYPE_CHECKING:
    from autotune_cache.config.flags import Settings

log = logging.getLogger("autotune_cache")

TRITON_CACHE_MANAGER = env.TRITON_CACHE_MANAGER
TRITON_REMOTE_CACHE_BACKEND = env.TRITON_REMOTE_CACHE_BACKEND
REMOTE_MANAGER = "triton.runtime.cache:RemoteCacheManager"
BACKEND = f"{__name__}:RedisCompileBackend"
NAMESPACE = "autotune_cache:v1:triton"
# A compiled kernel (cubin, PTX, IR, metadata) is well under this; larger values are not ours.
MAX_VALUE_BYTES = 64 * 1024 * 1024
TIMEOUT_S = 2.0

TAG_PREFIX = b"autotune_cache-hmac-sha256:"  # then the 32-byte tag, then the file's bytes
TAG_BYTES = 32
MIN_KEY_BYTES = 32

class _Remote:
    """This process's connection to the server and what it learned about it (process.py: a
    forked child connects afresh, with its own time budget)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.url: str | None = None
        self.client: Any = None
        self.errors: tuple[type[BaseException], ...] = ()
        self.available = True
        self.read_only = False
        self.budget = TimeBudget()  # waiting for the server (foundation/budget.py)
        self.rejected = 0


def _remote() -> _Remote:
    return process.current().made("remote_compile", _Remote)


def server_url() -> str | None:
    """The server this process uses now, or None."""
    return _remote().url


# A key with fewer distinct characters is a placeholder (`xxxx…`, `0000…`), however long; a random
# hex secret of 32 characters has about 14 of the 16 hex digits.
MIN_KEY_DISTINCT = 8


def _secret() -> bytes:
    """The fleet's key (AUTOTUNE_REMOTE_COMPILE_KEY); FlagError naming the variable when it is
    missing, short, or a placeholder. Never logged."""
    key = env.remote_compile_key()
    if len(key) < MIN_KEY_BYTES or len(set(key)) < MIN_KEY_DISTINCT:
        state = ("is not set" if not key else
                 f"is shorter than {MIN_KEY_BYTES} characters" if len(key) < MIN_KEY_BYTES else
                 f"has fewer than {MIN_KEY_DISTINCT} distinct characters (a placeholder such as "
                 "32 times the same letter, not a secret)")
        raise FlagError(
            f"--autotune_remote_compile_cache: {env.AUTOTUNE_REMOTE_COMPILE_KEY} {state}. "
            "Compiled kernels downloaded from the server run as code on this machine, so each "
            "is authenticated with a key the fleet's machines hold and the server does not: "
            f"set {env.AUTOTUNE_REMOTE_COMPILE_KEY} to a secret of at least {MIN_KEY_BYTES} "
            "characters from your CI's secret store, the same on every machine (for example "
            "`python -c 'import secrets; print(secrets.token_hex(32))'`), or drop the flag.")
    return key


def seal(name: str, data: bytes, key: bytes) -> bytes:
    """The value stored for `data` at Redis key `name`: TAG_PREFIX, its tag, the bytes."""
    tag = hmac.new(key, name.encode() + b"\0" + data, hashlib.sha256).digest()
    return TAG_PREFIX + tag + data


def unseal(name: str, value: bytes, key: bytes) -> bytes | None:
    """The bytes of a stored value whose tag verifies under `key` for `name`, else None."""
    head = len(TAG_PREFIX) + TAG_BYTES
    if len(value) < head or not value.startswith(TAG_PREFIX):
        return None
    data = value[head:]
    expected = hmac.new(key, name.encode() + b"\0" + data, hashlib.sha256).digest()
    return data if hmac.compare_digest(value[len(TAG_PREFIX):head], expected) else None


def enable(url: str, *, read_only: bool = False) -> bool:
    """Point Triton's compile cache at the Redis server `url` in this process and its children
    (`read_only`: --autotune_cache_mode=read, nothing is uploaded); returns False (and warns)
    when the user's own TRITON_CACHE_MANAGER is kept. FlagError without the fleet's key."""
    state = _remote()
    _secret()
    state.read_only = read_only
    current, _ = env.triton_cache_manager()
    if current and current != REMOTE_MANAGER:
        log.warning("autotune_cache: --autotune_remote_compile_cache is ignored: "
                    "TRITON_CACHE_MANAGER=%s is set; unset it to share compiled kernels on %s",
                    current, url)
        return False
    with state.lock:
        if state.url != url:
            state.url, state.client, state.available = url, None, True
    env.set_triton_cache_manager(REMOTE_MANAGER, BACKEND)
    return True


def server_of(settings: Settings) -> str | None:
    """The Redis URL `settings` ask Triton's compile cache to use, or None."""
    return settings.remote_cache if settings.remote_compile_cache else None


def follow(settings: Settings) -> None:
    """Enable or disable the remote compile cache as `settings` ask (the tuner's slow path calls
    this before each tuning's first compile: a process reconfigured without the flag, or one
    that inherited the variables from a parent that had it, stops using the server)."""
    url = server_of(settings)
    if url is not None:
        enable(url, read_only=settings.cache_mode == "read")
    else:
        disable()


def disable() -> None:
    """Undo `enable` when the flags no longer ask for it (a process reconfigured without
    --autotune_remote_compile_cache, or a child whose AUTOTUNE_FLAGS dropped it): Triton's two
    variables are removed only while they still name our backend, so a user's own cache manager
    is never touched, and the next `enable` connects afresh."""
    state = _remote()
    if env.triton_cache_manager() != (REMOTE_MANAGER, BACKEND):
        return
    env.set_triton_cache_manager(None, None)
    with state.lock:
        state.url, state.client, state.available = None, None, True


def _connect() -> Any:
    """The process's one client (a connection pool), made on first use; None in a process
    that inherited Triton's variables while its own flags do not ask for the server."""
    state = _remote()
    with state.lock:
        if state.client is not None:
            return state.client
        if state.url is None:
            # A child process that inherited Triton's variables but not our call: its flags
            # (AUTOTUNE_FLAGS, inherited or its own) decide, as the tuner's slow path would.
            from autotune_cache.config.flags import settings_from_env

            settings = settings_from_env()
            state.url = server_of(settings)
            state.read_only = settings.cache_mode == "read"
            if state.url is not None:
                _secret()
        if state.url is not None:
            import redis

            state.errors = (redis.exceptions.RedisError,)
            try:
                state.client = redis.Redis.from_url(state.url, socket_timeout=TIMEOUT_S,
                                                    socket_connect_timeout=TIMEOUT_S)
            except ValueError as e:
                raise FlagError(redact(f"--autotune_remote_cache={state.url}: not a Redis URL "
                                       f"({e}); use redis://HOST:PORT[/DB]")) from e
            return state.client
    # Not asked for here: this compile is answered "not cached" (Triton compiles it and files
    # it locally), and the variables are removed, so that this process's later compiles and the
    # children it starts use Triton's local cache.
    log.debug("autotune_cache: %s is inherited, but this process's flags do not set "
              "--autotune_remote_compile_cache; compiling locally", TRITON_CACHE_MANAGER)
    disable()
    return None


def _down(error: BaseException) -> None:
    """The first failure turns the remote compile cache off for this process, with a warning."""
    state = _remote()
    if state.available:
        state.available = False
        log.warning("autotune_cache: the remote compile cache on %s is unavailable (%s); "
                    "compiling locally", redact(str(state.url)), redact(str(error)))


@contextlib.contextmanager
def _timed() -> Iterator[None]:
    """Count the time spent waiting for the server; past the budget, give it up (one warning)."""
    state = _remote()

    def give_up(warning: str) -> None:
        if state.available:
            state.available = False
            log.warning(warning)

    with state.budget.waiting(f"the remote compile cache on {redact(str(state.url))}",
                              "compiling locally", give_up):
        yield


def _reject(names: list[str]) -> None:
    """Values whose tag did not verify: never used; said once per process, then counted."""
    state = _remote()
    first = state.rejected == 0
    state.rejected += len(names)
    if first:
        log.warning("autotune_cache: the remote compile cache on %s holds compiled kernels whose "
                    "authentication tag does not verify under %s (planted by a writer without "
                    "the key, or written with another key), e.g. %s; they are never used, "
                    "Triton compiles them here (%s)", redact(str(state.url)),
                    env.AUTOTUNE_REMOTE_COMPILE_KEY, names[0], docs_url("security.md"))


class RedisCompileBackend(RemoteCacheBackend):
    """Triton's `RemoteCacheBackend` on the --autotune_remote_cache server (see the module
    docstring); Triton makes one per kernel hash (`key`)."""

    def __init__(self, key: str) -> None:
        self._key = key
        self._client = _connect()  # None: answer "not cached", store nothing

    def _name(self, filename: str) -> str:
        return f"{NAMESPACE}:{self._key}:{filename}"

    def get(self, filenames: list[str]) -> dict[str, bytes]:
        """The files the server has, by name; {} when it is down. Each value is read only after
        its length (STRLEN) says it fits in MAX_VALUE_BYTES, and then at most that many bytes
        (GETRANGE): a larger or foreign value is never downloaded, and Triton compiles it."""
        state = _remote()
        if not state.available or self._client is None:
            return {}
        names = [self._name(f) for f in filenames]
        limit = MAX_VALUE_BYTES + len(TAG_PREFIX) + TAG_BYTES
        try:
            with _timed():
                pipe = self._client.pipeline(transaction=False)
                for name in names:
                    pipe.strlen(name)
                sizes = pipe.execute(raise_on_error=False)
                fits = [(f, name) for f, name, size in zip(filenames, names, sizes, strict=True)
                        if type(size) is int and 0 < size <= limit]
                if not fits:
                    return {}
                pipe = self._client.pipeline(transaction=False)
                for _, name in fits:
                    pipe.getrange(name, 0, limit - 1)
                values = pipe.execute(raise_on_error=False)
        except state.errors as e:
            _down(e)
            return {}
        key = _secret()
        found, rejected = {}, []
        for (f, name), value in zip(fits, values, strict=True):
            if not isinstance(value, bytes) or not 0 < len(value) <= limit:
                continue
            data = unseal(name, value, key)
            if data is None:
                rejected.append(name)
            elif data:
                found[f] = data
        if rejected:
            _reject(rejected)
        return found

    def put(self, filename: str, data: bytes) -> None:
        """Upload one file (best effort), sealed with the fleet's key; nothing in read mode."""
        state = _remote()
        if (state.read_only or not state.available or self._client is None
                or len(data) > MAX_VALUE_BYTES):
            return
        name = self._name(filename)
        try:
            with _timed():
                self._client.set(name, seal(name, data, _secret()))
        except state.errors as e:
            _down(e)
