"""XLA's autotune files on bad input: damaged or foreign bytes, files from a newer XLA,
oversize files, damaged directory entries, keys that would escape the directory. Each is a named
error or a listed problem, never a crash, and never a silently dropped entry.
"""

from __future__ import annotations

import shutil

import pytest
from google.protobuf import text_format

from autotune_cache import CorruptFileError
from autotune_cache.xla.proto import xla_autotuner_pb2 as cache_pb
from tests.xla.xla_fixtures import DEVICE_FP, FIX, FUSION, FUSION_LEGACY, LEGACY, NEW, OLD, RES


def test_corrupt_binary_names_the_file(tmp_path):
    path = tmp_path / "bad.pb"
    NEW.load(RES).save(path)
    data = path.read_bytes()
    path.write_bytes(data[:-7])
    with pytest.raises(CorruptFileError, match=str(path)):
        NEW.load(path)


def test_unknown_text_field_says_newer_xla(tmp_path):
    path = tmp_path / "new.textproto"
    path.write_text(RES.read_text().replace("native_emitter {", "fancy_new_backend {", 1))
    with pytest.raises(CorruptFileError, match="newer XLA") as e:
        NEW.load(path)
    assert str(path) in str(e.value)


def test_unknown_any_type_in_text_says_newer_xla(tmp_path):
    path = tmp_path / "l.textproto"
    path.write_text(LEGACY.read_text().replace("xla.autotuner.BackendConfig", "xla.Future", 1))
    with pytest.raises(CorruptFileError, match="newer XLA"):
        OLD.load(path)


def test_oversize_file_is_refused(tmp_path, monkeypatch):
    import autotune_cache.formats

    monkeypatch.setattr(autotune_cache.formats, "MAX_FILE_BYTES", 1000)
    with pytest.raises(CorruptFileError, match="larger than"):
        NEW.load(RES)


def test_damaged_directory_entries_are_listed_not_fatal(tmp_path):
    shutil.copytree(FUSION, tmp_path / "f")
    victim = next((tmp_path / "f" / DEVICE_FP).glob("*.pb"))
    victim.write_bytes(b"\xff\xff\xff garbage")
    moved = tmp_path / "f" / DEVICE_FP / "0000.pb"
    next(p for p in (tmp_path / "f" / DEVICE_FP).glob("*.pb") if p != victim).rename(moved)
    rs = NEW.load(tmp_path / "f")
    problems = rs.problems()
    assert len(rs.rows()) == 15 and len(problems) == 2
    assert any(str(victim) in p for p in problems)
    assert any(str(moved) in p and "never be read" in p for p in problems)


def test_damaged_legacy_directory_entry_is_listed(tmp_path):
    shutil.copytree(FUSION_LEGACY, tmp_path / "f")
    victim = next((tmp_path / "f").glob("*.textproto"))
    victim.write_text("other { nonsense")
    rs = OLD.load(tmp_path / "f")
    assert len(rs.rows()) == 9 and len(rs.problems()) == 1 and str(victim) in rs.problems()[0]


def test_temp_files_are_ignored_and_reported(tmp_path):
    import os

    shutil.copytree(FUSION, tmp_path / "f")
    (tmp_path / "f" / "tmp").mkdir()
    stale = tmp_path / "f" / "tmp" / "tmp_123"
    stale.write_bytes(b"partial")
    os.utime(stale, (1, 1))
    (tmp_path / "f" / "tmp" / "tmp_456").write_bytes(b"in flight")
    rs = NEW.load(tmp_path / "f")
    assert len(rs.rows()) == 16 and rs.problems() == []
    assert rs.leftovers() == [stale]


@pytest.mark.parametrize("device", ["..", "../../etc", "a/b", ""])
def test_entry_keys_cannot_escape_the_directory(tmp_path, device):
    rs = NEW.load(RES)
    item = next(iter(rs.items.values()))
    item.entry.key.target.device = device
    with pytest.raises(CorruptFileError, match="cannot be used as a directory or file name"):
        rs.save(tmp_path / "out" / "dir")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.pb"))


def test_duplicate_targets_cannot_share_a_directory_file(tmp_path):
    rs = NEW.load(RES)
    items = list(rs.items.values())
    dup = cache_pb.AutotuneEntry()
    dup.CopyFrom(items[0].entry)
    dup.key.environment.codegen_version = "other"
    from autotune_cache.xla.cache_format import CacheItem, entry_id

    rs.items[entry_id(dup)] = CacheItem(dup)
    rs.save(tmp_path / "both.textproto")  # a file may hold both
    with pytest.raises(CorruptFileError, match="share the file"):
        rs.save(tmp_path / "dir")


def test_legacy_wrong_version_is_a_problem(tmp_path):
    path = tmp_path / "v2.textproto"
    path.write_text(LEGACY.read_text().replace("version: 3\n", "version: 2\n", 1))
    rs = OLD.load(path)
    assert any("version 2" in p for p in rs.problems())


def test_unknown_backend_name_in_text_says_newer_xla(tmp_path):
    path = tmp_path / "new.textproto"
    path.write_text(RES.read_text().replace("backend: TRITON", "backend: CUTE_DSL", 1))
    with pytest.raises(CorruptFileError, match="newer XLA"):
        NEW.load(path)


def test_unknown_backend_number_in_binary_is_kept(tmp_path):
    msg = text_format.Parse(RES.read_text(), cache_pb.AutotuneCache())
    msg.entries[0].value.optimal_config.backend = 77  # open enum: a newer XLA's backend
    (tmp_path / "x.pb").write_bytes(msg.SerializeToString())
    rs = NEW.load(tmp_path / "x.pb")
    assert rs.rows()[0].config.startswith("backend#77")
    rs.save(tmp_path / "y.pb")
    assert (tmp_path / "y.pb").read_bytes() == (tmp_path / "x.pb").read_bytes()


def test_directories_that_are_not_xla_caches_are_not_claimed(tmp_path):
    (tmp_path / "ours" / ".locks").mkdir(parents=True)  # an empty autotune_cache directory
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    (tmp_path / "docs" / "sub" / "notes.txt").write_text("hi")
    (tmp_path / "empty").mkdir()
    for d in ("ours", "docs", "empty"):
        assert not NEW.sniff(tmp_path / d) and not OLD.sniff(tmp_path / d)
    (tmp_path / "pruned" / DEVICE_FP).mkdir(parents=True)  # XLA's, with every entry pruned
    assert NEW.sniff(tmp_path / "pruned") and NEW.load(tmp_path / "pruned").rows() == []


def test_binary_file_with_a_new_scalar_field_is_still_xla(tmp_path):
    """A newer XLA may add a top-level scalar; the file must still be read as XLA's, and keep it."""
    from autotune_cache.cli import main
    from autotune_cache.resultsets.registry import load_any
    from autotune_cache.xla.wire import encode_varint

    src = tmp_path / "res.pb"
    assert main(["convert", str(FIX / "res.textproto"), str(src)]) == 0
    extended = tmp_path / "newer.pb"
    extended.write_bytes(src.read_bytes() + encode_varint(99 << 3) + encode_varint(7))
    rs = load_any(extended)
    assert rs.format_name == "xla" and len(rs.rows()) == 10
    out = tmp_path / "copy.pb"
    assert main(["convert", str(extended), str(out)]) == 0
    assert encode_varint(99 << 3) + encode_varint(7) in out.read_bytes()
