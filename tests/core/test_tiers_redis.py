"""The remote tier on a real Redis server: shared hits, backfill, stale names, outages."""

import contextlib
import logging
import shutil
import socket
import subprocess
import time

import pytest

from autotune_cache import Cache, MissingResultError, Settings
from autotune_cache.tiers.redis import NAMESPACE
from tests.cachetools import CPU, fake_tune, make_key

pytest.importorskip("redis", reason="the redis client is not installed (extra 'redis')")
KEY = make_key()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def redis_server(workdir, *extra: str, password: str | None = None):
    """A real redis-server on a free port for the duration (requiring `password` when given);
    yields its URL, with the password in it."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (tools/dev.sh setup installs it)")
    import redis

    port = free_port()
    auth = ("--requirepass", password) if password else ()
    proc = subprocess.Popen([server, "--port", str(port), "--save", "", "--appendonly", "no",
                             "--dir", str(workdir), *auth, *extra], stdout=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=port, password=password)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        yield f"redis://{f':{password}@' if password else ''}127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture
def url(redis_url):
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    return redis_url


def test_result_tuned_on_one_machine_is_a_hit_on_another(url):
    Cache(Settings(remote_cache=url)).record(fake_tune(KEY, tuning_seconds=5.0))
    other = Cache(Settings(remote_cache=url))
    assert other.lookup(KEY) is not None
    assert other.stats.hits == 1 and other.stats.saved_seconds == 5.0


def test_remote_hit_backfills_the_local_directory(url, tmp_path):
    Cache(Settings(remote_cache=url)).record(fake_tune(KEY))
    Cache(Settings(remote_cache=url, cache_dir=tmp_path)).lookup(KEY)
    assert (tmp_path / f"{KEY.problem_group()}-{KEY.digest()}.textproto").exists()


def test_read_mode_does_not_publish(url):
    Cache(Settings(remote_cache=url, cache_mode="read")).record(fake_tune(KEY))
    assert Cache(Settings(remote_cache=url)).lookup(KEY) is None


def test_stale_remote_entries_are_named(url):
    Cache(Settings(remote_cache=url)).record(fake_tune(make_key(device=CPU)))
    with pytest.raises(MissingResultError, match=r"device \[cpu-interpreter.*remote redis://"):
        Cache(Settings(remote_cache=url, require_complete=True)).lookup(KEY)


def test_damaged_remote_value_is_a_miss(url, caplog):
    import redis

    redis.Redis.from_url(url).set(f"{NAMESPACE}:entry:{KEY.digest()}", b"\xff\xff garbage")
    with caplog.at_level(logging.WARNING, logger="autotune_cache"):
        assert Cache(Settings(remote_cache=url)).lookup(KEY) is None
    assert "damaged remote entry" in caplog.text


def test_unreachable_server_warns_once_and_carries_on(caplog):
    dead = f"redis://127.0.0.1:{free_port()}/0"
    cache = Cache(Settings(remote_cache=dead))
    with caplog.at_level(logging.WARNING, logger="autotune_cache"):
        assert cache.lookup(KEY) is None
        cache.record(fake_tune(KEY))
        assert cache.lookup(make_key(problem={"M": 3})) is None
    assert caplog.text.count("unusable") == 1
    assert cache.lookup(KEY) is not None  # memory still works


def test_fleet_wide_tuning_lock(url, caplog):
    a, b = Cache(Settings(remote_cache=url)), Cache(Settings(remote_cache=url))
    with a.tune_lock(KEY, timeout=5) as held:
        assert held
        # A waiter whose patience ends tunes without the lock instead of failing (issue 11).
        with caplog.at_level(logging.WARNING, logger="autotune_cache"), \
                b.tune_lock(KEY, timeout=0.3) as waited:
            assert not waited
        assert "another machine" in caplog.text
    with b.tune_lock(KEY, timeout=1) as held:
        assert held


def test_bad_url_is_a_flag_error():
    from autotune_cache import FlagError

    with pytest.raises(FlagError, match="--autotune_remote_cache=http://x"):
        Cache(Settings(remote_cache="http://x"))


def test_server_refusing_writes_never_fails_a_tuning(tmp_path, caplog):
    """A full or read-only server (any RedisError) disables the tier instead of raising."""
    with redis_server(tmp_path, "--maxmemory", "1", "--maxmemory-policy", "noeviction") as url:
        cache = Cache(Settings(remote_cache=url))
        with caplog.at_level(logging.WARNING, logger="autotune_cache"):
            cache.record(fake_tune(KEY))
        assert "unusable" in caplog.text and "OutOfMemoryError" in caplog.text
        assert cache.lookup(KEY) is not None


def test_refresh_reads_a_peers_result_from_the_remote_tier(url):
    waiter = Cache(Settings(remote_cache=url))
    assert waiter.lookup(KEY) is None
    Cache(Settings(remote_cache=url)).record(fake_tune(KEY, tuning_seconds=4.0))
    assert waiter.refresh(KEY) is not None
    assert waiter.stats.peer_results == 1 and waiter.stats.saved_seconds == 4.0
