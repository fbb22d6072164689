"""Items 3, 10 and 11 of issue 11: FIFOs, directories, loops and unreadable files where results
files or entries are expected. Nothing hangs, nothing prints a traceback, every message names the
path and what to do."""

from __future__ import annotations

import os

import pytest

from autotune_cache.store.dirstore import DirectoryStore
from tests.cachetools import make_key
from tests.reliability.conftest import chown, make_fifo, run_cli, run_python

KEY = make_key()

LOAD = """
from autotune_cache import Cache, Settings, AutotuneCacheError
try:
    Cache(Settings(load_from={path!r}))
except AutotuneCacheError as e:
    print("named:", e)
"""

TUNE = """
import logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
from autotune_cache import Cache, Settings
from tests.cachetools import fake_tune, make_key
cache = Cache(Settings(cache_dir={dir!r}))
key = make_key()
assert cache.lookup(key) is None
with cache.tune_lock(key):
    cache.record(fake_tune(key))
print("misses", cache.stats.misses)
"""


def test_fifo_given_as_a_loaded_file_is_refused_at_once(tmp_path):
    fifo = make_fifo(tmp_path / "results.textproto")
    res = run_python(LOAD.format(path=str(fifo)), timeout=30)
    res.assert_no_traceback()
    assert res.out.startswith("named:") and str(fifo) in res.out, res.text
    assert "regular file" in res.out


def test_fifo_planted_at_an_entry_path_is_a_miss_not_a_hang(tmp_path):
    make_fifo(DirectoryStore(tmp_path).path_for(KEY))
    res = run_python(TUNE.format(dir=str(tmp_path)), timeout=30)
    res.assert_no_traceback()
    assert res.rc == 0 and "misses 1" in res.out, res.text
    assert str(DirectoryStore(tmp_path).path_for(KEY)) in res.err


@pytest.mark.parametrize("command", ["inspect", "verify", "prune"])
def test_cli_never_hangs_on_a_fifo_in_a_directory(tmp_path, command):
    make_fifo(DirectoryStore(tmp_path).path_for(KEY))
    res = run_cli(command, str(tmp_path), timeout=30)
    res.assert_no_traceback()
    if command != "prune":
        assert res.rc == 1 and "regular file" in res.text, res.text


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_cli_never_hangs_on_a_fifo_argument(tmp_path, command):
    fifo = make_fifo(tmp_path / "results.pb")
    res = run_cli(command, str(fifo), timeout=30)
    res.assert_no_traceback()
    assert res.rc in (1, 2) and str(fifo) in res.text and "regular file" in res.text, res.text


def test_directory_at_an_entry_path_is_a_miss_and_the_run_succeeds(tmp_path):
    DirectoryStore(tmp_path).path_for(KEY).mkdir()
    res = run_python(TUNE.format(dir=str(tmp_path)), timeout=60)
    res.assert_no_traceback()
    assert res.rc == 0 and "misses 1" in res.out, res.text
    assert str(DirectoryStore(tmp_path).path_for(KEY)) in res.err


def test_symlink_loop_is_named_as_a_loop(tmp_path):
    loop = tmp_path / "results.textproto"
    loop.symlink_to(loop)
    res = run_cli("inspect", str(loop))
    res.assert_no_traceback()
    assert res.rc == 2 and "no such file" not in res.text, res.text
    assert "symbolic link" in res.text or "symlink" in res.text
    res = run_python(LOAD.format(path=str(loop)))
    res.assert_no_traceback()
    assert res.out.startswith("named:") and "link" in res.out, res.text


def test_unreadable_loaded_file_is_a_named_error(users, world_dir):
    other, reader = users
    path = world_dir / "results.textproto"
    path.write_text("version: 1\n")
    path.chmod(0o600)
    chown(path, other)
    res = run_python(LOAD.format(path=str(path)), user=reader)
    res.assert_no_traceback()
    assert res.out.startswith("named:") and str(path) in res.out, res.text
    assert "permission" in res.out.lower()
    res = run_cli("verify", str(path), user=reader)
    res.assert_no_traceback()
    assert res.rc != 0 and str(path) in res.text


def test_planted_symlink_never_leaks_through_the_cli(tmp_path):
    private = tmp_path / "private"
    private.write_text("private_field_name: 1\n")
    os.chmod(private, 0o600)
    entry = DirectoryStore(tmp_path / "d").path_for(KEY)
    entry.symlink_to(private)
    res = run_cli("verify", str(tmp_path / "d"))
    res.assert_no_traceback()
    assert res.rc == 1 and "private_field_name" not in res.text, res.text
