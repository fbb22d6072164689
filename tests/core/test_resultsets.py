"""autotune_cache.resultsets: the bytes API, without(), merge policy and the prune plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune_cache.errors import AutotuneCacheError, CorruptFileError
from autotune_cache.formats import serialize_results
from autotune_cache.resultsets.base import merge_sets, prune_plan, tuned_epoch
from autotune_cache.resultsets.ours import OurResults
from autotune_cache.resultsets.registry import load_any, loads
from tests.cachetools import CPU, fake_tune, make_key

ENTRIES = [fake_tune(make_key(kernel=k)) for k in ("a", "b")] + [
    fake_tune(make_key(kernel="c", device=CPU))]


@pytest.mark.parametrize("suffix", [".textproto", ".pb"])
def test_loads_and_dumps_match_the_file_api(tmp_path, suffix):
    data = serialize_results(ENTRIES, text=suffix == ".textproto")
    path = tmp_path / f"cache{suffix}"
    path.write_bytes(data)
    from_bytes, from_file = loads(data, suffix), load_any(path)
    assert from_bytes.rows() == from_file.rows()
    assert from_bytes.dumps(suffix) == data


def test_loads_names_the_bytes_in_errors():
    with pytest.raises(CorruptFileError, match=r"<bytes>\.textproto: not a valid text-format"):
        loads(b"entries { nonsense", ".textproto")
    with pytest.raises(CorruptFileError, match="not a results file .* of any known format"):
        loads(b"\x00\x01", ".json")


def test_without_drops_only_the_given_ids():
    rs = loads(serialize_results(ENTRIES, text=True), ".textproto")
    ids = [r.id for r in rs.rows()]
    kept = rs.without({ids[0]})
    assert [r.id for r in kept.rows()] == ids[1:]
    assert isinstance(kept, OurResults)


def test_merge_policy_newest_fastest_error():
    key = make_key(kernel="a")
    old, new = fake_tune(key), fake_tune(key)
    new.result.tuned_at = "2026-12-01T00:00:00Z"
    new.result.time_ms = old.result.time_ms + 1  # newer but slower
    a = loads(serialize_results([old], text=True), ".textproto")
    b = loads(serialize_results([new], text=True), ".textproto")
    assert merge_sets([("a", a), ("b", b)], "newest").result.rows()[0].tuned_at == \
        new.result.tuned_at
    assert merge_sets([("a", a), ("b", b)], "fastest").result.rows()[0].tuned_at == \
        old.result.tuned_at
    refused = merge_sets([("a", a), ("b", b)], "error")
    assert refused.count == 1 and len(refused.conflicts) == 1 and "(in b)" in refused.conflicts[0]


def test_merge_refuses_mixed_formats():
    ours = loads(serialize_results(ENTRIES, text=True), ".textproto")
    xla = load_any(Path(__file__).resolve().parents[1] / "fixtures" / "xla_h200_jax0.11.2"
                   / "res.textproto")
    with pytest.raises(AutotuneCacheError, match="inputs are of different formats"):
        merge_sets([("a", ours), ("b", xla)], "newest")


def test_prune_plan_keeps_what_it_cannot_judge():
    rows = loads(serialize_results(ENTRIES, text=True), ".textproto").rows()
    plan = prune_plan(rows, keep_device=["H200"], keep_toolchain=[], older_than=None, now=0.0)
    assert [r.kernel for r, why in plan.drop] == ["c"] and plan.drop[0][1] == ["device"]
    assert sorted(r.kernel for r in plan.keep) == ["a", "b"]
    tuned = tuned_epoch(rows[0])
    assert tuned is not None
    aged = prune_plan(rows, keep_device=[], keep_toolchain=[], older_than=60.0, now=tuned + 3600)
    assert [why for _, why in aged.drop] == [["age"]] * 3 and not aged.keep
    fresh = prune_plan(rows, keep_device=[], keep_toolchain=[], older_than=60.0, now=tuned + 30)
    assert not fresh.drop
