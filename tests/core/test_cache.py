"""The tiers compose: memory -> loaded files -> directory; records reach every writable tier."""

import json
import logging
import os

import pytest

from autotune_cache import (
    Cache,
    DumpShardingError,
    MissingResultError,
    Settings,
    configure,
    get_cache,
)
from autotune_cache.formats import load_results, save_results
from autotune_cache.store.dirstore import DirectoryStore
from tests.cachetools import CPU, fake_tune, make_key

KEY = make_key()


def tune_through(cache: Cache, key=KEY, seconds: float = 2.5):
    """What an autotuner does: look up, and on a miss tune with the fake benchmark and record."""
    entry = cache.lookup(key)
    if entry is None:
        entry = fake_tune(key, tuning_seconds=seconds)
        cache.record(entry, benchmarks=len(entry.result.candidates))
    return entry


def test_no_tiers_tunes_every_time_in_a_new_process():
    a, b = Cache(Settings()), Cache(Settings())
    tune_through(a)
    tune_through(b)
    assert (a.stats.misses, b.stats.misses) == (1, 1)


def test_memory_tier_serves_a_second_lookup():
    cache = Cache(Settings())
    first = tune_through(cache)
    assert cache.lookup(KEY) == first
    assert (cache.stats.hits, cache.stats.misses, cache.stats.benchmarks) == (1, 1, 6)
    assert cache.stats.saved_seconds == 0.0  # nothing saved: this process did the tuning


def test_loaded_file_tier(tmp_path):
    path = tmp_path / "c.textproto"
    save_results(path, [fake_tune(KEY, tuning_seconds=4.0)])
    cache = Cache(Settings(load_from=(path,)))
    entry = cache.lookup(KEY)
    assert entry.result.config.params[0].int_value == 64 and entry.result.config.num_warps == 4
    assert (cache.stats.hits, cache.stats.misses, cache.stats.benchmarks) == (1, 0, 0)
    assert cache.stats.saved_seconds == 4.0


def test_directory_tier_shared_between_processes(tmp_path):
    writer = Cache(Settings(cache_dir=tmp_path / "d"))
    tune_through(writer)
    reader = Cache(Settings(cache_dir=tmp_path / "d"))
    assert reader.lookup(KEY) is not None
    assert reader.stats.hits == 1 and reader.stats.saved_seconds == 2.5


def test_read_mode_never_writes_the_directory(tmp_path):
    cache = Cache(Settings(cache_dir=tmp_path / "d", cache_mode="read"))
    tune_through(cache)
    assert list((tmp_path / "d").glob("*.textproto")) == []
    assert cache.lookup(KEY) is not None  # still remembered in memory


def test_loaded_file_wins_over_directory(tmp_path):
    cache_dir = tmp_path / "d"
    Cache(Settings(cache_dir=cache_dir)).record(fake_tune(KEY, tuning_seconds=1.0))
    path = tmp_path / "c.pb"
    save_results(path, [fake_tune(KEY, tuning_seconds=7.0)])
    cache = Cache(Settings(cache_dir=cache_dir, load_from=(path,)))
    assert cache.lookup(KEY).result.tuning_seconds == 7.0


def test_all_tiers_together_and_the_dump(tmp_path):
    """A key in a loaded file, a key in the directory and a new key: all end in the dump."""
    k_file, k_dir, k_new = (make_key(problem={"M": m}) for m in (1, 2, 3))
    path = tmp_path / "loaded.textproto"
    save_results(path, [fake_tune(k_file)])
    Cache(Settings(cache_dir=tmp_path / "d")).record(fake_tune(k_dir))
    dump = tmp_path / "out" / "dump.textproto"
    cache = Cache(Settings(cache_dir=tmp_path / "d", load_from=(path,), dump_to=dump))
    tune_through(cache, k_file)
    tune_through(cache, k_dir)
    assert not dump.exists()  # hits alone are written once, at exit
    tune_through(cache, k_new)
    assert (cache.stats.hits, cache.stats.misses) == (2, 1)
    # The dump file is written once, when the run ends (issue 49: a killed run never
    # touches it; docs/cache.md#the-dump).
    assert not dump.exists()
    cache.close()
    assert [e.key.problem for e in load_results(dump)] == ["M=1", "M=2", "M=3"]
    assert len(list((tmp_path / "d").glob("*.textproto"))) == 2


def test_dump_of_an_unchanged_cache_is_byte_identical(tmp_path):
    keys = [make_key(problem={"M": m}) for m in (8, 16, 32)]
    first = tmp_path / "first.textproto"
    cache = Cache(Settings(dump_to=first))
    for k in keys:
        tune_through(cache, k)
    cache.close()
    second = tmp_path / "second.textproto"
    regen = Cache(Settings(load_from=(first,), dump_to=second))
    for k in reversed(keys):
        tune_through(regen, k)
    regen.close()
    assert regen.stats.benchmarks == 0
    assert second.read_bytes() == first.read_bytes()


