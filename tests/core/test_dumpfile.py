"""The dump holds exactly one run's entries (dumpfile.py), in one process: a regenerated dump
drops what the run no longer produces, --autotune_dump_merge keeps it, and a file that is not a
results file is never overwritten."""

from __future__ import annotations

import pytest

from autotune_cache import Cache, Settings
from autotune_cache.config.flags import parse_flags
from autotune_cache.errors import CacheDirError, FlagError
from autotune_cache.formats import load_results, save_results
from autotune_cache.foundation import env
from autotune_cache.store.dumpfile import merge_run
from tests.cachetools import fake_tune, make_key


@pytest.fixture(autouse=True)
def _no_inherited_run(monkeypatch):
    monkeypatch.delenv(env.AUTOTUNE_DUMP_RUN, raising=False)


def dump_run(path, keys, **settings) -> None:
    """One run: a fresh Cache that tunes `keys` and closes."""
    cache = Cache(Settings(dump_to=path, **settings))
    for key in keys:
        assert cache.lookup(key) is None
        cache.record(fake_tune(key))
    cache.close()


def problems(path) -> list[tuple[str, str]]:
    return [(e.key.problem, e.key.source_fingerprint) for e in load_results(path)]


def test_a_regenerated_dump_holds_only_the_new_runs_entries(tmp_path):
    dump = tmp_path / "cache.textproto"
    dump_run(dump, [make_key(problem={"M": 1}), make_key(problem={"M": 2})])
    # The kernel is edited: every key gets a new source fingerprint.
    dump_run(dump, [make_key(problem={"M": 1}, source="src2"),
                    make_key(problem={"M": 2}, source="src2")])
    assert problems(dump) == [("M=1", "src2"), ("M=2", "src2")]


def test_dump_merge_keeps_the_earlier_entries_and_the_run_wins(tmp_path):
    dump = tmp_path / "cache.textproto"
    dump_run(dump, [make_key(problem={"M": 1})])
    first = load_results(dump)[0]
    dump_run(dump, [make_key(problem={"M": 2})], dump_merge=True)
    assert problems(dump) == [("M=1", "src1"), ("M=2", "src1")]
    assert load_results(dump)[0] == first
    # The run's own entry replaces an earlier one with the same key when it picks another
    # winner (the same pick keeps the file's entry: dumprule.confirms).
    cache = Cache(Settings(dump_to=dump, dump_merge=True))
    key = make_key(problem={"M": 1})
    entry = fake_tune(key, tuning_seconds=9.0)
    entry.result.config.CopyFrom(entry.result.candidates[0].config)
    cache.record(entry)
    cache.close()
    assert [e.result.tuning_seconds for e in load_results(dump)] == [9.0, 2.5]


def test_dump_merge_needs_a_dump():
    with pytest.raises(FlagError, match="--autotune_dump_merge keeps .* add "
                                        "--dump_autotune_results_to=PATH"):
        Cache(parse_flags("--autotune_dump_merge"))


@pytest.mark.parametrize("merge", [False, True], ids=["replace", "merge"])
def test_a_file_that_is_not_a_results_file_is_never_overwritten(tmp_path, merge):
    notes = tmp_path / "notes.txt"
    notes.write_text("meeting notes, not a cache\n")
    with pytest.raises(CacheDirError, match=r"--dump_autotune_results_to=.*notes\.txt: the file "
                                            r"there is not a results file .* will not overwrite"):
        Cache(Settings(dump_to=notes, dump_merge=merge))
    assert notes.read_text() == "meeting notes, not a cache\n"


