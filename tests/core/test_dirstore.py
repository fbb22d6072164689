"""The cache directory: self-describing files, atomic writes, damage tolerance, umask modes."""

import logging
import os
import stat
import time

import pytest

from autotune_cache import CacheDirError, CacheKey
from autotune_cache.formats import load_results
from autotune_cache.store.dirstore import DirectoryStore
from tests.cachetools import fake_tune, make_key


def test_put_then_get(tmp_path):
    store = DirectoryStore(tmp_path / "new" / "dir")
    entry = fake_tune(make_key())
    path = store.put(entry)
    assert path.name == f"{make_key().problem_group()}-{make_key().digest()}.textproto"
    assert store.get(make_key()) == entry
    # The file carries its own key: it can be read without recomputing any hash.
    (on_disk,) = load_results(path)
    assert CacheKey.from_proto(on_disk.key) == make_key()


def test_missing_key_is_none(tmp_path):
    assert DirectoryStore(tmp_path).get(make_key()) is None


@pytest.mark.parametrize("content", [b"garbage {{{", b"", b"\x00\xff\x10binary", b"version: 9\n"])
def test_damaged_entry_warns_and_misses(tmp_path, caplog, content):
    store = DirectoryStore(tmp_path)
    store.path_for(make_key()).write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="autotune_cache"):
        assert store.get(make_key()) is None
    assert store.path_for(make_key()).name in caplog.text
    store.put(fake_tune(make_key()))
    assert store.get(make_key()) is not None


def test_entry_under_a_foreign_name_is_ignored(tmp_path, caplog):
    store = DirectoryStore(tmp_path)
    other = store.put(fake_tune(make_key(kernel="other")))
    other.rename(store.path_for(make_key()))
    with caplog.at_level(logging.WARNING, logger="autotune_cache"):
        assert store.get(make_key()) is None
    assert "different key" in caplog.text


def test_temp_files_are_ignored_and_found_for_pruning(tmp_path):
    store = DirectoryStore(tmp_path)
    store.put(fake_tune(make_key()))
    tmp = tmp_path / f".tmp-{store.path_for(make_key(problem={'M': 5})).name}.123.dead"
    tmp.write_text("version: 1\nentries { key { kern")
    assert len(store.entries()) == 1
    assert store.temp_files() == []
    old = time.time() - 3600
    os.utime(tmp, (old, old))
    assert store.temp_files() == [tmp]


def test_uncreatable_directory_is_a_clear_error(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(CacheDirError, match="cannot create the cache directory"):
        DirectoryStore(tmp_path / "f" / "cache")


@pytest.mark.parametrize("umask,expected", [(0o002, 0o664), (0o077, 0o600)])
def test_file_modes_follow_umask(tmp_path, umask, expected):
    from autotune_cache import Cache, Settings

    old = os.umask(umask)
    try:
        path = DirectoryStore(tmp_path).put(fake_tune(make_key()))
        with Cache(Settings(cache_dir=tmp_path)).tune_lock(make_key()):
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == expected
    (lock,) = (tmp_path / ".locks").glob("*.lock")
    assert stat.S_IMODE(lock.stat().st_mode) == expected


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write read-only directories")
def test_unwritable_directory_is_a_clear_error(tmp_path):
    store = DirectoryStore(tmp_path)
    tmp_path.chmod(0o555)
    try:
        with pytest.raises(CacheDirError, match="cannot write"):
            store.put(fake_tune(make_key()))
    finally:
        tmp_path.chmod(0o755)