def test_empty_dump_is_still_written(tmp_path):
    cache = Cache(Settings(dump_to=tmp_path / "d.textproto"))
    cache.close()
    assert load_results(tmp_path / "d.textproto") == []


def test_several_loaded_files_last_one_wins(tmp_path, caplog):
    a, b = tmp_path / "a.textproto", tmp_path / "b.pb"
    save_results(a, [fake_tune(KEY, tuning_seconds=1.0)])
    save_results(b, [fake_tune(KEY, tuning_seconds=2.0)])
    with caplog.at_level(logging.DEBUG, logger="autotune_cache"):
        cache = Cache(Settings(load_from=(a, b)))
    assert cache.lookup(KEY).result.tuning_seconds == 2.0
    assert "overrides" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_corrupt_loaded_file_fails_at_startup(tmp_path):
    path = tmp_path / "c.textproto"
    path.write_text("entries { key { kernel: 'x' ")
    with pytest.raises(Exception, match="c.textproto"):
        Cache(Settings(load_from=(path,)))


def test_stale_entry_is_counted_and_named(tmp_path, caplog):
    path = tmp_path / "c.textproto"
    save_results(path, [fake_tune(make_key(device=CPU))])
    cache = Cache(Settings(load_from=(path,)))
    with caplog.at_level(logging.WARNING, logger="autotune_cache"):
        assert cache.lookup(KEY) is None
    assert (cache.stats.misses, cache.stats.stale) == (1, 1)
    assert "cpu-interpreter" in caplog.text


def test_require_complete_message(tmp_path, monkeypatch):
    path = tmp_path / "c.textproto"
    save_results(path, [fake_tune(make_key(device=CPU)),
                        fake_tune(make_key(toolchain={"triton": "3.5.0"}))])
    monkeypatch.setenv("AUTOTUNE_REGEN_HINT", "bazel run //kernels:matmul_test.regen")
    cache = Cache(Settings(load_from=(path,), require_complete=True))
    with pytest.raises(MissingResultError) as info:
        cache.lookup(KEY)
    msg = str(info.value)
    for expected in ("kernel:    matmul", "problem:   M=128,N=128,a=float16",
                     "device:    NVIDIA H200 / sm_90 / 132 SMs", "stale",
                     "device [cpu-interpreter / interpreter]", "toolchain [triton=3.5.0]",
                     str(path), "bazel run //kernels:matmul_test.regen"):
        assert expected in msg, expected


def test_require_complete_without_hint_says_how_to_dump(monkeypatch):
    monkeypatch.delenv("AUTOTUNE_REGEN_HINT", raising=False)
    with pytest.raises(MissingResultError, match="--dump_autotune_results_to"):
        Cache(Settings(require_complete=True)).lookup(KEY)


def test_same_source_finds_timings_of_an_older_candidate_list(tmp_path):
    cache = Cache(Settings())
    cache.record(fake_tune(make_key(configs="old-list")))
    cache.record(fake_tune(make_key(configs="x", device=CPU)))
    reusable = cache.same_source(make_key(configs="new-list"))
    assert [e.key.configs_fingerprint for e in reusable] == ["old-list"]


def test_dump_refuses_sharded_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_TOTAL_SHARDS", "3")
    with pytest.raises(DumpShardingError, match="3 shards.*test_sharding_strategy=disabled"):
        Cache(Settings(dump_to=tmp_path / "d.textproto"))


def test_summary_and_json_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TEST_UNDECLARED_OUTPUTS_DIR", str(tmp_path / "outputs"))
    path = tmp_path / "c.textproto"
    save_results(path, [fake_tune(make_key(problem={"M": m}), tuning_seconds=20.6)
                        for m in (1, 2)])
    cache = Cache(Settings(load_from=(path,)))
    for m in (1, 2):
        tune_through(cache, make_key(problem={"M": m}))
    cache.close()
    err = capsys.readouterr().err
    assert "autotune_cache: 2 hits, 0 misses, 0 stale, 0 benchmarks, saved ~41.2 s of tuning" in err
    report = json.loads((tmp_path / "outputs" / "autotune_report.json").read_text())
    assert report["hits"] == 2 and report["benchmarks"] == 0 and report["saved_seconds"] == 41.2


def test_nothing_happened_prints_nothing(capsys):
    Cache(Settings()).close()
    assert capsys.readouterr().err == ""


def test_process_cache_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_FLAGS", f"--autotune_cache_dir={tmp_path}/d")
    cache = configure()
    assert get_cache() is cache and any(t.name == "directory" for t in cache.tiers)
    configure(Settings())
    assert not any(t.name == "directory" for t in get_cache().tiers)