def test_hits_are_dumped_too_and_an_empty_run_keeps_the_file(tmp_path):
    committed = tmp_path / "committed.textproto"
    save_results(committed, [fake_tune(make_key(problem={"M": m})) for m in (1, 2, 3)])
    dump = tmp_path / "dump.textproto"
    cache = Cache(Settings(load_from=(committed,), dump_to=dump))
    assert cache.lookup(make_key(problem={"M": 2})) is not None
    cache.close()
    assert problems(dump) == [("M=2", "src1")]  # only what this run used
    # A run that used no kernel owns no device: it keeps the file as it is.
    dump_run(dump, [])
    assert problems(dump) == [("M=2", "src1")]
    # To a new path, an empty run writes an empty results file.
    dump_run(tmp_path / "new.textproto", [])
    assert load_results(tmp_path / "new.textproto") == []


def test_a_process_nested_in_a_run_adds_to_it(tmp_path):
    """Two caches in one process with one dump path: the second joins the first's run (as a
    subprocess would), and the run ends when the first (the root) closes."""
    dump = tmp_path / "dump.textproto"
    root = Cache(Settings(dump_to=dump))
    root.record(fake_tune(make_key(problem={"M": 1})))
    member = Cache(Settings(dump_to=dump))
    member.record(fake_tune(make_key(problem={"M": 2})))
    member.close()
    assert env.dump_run() != ""
    root.close()
    assert problems(dump) == [("M=1", "src1"), ("M=2", "src1")]
    assert env.dump_run() == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dump.textproto"]
    # The next run starts afresh.
    dump_run(dump, [make_key(problem={"M": 3})])
    assert problems(dump) == [("M=3", "src1")]


def test_a_run_to_another_path_is_its_own_run(tmp_path):
    outer = Cache(Settings(dump_to=tmp_path / "a.textproto"))
    outer.record(fake_tune(make_key(problem={"M": 1})))
    inner = Cache(Settings(dump_to=tmp_path / "b.textproto"))
    inner.record(fake_tune(make_key(problem={"M": 2})))
    inner.close()
    outer.close()
    assert problems(tmp_path / "a.textproto") == [("M=1", "src1")]
    assert problems(tmp_path / "b.textproto") == [("M=2", "src1")]
    assert env.dump_run() == ""


def _tuned(key, time_ms: float, tuned_at: str = "2026-11-29T10:00:00Z"):
    entry = fake_tune(key)
    entry.result.time_ms = time_ms
    entry.result.tuned_at = tuned_at
    return entry


def test_a_key_two_processes_tuned_keeps_the_faster_winner_whoever_is_root(tmp_path):
    """The run's one merge rule (dumpfile.merge_run, which the pytest-xdist merge uses too):
    the faster winner, whichever process recorded it or wrote last."""
    key = make_key(problem={"M": 7})
    for root_ms, member_ms in ((2.0, 1.0), (1.0, 2.0)):
        dump = tmp_path / f"dump-{root_ms}.textproto"
        root = Cache(Settings(dump_to=dump))
        root.record(_tuned(key, root_ms))
        member = Cache(Settings(dump_to=dump))
        member.record(_tuned(key, member_ms))
        member.close()
        root.close()
        [entry] = load_results(dump)
        assert entry.result.time_ms == 1.0
        assert root._dump is not None and root._dump.tuned_twice == 1


def test_the_merge_rule_depends_on_the_entries_alone():
    key, other = make_key(problem={"M": 1}), make_key(problem={"M": 2})
    slow, fast = _tuned(key, 2.0), _tuned(key, 1.0)
    early, late = _tuned(key, 1.0, "2026-11-29T09:00:00Z"), _tuned(key, 1.0)
    for sources in ([[(key, slow)], [(key, fast)]], [[(key, fast)], [(key, slow)]]):
        merged, twice = merge_run(sources)
        assert merged[key.digest()][1] is fast and [k for k, _ in twice] == [key]
    assert merge_run([[(key, late)], [(key, early)]])[0][key.digest()][1] is early
    same = fake_tune(other)
    merged, twice = merge_run([[(other, same)], [(other, fake_tune(other))]])
    assert twice == [] and len(merged) == 1  # the same entry twice is no conflict
