"""Items 2 and 9 of issue 11: an entry read from a shared tier is checked before it is used.

A shared directory or Redis server can hold entries written by anyone. An entry whose winner is
not one of the kernel's candidates, or is not even a well-formed config, is damaged: a warning that
names where it came from, a miss, a re-tune that overwrites it, and `verify` reports it. Entries are
never read through a symlink planted at their path.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from autotune_cache import Cache, Settings
from autotune_cache.cli import main as cli_main
from autotune_cache.formats import load_results, serialize_results
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store.dirstore import DirectoryStore
from tests.cachetools import fake_tune, make_key
from tests.reliability.conftest import run_python

KEY = make_key()


def candidate_configs(entry: pb.Entry) -> list[pb.Config]:
    return [t.config for t in entry.result.candidates]


def foreign_winner() -> pb.Config:
    return pb.Config(params=[pb.Param(name="BLOCK", int_value=4096)], num_warps=4, num_stages=3)


def forged(winner: pb.Config, *, also_in_candidates: bool) -> pb.Entry:
    entry = fake_tune(KEY)
    entry.result.config.CopyFrom(winner)
    if also_in_candidates:
        entry.result.candidates.add(config=winner, time_ms=0.001)
    return entry


MALFORMED = {
    "param-without-value": pb.Config(params=[pb.Param(name="BLOCK")], num_warps=4),
    "param-name-not-an-identifier": pb.Config(
        params=[pb.Param(name="BLOCK; import os", int_value=64)], num_warps=4),
    "empty-param-name": pb.Config(params=[pb.Param(name="", int_value=64)], num_warps=4),
    "duplicate-param": pb.Config(params=[pb.Param(name="BLOCK", int_value=64),
                                         pb.Param(name="BLOCK", int_value=32)], num_warps=4),
    "num_warps-not-a-power-of-two": pb.Config(params=[pb.Param(name="BLOCK", int_value=64)],
                                              num_warps=3),
    "negative-num_stages": pb.Config(params=[pb.Param(name="BLOCK", int_value=64)], num_warps=4,
                                     num_stages=-1),
    "not-among-its-own-candidates": foreign_winner(),
}


def plant(directory: Path, entry: pb.Entry) -> Path:
    store = DirectoryStore(directory)
    path = store.path_for(KEY)
    path.write_bytes(serialize_results([entry], text=True))
    return path


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_winner_in_the_directory_is_a_damaged_entry(tmp_path, caplog, capsys, kind):
    path = plant(tmp_path, forged(MALFORMED[kind], also_in_candidates=False))
    cache = Cache(Settings(cache_dir=tmp_path))
    with caplog.at_level(logging.WARNING, logger="autotune_cache"):
        assert cache.lookup(KEY) is None
    assert str(path) in caplog.text
    assert cache.stats.misses == 1
    # The re-tune overwrites it with a good entry.
    cache.record(fake_tune(KEY))
    assert Cache(Settings(cache_dir=tmp_path)).lookup(KEY) is not None
    # verify reports what lookups reject.
    plant(tmp_path, forged(MALFORMED[kind], also_in_candidates=False))
    capsys.readouterr()
    assert cli_main(["verify", str(tmp_path)]) == 1
    assert path.name in capsys.readouterr().out


def test_winner_that_is_not_a_candidate_of_this_kernel_is_a_miss(tmp_path, caplog):
    """Even when the entry lists the foreign winner among its own candidates, a caller that knows
    the kernel's candidates (the autotuner) never gets it."""
    good = fake_tune(KEY)
    path = plant(tmp_path, forged(foreign_winner(), also_in_candidates=True))
    cache = Cache(Settings(cache_dir=tmp_path))
    with caplog.at_level(logging.WARNING, logger="autotune_cache"):
        assert cache.lookup(KEY, candidates=candidate_configs(good)) is None
    assert str(path) in caplog.text and "not one of" in caplog.text
    # A good entry is a hit through the same check.
    cache.record(good)
    assert Cache(Settings(cache_dir=tmp_path)).lookup(
        KEY, candidates=candidate_configs(good)) is not None


def test_remote_entry_with_a_foreign_winner_is_not_used_nor_copied_locally(
        tmp_path, redis_url, redis_client, caplog):
    from autotune_cache.tiers.redis import NAMESPACE

    good = fake_tune(KEY)
    bad = forged(foreign_winner(), also_in_candidates=True)
    redis_client.set(f"{NAMESPACE}:entry:{KEY.digest()}", bad.SerializeToString())
    cache = Cache(Settings(remote_cache=redis_url, cache_dir=tmp_path / "local"))
    with caplog.at_level(logging.WARNING, logger="autotune_cache"):
        assert cache.lookup(KEY, candidates=candidate_configs(good)) is None
    assert redis_url in caplog.text
    assert not DirectoryStore(tmp_path / "local").path_for(KEY).exists()


