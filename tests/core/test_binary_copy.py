"""autotune_cache.binary_copy: large loaded files are read through an untrusted binary copy."""

from __future__ import annotations

import logging
import os
import time

import pytest

from autotune_cache import Cache, Settings, binary_copy
from autotune_cache.errors import MissingResultError
from autotune_cache.formats import save_results
from autotune_cache.proto import binary_copy_pb2
from tests.cachetools import fake_tune, make_key

KEYS = [make_key(problem={"M": m, "N": 128, "a": "float16"}) for m in range(1, 41)]


@pytest.fixture
def copies(tmp_path, monkeypatch):
    """Binary copies in a private directory, for files of any size."""
    directory = tmp_path / "copies"
    monkeypatch.setenv("AUTOTUNE_BINARY_CACHE_DIR", str(directory))
    monkeypatch.setattr(binary_copy, "MIN_BYTES", 0)
    return directory


def committed(tmp_path, keys=KEYS, name="cache.textproto"):
    path = tmp_path / name
    save_results(path, [fake_tune(k, tuning_seconds=float(i)) for i, k in enumerate(keys)])
    return path


def entries_of(loaded):
    return {key: entry for key, entry in loaded.items()}


def test_second_load_reads_the_copy_and_gets_the_same_entries(tmp_path, copies):
    path = committed(tmp_path)
    first = binary_copy.load_file(path)
    assert not first.from_copy and len(list(copies.iterdir())) == 1
    second = binary_copy.load_file(path)
    assert second.from_copy and second.path == path
    assert entries_of(second) == entries_of(first)
    key, entry = second.get(KEYS[7].digest())
    assert key == KEYS[7] and entry.result.tuning_seconds == 7.0


def test_an_edited_file_misses_its_old_copy(tmp_path, copies):
    path = committed(tmp_path)
    binary_copy.load_file(path)
    committed(tmp_path, KEYS[:5])
    loaded = binary_copy.load_file(path)
    assert not loaded.from_copy and len(loaded) == 5
    assert len(list(copies.iterdir())) == 2