@pytest.mark.parametrize("in_file", [False, True], ids=["no-file", "file"])
@pytest.mark.parametrize("in_dir", [False, True], ids=["no-dir", "dir"])
@pytest.mark.parametrize("mode", ["update", "read"])
@pytest.mark.parametrize("dump", [False, True], ids=["no-dump", "dump"])
def test_every_combination_of_tiers(tmp_path, in_file, in_dir, mode, dump):
    """Where a result lives decides hit or miss; where a new one goes follows mode and dump."""
    cache_dir = tmp_path / "d"
    if in_dir:
        Cache(Settings(cache_dir=cache_dir)).record(fake_tune(KEY, tuning_seconds=3.0))
    loaded = ()
    if in_file:
        loaded = (tmp_path / "c.pb",)
        save_results(loaded[0], [fake_tune(KEY, tuning_seconds=3.0)])
    dump_to = tmp_path / "dump.textproto" if dump else None
    other = make_key(problem={"M": 7})
    cache = Cache(Settings(cache_dir=cache_dir, cache_mode=mode, load_from=loaded,
                           dump_to=dump_to))
    tune_through(cache, KEY)
    tune_through(cache, other)
    assert cache.stats.hits == (1 if in_file or in_dir else 0)
    assert cache.stats.misses == (1 if in_file or in_dir else 2)
    assert cache.stats.saved_seconds == (3.0 if in_file or in_dir else 0.0)
    files = {p.name for p in cache_dir.glob("*.textproto")}
    assert (DirectoryStore(cache_dir).path_for(other).name in files) == (mode == "update")
    # Hits from a loaded file are not copied into the directory; only tuned results are.
    tuned_here = mode == "update" and not in_file
    assert (DirectoryStore(cache_dir).path_for(KEY).name in files) == (in_dir or tuned_here)
    # Memory now serves both keys, whatever tier they came from.
    assert cache.lookup(KEY) is not None and cache.lookup(other) is not None
    cache.close()
    if dump:
        assert {e.key.problem for e in load_results(dump_to)} == {KEY.problem, other.problem}


def test_stale_entry_in_the_directory_is_found_by_its_problem_group(tmp_path):
    Cache(Settings(cache_dir=tmp_path)).record(fake_tune(make_key(device=CPU)))
    Cache(Settings(cache_dir=tmp_path)).record(fake_tune(make_key(problem={"M": 5})))
    cache = Cache(Settings(cache_dir=tmp_path))
    (near,) = cache.near_misses(KEY)
    assert near.key.device == CPU and str(tmp_path) in near.origin


def test_result_tuned_by_a_peer_while_waiting_counts_as_saved(tmp_path, capsys):
    waiter = Cache(Settings(cache_dir=tmp_path))
    assert waiter.lookup(KEY) is None
    Cache(Settings(cache_dir=tmp_path)).record(fake_tune(KEY, tuning_seconds=6.0))
    assert waiter.refresh(KEY) is not None
    assert waiter.stats.peer_results == 1 and waiter.stats.saved_seconds == 6.0
    waiter.close()
    assert "1 tuned by another process while this one waited" in capsys.readouterr().err


def test_python_api_takes_str_paths(tmp_path):
    path = tmp_path / "c.textproto"
    save_results(path, [fake_tune(KEY)])
    cache = Cache(Settings(load_from=str(path), dump_to=str(tmp_path / "d.textproto"),
                           cache_dir=str(tmp_path / "dir")))
    assert cache.lookup(KEY) is not None
    cache.close()
    assert len(load_results(tmp_path / "d.textproto")) == 1


def test_unwritable_dump_path_fails_at_startup_naming_the_flag(tmp_path):
    from autotune_cache import CacheDirError

    (tmp_path / "file").write_text("")
    with pytest.raises(CacheDirError, match="--dump_autotune_results_to=.*cannot create"):
        Cache(Settings(dump_to=tmp_path / "file" / "d.textproto"))
    with pytest.raises(CacheDirError, match="is a directory"):
        Cache(Settings(dump_to=tmp_path))


def test_file_in_the_way_of_the_lock_directory_means_a_private_one(tmp_path):
    """Issue 11: .locks that is not a directory we (or root) own is not used; a private
    .locks-<uid> is."""
    cache = Cache(Settings(cache_dir=tmp_path))
    (tmp_path / ".locks").write_text("")
    with cache.tune_lock(KEY) as held:
        assert held
    assert list((tmp_path / f".locks-{os.geteuid()}").glob("*.lock"))


def test_candidate_list_change_is_incremental_not_stale(tmp_path):
    cache = Cache(Settings(cache_dir=tmp_path))
    cache.record(fake_tune(make_key(configs="old-list")))
    fresh = Cache(Settings(cache_dir=tmp_path))
    assert fresh.lookup(make_key(configs="new-list")) is None
    assert (fresh.stats.stale, fresh.stats.candidates_changed) == (0, 1)
    assert "1 after a candidate-list change" in fresh.stats.summary_line()


def test_get_cache_is_created_once_across_threads(monkeypatch):
    import threading

    import autotune_cache.cache as cache_mod

    monkeypatch.setattr(cache_mod, "_cache", None)
    monkeypatch.delenv("AUTOTUNE_FLAGS", raising=False)
    seen, barrier = [], threading.Barrier(8)

    def worker():
        barrier.wait()
        seen.append(get_cache())

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c in seen}) == 1