@pytest.mark.parametrize("value", [b"", b"\x0a\x00"], ids=["empty", "empty-key"])
def test_empty_remote_value_is_a_miss_not_a_crash(redis_url, redis_client, value):
    from autotune_cache.tiers.redis import NAMESPACE

    redis_client.set(f"{NAMESPACE}:entry:{KEY.digest()}", value)
    cache = Cache(Settings(remote_cache=redis_url))
    assert cache.lookup(KEY) is None
    cache.record(fake_tune(KEY))
    assert Cache(Settings(remote_cache=redis_url)).lookup(KEY) is not None


def test_non_utf8_index_member_is_skipped(redis_url, redis_client):
    from autotune_cache.tiers.redis import NAMESPACE

    redis_client.sadd(f"{NAMESPACE}:idx:{KEY.problem_group()}", b"\xff\xfe not utf-8")
    redis_client.sadd(f"{NAMESPACE}:idx:{KEY.problem_group()}", b"../../etc")
    other = make_key(device=KEY.device, source="older")
    Cache(Settings(remote_cache=redis_url)).record(fake_tune(other))
    cache = Cache(Settings(remote_cache=redis_url))
    assert cache.lookup(KEY) is None
    assert [f.key for f in cache.near_misses(KEY)] == [other]


def test_triton_kernel_never_launches_a_planted_malformed_winner(tmp_path):
    """A real Triton kernel (CPU interpreter): the directory entry's winner is given a parameter
    the kernel does not take. The next run warns, re-tunes and computes the right answer, instead
    of dying in Triton with a TypeError that names no file."""
    worker = f"""
        import os, sys
        os.environ["TRITON_INTERPRET"] = "1"
        import autotune_cache
        from autotune_cache import Settings
        from autotune_cache.triton import bench
        from tests.triton import kernels
        cache = autotune_cache.configure(Settings(cache_dir={str(tmp_path)!r}))
        bench.set_fake_benchmark(lambda config, problem: {{16: 3.0, 32: 1.0, 64: 2.0,
                                                            128: 4.0}}[config.kwargs["BLOCK_SIZE"]])
        out, expected = kernels.launch_add(kernels.tuned_add(), n=100)
        assert bool((out == expected).all()), "wrong result"
        print("benchmarks", cache.stats.benchmarks)
    """
    first = run_python(worker, timeout=300)
    assert first.rc == 0, first.text
    (path,) = DirectoryStore(tmp_path).entry_files()
    (entry,) = load_results(path.with_suffix(".textproto"))
    assert [p.name for p in entry.result.config.params] == ["BLOCK_SIZE"]
    # Give the winner a parameter add_kernel does not have (not among the entry's candidates).
    entry.result.config.params.add(name="EVIL", int_value=1)
    path.write_bytes(serialize_results([entry], text=True))
    second = run_python(worker, timeout=300)
    second.assert_no_traceback()
    assert second.rc == 0, second.text
    assert str(path) in second.err
    assert "benchmarks 0" not in second.out, "the planted entry was used"
    assert "EVIL" not in path.read_text(), "the damaged entry was not overwritten"

    # A well-formed forgery: BLOCK_SIZE=4096 is a valid meta-parameter of add_kernel but not one
    # of its candidates, and the entry lists it among its own candidates so that only the
    # autotuner, which knows the kernel's candidate list, can tell.
    (entry,) = load_results(path.with_suffix(".textproto"))
    entry.result.config.ClearField("params")
    entry.result.config.params.add(name="BLOCK_SIZE", int_value=4096)
    entry.result.candidates.add(config=entry.result.config, time_ms=0.001)
    path.write_bytes(serialize_results([entry], text=True))
    third = run_python(worker, timeout=300)
    third.assert_no_traceback()
    assert third.rc == 0, third.text
    assert str(path) in third.err and "not one of" in third.err, third.err
    assert "benchmarks 0" not in third.out, "the forged winner was launched"
    assert "4096" not in path.read_text(), "the forged entry was not overwritten"


def test_entry_read_never_follows_a_planted_symlink(tmp_path, caplog, capsys):
    """Item 9: a symlink at an entry's path pointing at another user's private file: the tuner
    neither reads nor quotes it (the old warning printed the file's first field name)."""
    private = tmp_path / "private.textproto"
    private.write_text("secret_api_token_field: 12345\n")
    private.chmod(0o600)
    cache_dir = tmp_path / "cache"
    path = DirectoryStore(cache_dir).path_for(KEY)
    os.symlink(private, path)
    cache = Cache(Settings(cache_dir=cache_dir))
    with caplog.at_level(logging.DEBUG, logger="autotune_cache"):
        assert cache.lookup(KEY) is None
    assert "secret_api_token_field" not in caplog.text
    assert str(path) in caplog.text and "symbolic link" in caplog.text
    for command in ("inspect", "verify"):
        assert cli_main([command, str(cache_dir)]) == 1
        out = capsys.readouterr()
        assert "secret_api_token_field" not in out.out + out.err