@pytest.mark.parametrize("damage", ["truncate", "garbage", "flip", "empty"])
def test_a_damaged_copy_falls_back_to_the_file_and_is_rewritten(tmp_path, copies, damage):
    path = committed(tmp_path)
    expected = entries_of(binary_copy.load_file(path))
    (copy,) = copies.iterdir()
    data = copy.read_bytes()
    damaged = {"truncate": data[: len(data) // 2], "garbage": b"\xff" * 100,
               "flip": data[:-10] + bytes([data[-10] ^ 1]) + data[-9:], "empty": b""}[damage]
    copy.write_bytes(damaged)
    loaded = binary_copy.load_file(path)
    assert not loaded.from_copy and entries_of(loaded) == expected
    assert binary_copy.load_file(path).from_copy  # rewritten


def test_a_consistent_copy_that_lies_about_a_key_is_caught_on_use(tmp_path, copies, caplog):
    """A copy whose own hash matches but whose digests do not name their entries (a hostile or
    buggy writer) is caught when the entry is used, and the file is read instead."""
    path = committed(tmp_path)
    binary_copy.load_file(path)
    (copy,) = copies.iterdir()
    msg = binary_copy_pb2.BinaryCopy.FromString(copy.read_bytes())
    entries = list(msg.entries)
    entries[0], entries[1] = entries[1], entries[0]
    del msg.entries[:]
    msg.entries.extend(entries)
    msg.content_crc32 = binary_copy._content_crc32(list(msg.digests), entries)
    copy.write_bytes(msg.SerializeToString())
    loaded = binary_copy.load_file(path)
    assert loaded.from_copy
    with caplog.at_level(logging.WARNING, logger="autotune_cache"):
        key, _ = loaded.get(msg.digests[0])
    assert key.digest() == msg.digests[0] and not loaded.from_copy
    assert f"binary copy of {path} is damaged" in caplog.text


def test_another_schema_or_version_is_ignored(tmp_path, copies, monkeypatch):
    path = committed(tmp_path)
    binary_copy.load_file(path)
    monkeypatch.setattr(binary_copy, "SCHEMA_SHA256", "0" * 64)
    assert not binary_copy.load_file(path).from_copy


def test_off_and_unwritable_directories_still_load(tmp_path, monkeypatch):
    monkeypatch.setattr(binary_copy, "MIN_BYTES", 0)
    path = committed(tmp_path)
    monkeypatch.setenv("AUTOTUNE_BINARY_CACHE_DIR", "off")
    assert binary_copy.copy_location() is None
    assert len(binary_copy.load_file(path)) == len(KEYS)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("AUTOTUNE_BINARY_CACHE_DIR", str(blocker / "copies"))
    assert len(binary_copy.load_file(path)) == len(KEYS)


def test_default_directory_follows_xdg(tmp_path, monkeypatch):
    monkeypatch.delenv("AUTOTUNE_BINARY_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    expected = binary_copy.CopyDir(tmp_path / "autotune_cache" / "binary")
    assert binary_copy.copy_location() == expected


def test_small_files_get_no_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_BINARY_CACHE_DIR", str(tmp_path / "copies"))
    path = committed(tmp_path, KEYS[:2])
    assert len(binary_copy.load_file(path)) == 2
    assert not (tmp_path / "copies").exists()


def test_old_copies_are_cleaned_when_a_new_one_is_written(tmp_path, copies):
    binary_copy.load_file(committed(tmp_path, KEYS[:3], "a.textproto"))
    (old,) = copies.iterdir()
    stale = time.time() - binary_copy.MAX_AGE_S - 60
    os.utime(old, (stale, stale))
    binary_copy.load_file(committed(tmp_path, KEYS[3:6], "b.textproto"))
    assert old not in list(copies.iterdir()) and len(list(copies.iterdir())) == 1


def test_the_cache_names_the_committed_file_not_the_copy(tmp_path, copies):
    path = committed(tmp_path)
    binary_copy.load_file(path)  # the copy exists: the cache reads it
    cache = Cache(Settings(load_from=(path,), require_complete=True))
    assert cache.lookup(KEYS[3]) is not None
    assert cache.memory.get(KEYS[3]).origin == str(path)
    stale = make_key(problem={"M": 3, "N": 128, "a": "float16"}, toolchain={"triton": "9"})
    with pytest.raises(MissingResultError) as e:
        cache.lookup(stale)
    assert str(path) in str(e.value) and str(copies) not in str(e.value)
    assert "toolchain" in str(e.value)  # the near miss was found among the lazy entries


def test_a_later_file_overrides_an_earlier_one(tmp_path, copies):
    a = committed(tmp_path, KEYS[:3], "a.textproto")
    b = tmp_path / "b.pb"
    save_results(b, [fake_tune(KEYS[1], tuning_seconds=99.0)])
    cache = Cache(Settings(load_from=(a, b)))
    assert cache.lookup(KEYS[1]).result.tuning_seconds == 99.0
    assert cache.lookup(KEYS[0]).result.tuning_seconds == 0.0


def test_a_prepared_copy_in_a_read_only_directory_is_used(tmp_path, monkeypatch):
    """What a build action does: prepare the copy, then tests load the text file with
    AUTOTUNE_BINARY_CACHE_DIR pointing at the (read-only) output directory."""
    path = committed(tmp_path, KEYS[:3])
    prepared = tmp_path / "prepared"
    copy = binary_copy.make_copy(path, prepared)
    assert copy.parent == prepared
    prepared.chmod(0o555)
    try:
        monkeypatch.setenv("AUTOTUNE_BINARY_CACHE_DIR", str(prepared))
        monkeypatch.setattr(binary_copy, "MIN_BYTES", 0)
        loaded = binary_copy.load_file(path)
        assert loaded.from_copy and len(loaded) == 3 and loaded.path == path
    finally:
        prepared.chmod(0o755)


# ----- the build's directory: autotuned_py_test's `<name>.binary_copy` in the runfiles -----------

@pytest.fixture
def runfiles(tmp_path, monkeypatch):
    """A test's runfiles as `bazel test` lays them out: the committed text file and the build's
    copy directory under $TEST_SRCDIR/$TEST_WORKSPACE/pkg, AUTOTUNE_BINARY_CACHE_DIR as the
    macro sets it, and a working directory elsewhere (the test may chdir)."""
    package = tmp_path / "runfiles" / "my_ws" / "pkg"
    package.mkdir(parents=True)
    path = committed(package, name="t_test.autotune.textproto")
    prepared = package / "t_test.binary_copy"
    binary_copy.make_copy(path, prepared)
    old = time.time() - 3600
    for p in prepared.iterdir():
        os.utime(p, (old, old))
    monkeypatch.setenv("TEST_SRCDIR", str(tmp_path / "runfiles"))
    monkeypatch.setenv("TEST_WORKSPACE", "my_ws")
    monkeypatch.setenv("AUTOTUNE_BINARY_CACHE_DIR", "TEST_WORKSPACE/pkg/t_test.binary_copy")
    monkeypatch.setattr(binary_copy, "MIN_BYTES", 0)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return path, prepared


def snapshot(directory):
    """Every file of a directory with its bytes and mtime."""
    return {p.name: (p.read_bytes(), p.stat().st_mtime) for p in directory.iterdir()}


def test_the_builds_copy_is_found_through_test_workspace_and_never_touched(runfiles):
    path, prepared = runfiles
    before = snapshot(prepared)
    where = binary_copy.copy_location()
    assert where == binary_copy.CopyDir(prepared, writable=False)
    loaded = binary_copy.load_file(path)
    assert loaded.from_copy and len(loaded) == len(KEYS) and loaded.path == path
    cache = Cache(Settings(load_from=(path,), require_complete=True))
    assert cache.memory.get(KEYS[3]).origin == str(path)
    assert snapshot(prepared) == before  # not even the mtime a user's copy gets on use


@pytest.mark.parametrize("problem", ["damaged", "stale", "missing"])
def test_a_bad_copy_in_the_builds_directory_falls_back_to_the_text_and_writes_nothing(
        runfiles, caplog, problem):
    """Damaged bytes, a copy of other content under this file's hash (stale), or no copy: the
    test parses the committed file, with a warning naming it and the build's directory, gets
    every entry with the file as origin, and leaves the directory exactly as it was."""
    path, prepared = runfiles
    (copy,) = prepared.iterdir()
    if problem == "damaged":
        copy.write_bytes(copy.read_bytes()[:-7])
    elif problem == "stale":
        other = committed(path.parent.parent, KEYS[:2], "other.textproto")
        stale = binary_copy.make_copy(other, path.parent.parent / "other_copy")
        copy.write_bytes(stale.read_bytes())
    else:
        copy.unlink()
    before = snapshot(prepared)
    with caplog.at_level(logging.WARNING, logger="autotune_cache"):
        cache = Cache(Settings(load_from=(path,), require_complete=True))
    (loaded,) = cache.memory.loaded
    assert not loaded.from_copy and len(loaded) == len(KEYS)
    assert cache.lookup(KEYS[5]).result.tuning_seconds == 5.0
    assert cache.memory.get(KEYS[5]).origin == str(path)
    assert str(path) in caplog.text and "the build's `.binary_copy` output" in caplog.text
    assert snapshot(prepared) == before


def test_an_unresolvable_test_workspace_prefix_turns_copies_off(tmp_path, monkeypatch):
    """Outside `bazel test` (no TEST_SRCDIR) the macro's value cannot be resolved: copies are
    an optimisation, so they are off, and the file still loads."""
    monkeypatch.setattr(binary_copy, "MIN_BYTES", 0)
    monkeypatch.delenv("TEST_SRCDIR", raising=False)
    monkeypatch.setenv("AUTOTUNE_BINARY_CACHE_DIR", "TEST_WORKSPACE/pkg/t_test.binary_copy")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert binary_copy.copy_location() is None
    path = committed(tmp_path)
    assert len(binary_copy.load_file(path)) == len(KEYS)
    assert not (tmp_path / "home").exists()
