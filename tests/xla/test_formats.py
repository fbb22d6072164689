"""XLA's autotune files (new AutotuneCache format and legacy AutotuneResults) in the reader layer:
sniffing, rows, round trips, unknown fields, select / merge / prune. Damaged and hostile input is
in test_formats_bad_input.py.

Every fixture under tests/fixtures/xla_h200_jax0.11.2 was written by JAX 0.11.2 on an H200.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format

from autotune_cache import CorruptFileError
from autotune_cache.xla import formats
from autotune_cache.xla.cache_format import XlaCacheSet
from autotune_cache.xla.legacy_format import XlaLegacySet, cache_file_stem
from autotune_cache.xla.proto import xla_autotuner_pb2 as cache_pb
from autotune_cache.xla.proto import xla_autotuning_pb2 as legacy_pb
from autotune_cache.xla.wire import encode_len_field as len_field
from tests.xla.xla_fixtures import (
    DEVICE_FP,
    FUSION,
    FUSION_LEGACY,
    H200_MODEL,
    LEGACY,
    NEW,
    OLD,
    RES,
    files_of,
)


def test_formats_are_registered_newest_first():
    assert [f.name for f in formats()] == ["xla", "xla-legacy"]


@pytest.mark.parametrize(("path", "fmt"), [
    (RES, NEW), (FUSION, NEW), (LEGACY, OLD), (FUSION_LEGACY, OLD)],
    ids=["res", "fusion", "legacy", "fusion-legacy"])
def test_each_fixture_is_sniffed_by_exactly_its_format(path, fmt):
    assert [f.name for f in (NEW, OLD) if f.sniff(path)] == [fmt.name]


def test_binary_files_are_sniffed_by_content(tmp_path):
    NEW.load(RES).save(tmp_path / "res.pb")
    OLD.load(LEGACY).save(tmp_path / "legacy.bin")
    assert NEW.sniff(tmp_path / "res.pb") and not OLD.sniff(tmp_path / "res.pb")
    assert OLD.sniff(tmp_path / "legacy.bin") and not NEW.sniff(tmp_path / "legacy.bin")


def test_our_own_files_are_not_claimed(tmp_path):
    from autotune_cache.formats import save_results
    from tests.cachetools import fake_tune, make_key

    for name in ("ours.textproto", "ours.pb"):
        save_results(tmp_path / name, [fake_tune(make_key())])
        assert not NEW.sniff(tmp_path / name) and not OLD.sniff(tmp_path / name)
    (tmp_path / "garbage.pb").write_bytes(b"\xff\xfe not protobuf")
    assert not NEW.sniff(tmp_path / "garbage.pb") and not OLD.sniff(tmp_path / "garbage.pb")


def test_new_format_rows():
    rows = NEW.load(RES).rows()
    assert len(rows) == 10
    assert {r.device for r in rows} == {DEVICE_FP}
    assert {r.toolchain.split()[0] for r in rows} == {"codegen=fe9062d0fff82a66"}
    by_kernel = {r.kernel: r for r in rows}
    triton = by_kernel["fce9c74f1d1a635db2e4a3181e0c1551"]
    assert triton.config.startswith("TRITON block_m=128 block_n=256 block_k=64 num_stages=4")
    assert "TRITON=a77e7c793abc0d0c923a9afb275058e2fe57a198" in triton.toolchain
    gemm = by_kernel["e6df021cdd53c1a85fcfc75f0f9b4e3f"]
    assert gemm.config == "CUBLASLT_FISSION autotune_workspace_size=33554432"
    assert triton.id == f"{DEVICE_FP}/fce9c74f1d1a635db2e4a3181e0c1551@fe9062d0fff82a66"
    assert all(r.time_ms is None and r.tuned_at == "" for r in rows)


def test_new_format_directory_rows_carry_their_files():
    rs = NEW.load(FUSION)
    rows = rs.rows()
    assert len(rows) == 16 and rs.problems() == []
    for r in rows:
        assert Path(r.source) == FUSION / DEVICE_FP / f"{r.kernel}.pb"


def test_legacy_rows():
    rows = OLD.load(LEGACY).rows()
    assert len(rows) == 10
    assert all(r.device.startswith(H200_MODEL) and r.toolchain == "version=52" for r in rows)
    configs = sorted(r.config for r in rows)
    assert configs.count("NATIVE_EMITTER") == 8
    assert "gemm algorithm=3 autotune_workspace_size=33554432" in configs
    assert any(c.startswith("triton block_m=128 block_n=128") for c in configs)
    assert "add bf16[4096,1024]{1,0}" in {r.problem for r in rows}


def test_legacy_ids_are_xla_per_fusion_file_names():
    """XLA names legacy per-fusion files by a hash of the key; we compute the same names."""
    file_ids = {r.id for r in OLD.load(LEGACY).rows()}
    dir_ids = {p.stem for p in FUSION_LEGACY.glob("*.textproto")}
    assert file_ids == dir_ids


def test_legacy_directory_rows_have_no_key():
    rows = OLD.load(FUSION_LEGACY).rows()
    assert len(rows) == 10
    assert {r.device for r in rows} == {""} and {r.problem for r in rows} == {"(key not stored)"}
    assert all(Path(r.source).parent == FUSION_LEGACY for r in rows)


# --- round trips ----------------------------------------------------------------------------

@pytest.mark.parametrize(("fixture", "fmt"), [(RES, NEW), (LEGACY, OLD)], ids=["new", "legacy"])
def test_text_round_trip_is_byte_identical(tmp_path, fixture, fmt):
    out = tmp_path / "again.textproto"
    fmt.load(fixture).save(out)
    assert out.read_bytes() == fixture.read_bytes()


@pytest.mark.parametrize(("fixture", "fmt"), [(RES, NEW), (LEGACY, OLD)], ids=["new", "legacy"])
@pytest.mark.parametrize("binary", ["x.pb", "x.bin", "x.binpb"])
def test_text_binary_text_is_identical(tmp_path, fixture, fmt, binary):
    fmt.load(fixture).save(tmp_path / binary)
    first = (tmp_path / binary).read_bytes()
    fmt.load(tmp_path / binary).save(tmp_path / "back.textproto")
    assert (tmp_path / "back.textproto").read_bytes() == fixture.read_bytes()
    fmt.load(tmp_path / "back.textproto").save(tmp_path / "again.pb")
    assert (tmp_path / "again.pb").read_bytes() == first


def test_binary_file_matches_protobuf_encoding(tmp_path):
    NEW.load(RES).save(tmp_path / "res.pb")
    expected = text_format.Parse(RES.read_text(), cache_pb.AutotuneCache())
    assert (tmp_path / "res.pb").read_bytes() == expected.SerializeToString()
    OLD.load(LEGACY).save(tmp_path / "legacy.pb")
    expected = text_format.Parse(LEGACY.read_text(), legacy_pb.AutotuneResults())
    assert (tmp_path / "legacy.pb").read_bytes() == expected.SerializeToString()


def test_per_fusion_directory_round_trips_through_files(tmp_path):
    NEW.load(FUSION).save(tmp_path / "all.textproto")
    NEW.load(tmp_path / "all.textproto").save(tmp_path / "all.pb")
    NEW.load(tmp_path / "all.pb").save(tmp_path / "dir")
    assert files_of(tmp_path / "dir") == files_of(FUSION)


def test_dump_file_to_per_fusion_directory(tmp_path):
    NEW.load(RES).save(tmp_path / "dir/")
    written = files_of(tmp_path / "dir")
    assert len(written) == 10 and all(k.startswith(f"{DEVICE_FP}/") for k in written)
    again = NEW.load(tmp_path / "dir")
    assert [r.payload for r in again.rows()] == [r.payload for r in NEW.load(RES).rows()]
    # Where XLA's own directory (another run) chose the same config, the files are identical.
    same = [rel for rel, data in written.items()
            if (FUSION / rel).exists() and cache_pb.AutotuneEntry.FromString(data).value
            == cache_pb.AutotuneEntry.FromString((FUSION / rel).read_bytes()).value]
    assert len(same) >= 8
    assert all(written[rel] == (FUSION / rel).read_bytes() for rel in same)


def test_explicit_version_gets_its_own_directory_level(tmp_path):
    rs = NEW.load(RES)
    item = next(iter(rs.items.values()))
    item.entry.key.target.explicit_version = "v7"
    item.raw = None
    rs = XlaCacheSet({"x": item})
    rs.save(tmp_path / "dir")
    (file,) = (tmp_path / "dir").rglob("*.pb")
    assert file.relative_to(tmp_path / "dir").parts == (
        DEVICE_FP, "v7", item.entry.key.target.hlo_fingerprint + ".pb")
    assert NEW.load(tmp_path / "dir").problems() == []


# The dump and the per-fusion directory come from two runs: XLA's autotuner picked a different
# Triton tiling and cuBLAS algorithm for these two fusions, and the same config for the rest.
RETUNED = {"jQkD7PvI3H50S0vhoyUXzc56PZywET6hqSLMk_8bL7Q",
           "bytruJ0fbGF3Hgm08CjLFhDfb9u4KWWdJrXPVoghgHs"}


def test_legacy_file_to_directory_reproduces_xla_files(tmp_path):
    """Converting the dump gives the very files XLA wrote into its per-fusion directory."""
    OLD.load(LEGACY).save(tmp_path / "dir")
    ours, xla = files_of(tmp_path / "dir"), files_of(FUSION_LEGACY)
    assert ours.keys() == xla.keys()
    differing = {name.removesuffix(".textproto") for name in ours if ours[name] != xla[name]}
    assert differing == RETUNED


def test_legacy_directory_copies_byte_for_byte(tmp_path):
    OLD.load(FUSION_LEGACY).save(tmp_path / "copy")
    assert files_of(tmp_path / "copy") == files_of(FUSION_LEGACY)


def test_legacy_directory_cannot_become_a_file(tmp_path):
    with pytest.raises(CorruptFileError, match="do not store their device and HLO"):
        OLD.load(FUSION_LEGACY).save(tmp_path / "x.textproto")
    assert not (tmp_path / "x.textproto").exists()


def test_legacy_file_and_its_directory_differ_only_in_retuned_fusions():
    from autotune_cache.resultsets.base import diff_rows

    pairs, removed = diff_rows(OLD.load(LEGACY).rows(), OLD.load(FUSION_LEGACY).rows())
    assert removed == [] and all(old is not None for _, old, _ in pairs)  # nothing new
    assert {new.id for kind, _, new in pairs if kind != "unchanged"} == RETUNED


def test_cache_key_hash_matches_xla():
    entry = text_format.Parse(LEGACY.read_text(), legacy_pb.AutotuneResults()).results[0]
    assert (FUSION_LEGACY / f"{cache_file_stem(entry.device, entry.hlo, entry.version)}"
            ".textproto").exists()


# --- unknown fields -------------------------------------------------------------------------

def _with_unknown_fields() -> bytes:
    """res.textproto as binary, plus fields our schema lacks at the top and deep in an entry."""
    msg = text_format.Parse(RES.read_text(), cache_pb.AutotuneCache())
    entries = []
    for i, e in enumerate(msg.entries):
        raw = e.SerializeToString()
        if i == 0:  # value.optimal_config.backend_config gets field 99 = "future"
            cfg = e.value.optimal_config.backend_config.SerializeToString() + len_field(
                99, b"future")
            config = cache_pb.Config(backend=e.value.optimal_config.backend).SerializeToString()
            value = len_field(1, config + len_field(2, cfg)) + cache_pb.AutotuneValue(
                optimal_backend_version=e.value.optimal_backend_version).SerializeToString()
            raw = len_field(1, e.key.SerializeToString()) + len_field(2, value)
        entries.append(len_field(3, raw))
    return TOP_UNKNOWN + b"".join(entries)


TOP_UNKNOWN = len_field(100, b"new")


def test_unknown_fields_survive_binary_round_trips(tmp_path):
    data = _with_unknown_fields()
    (tmp_path / "future.pb").write_bytes(data)
    assert NEW.sniff(tmp_path / "future.pb")
    rs = NEW.load(tmp_path / "future.pb")
    rs.save(tmp_path / "again.pb")
    assert (tmp_path / "again.pb").read_bytes() == data
    rs.save(tmp_path / "dir")
    NEW.load(tmp_path / "dir").save(tmp_path / "from_dir.pb")
    assert b"future" in (tmp_path / "from_dir.pb").read_bytes()
    merged = rs.merge(NEW.load(RES), set())
    merged.save(tmp_path / "merged.pb")
    assert b"future" in (tmp_path / "merged.pb").read_bytes()


def test_text_refuses_to_drop_unknown_fields(tmp_path):
    (tmp_path / "future.pb").write_bytes(_with_unknown_fields())
    with pytest.raises(CorruptFileError, match="without losing data"):
        NEW.load(tmp_path / "future.pb").save(tmp_path / "x.textproto")
    assert not (tmp_path / "x.textproto").exists()


def test_legacy_entry_bytes_are_kept(tmp_path):
    msg = text_format.Parse(LEGACY.read_text(), legacy_pb.AutotuneResults())
    blob = msg.results[0].SerializeToString() + len_field(100, b"new")
    data = b"\x08\x03" + len_field(4, blob)
    (tmp_path / "x.pb").write_bytes(data)
    assert OLD.sniff(tmp_path / "x.pb")
    OLD.load(tmp_path / "x.pb").save(tmp_path / "y.pb")
    assert (tmp_path / "y.pb").read_bytes() == data


# --- select / merge / prune -----------------------------------------------------------------

def _two_device_set() -> XlaCacheSet:
    rs = NEW.load(RES)
    for i, item in enumerate(rs.items.values()):
        if i % 2:
            item.entry.key.target.device = "0123456789abcdef"
            item.raw = None
    return XlaCacheSet({k: v for k, v in zip(
        (r.id for r in rs.rows()), rs.items.values(), strict=True)}, rs.header, origin=RES)


def test_prune_by_device_keeps_only_that_device(tmp_path):
    rs = _two_device_set()
    keep = {r.id for r in rs.rows() if DEVICE_FP in r.device}
    assert len(keep) == 5
    rs.select(keep).save(tmp_path / "kept.textproto")
    assert {r.device for r in NEW.load(tmp_path / "kept.textproto").rows()} == {DEVICE_FP}
    rs.save(tmp_path / "dir")
    assert sorted(p.name for p in (tmp_path / "dir").iterdir()) == [
        "0123456789abcdef", DEVICE_FP]


def test_prune_legacy_by_device(tmp_path):
    rs = OLD.load(LEGACY)
    first = next(iter(rs.items.values()))
    first.entry.device = "CUDA: 8.0, Cores: 108"
    first.raw = None
    rs = XlaLegacySet({cache_file_stem(i.entry.device, i.entry.hlo, i.entry.version): i
                       for i in rs.items.values()}, rs.header)
    keep = {r.id for r in rs.rows() if "CUDA: 9.0" in r.device}
    assert len(keep) == 9
    rs.select(keep).save(tmp_path / "kept.pb")
    assert {r.device.split(",")[0] for r in OLD.load(tmp_path / "kept.pb").rows()} == {
        "CUDA: 9.0"}


def test_merge_prefers_ours_unless_told(tmp_path):
    a, b = NEW.load(RES), NEW.load(FUSION)
    shared = {r.id for r in a.rows()} & {r.id for r in b.rows()}
    assert shared  # same device and codegen version, so ids line up
    merged = a.merge(b, set())
    assert len(merged.rows()) == len({r.id for r in a.rows()} | {r.id for r in b.rows()})
    mine = {r.id: r.payload for r in a.rows()}
    theirs = {r.id: r.payload for r in b.rows()}
    assert all(r.payload == mine[r.id] for r in merged.rows() if r.id in shared)
    merged = a.merge(b, shared)
    assert all(r.payload == theirs[r.id] for r in merged.rows() if r.id in shared)
    with pytest.raises(CorruptFileError, match="merge files of one format"):
        a.merge(OLD.load(LEGACY), set())


def test_legacy_merge_of_file_and_directory_keeps_keys(tmp_path):
    a, b = OLD.load(LEGACY), OLD.load(FUSION_LEGACY)
    merged = a.merge(b, RETUNED)
    merged.save(tmp_path / "m.textproto")  # every entry still has its key
    again = OLD.load(tmp_path / "m.textproto")
    assert {r.id for r in again.rows()} == {r.id for r in a.rows()}
    dir_payload = {r.id: r.payload for r in b.rows()}
    assert all(r.payload == dir_payload[r.id] for r in again.rows())
    assert all(r.device.startswith(H200_MODEL) for r in again.rows())
