"""Results files: format by extension, determinism, versions, damage and size limits."""

import pytest

from autotune_cache import CorruptFileError, VersionMismatchError, formats
from autotune_cache.formats import load_results, save_results, serialize_results
from autotune_cache.proto import autotune_results_pb2 as pb
from tests.cachetools import CPU, fake_tune, make_key

ENTRIES = [fake_tune(make_key(problem={"M": m})) for m in (256, 64, 128)] + [
    fake_tune(make_key(device=CPU))]


@pytest.mark.parametrize("ext", [".txt", ".textproto", ".pbtxt", ".txtpb", ".prototxt"])
def test_text_extensions_write_text(tmp_path, ext):
    path = tmp_path / f"cache{ext}"
    save_results(path, ENTRIES)
    assert path.read_text().startswith("version: 1\n")
    assert len(load_results(path)) == 4


@pytest.mark.parametrize("ext", [".pb", ".bin", ".binpb", ""])
def test_other_extensions_write_binary(tmp_path, ext):
    path = tmp_path / f"cache{ext}"
    save_results(path, ENTRIES)
    msg = pb.AutotuneResultsFile.FromString(path.read_bytes())
    assert msg.version == 1 and len(msg.entries) == 4
    assert load_results(path) == list(msg.entries)


@pytest.mark.parametrize("text", [True, False])
def test_output_is_sorted_and_byte_identical(tmp_path, text):
    first = serialize_results(ENTRIES, text=text)
    assert serialize_results(list(reversed(ENTRIES)), text=text) == first
    path = tmp_path / ("a.textproto" if text else "a.pb")
    save_results(path, ENTRIES)
    save_results(path, load_results(path))
    assert path.read_bytes() == first
    problems = [e.key.problem for e in load_results(path)]
    assert problems == sorted(problems, key=lambda p: p)


def test_duplicate_keys_keep_the_last(tmp_path):
    key = make_key()
    old, new = fake_tune(key, tuning_seconds=1.0), fake_tune(key, tuning_seconds=9.0)
    save_results(tmp_path / "c.textproto", [old, new])
    (only,) = load_results(tmp_path / "c.textproto")
    assert only.result.tuning_seconds == 9.0


def test_version_mismatch_names_both_versions(tmp_path):
    path = tmp_path / "future.textproto"
    path.write_text("version: 7\n")
    with pytest.raises(VersionMismatchError, match=r"future.textproto.*version 7.*reads version 1"):
        load_results(path)


def test_corrupt_text_file_names_the_path(tmp_path):
    path = tmp_path / "bad.textproto"
    path.write_text("version: 1\nentries { key { kernel: ")
    with pytest.raises(CorruptFileError, match="bad.textproto"):
        load_results(path)


def test_text_in_a_binary_path_gets_a_hint(tmp_path):
    path = tmp_path / "cache.pb"
    path.write_text("version: 1\n")
    with pytest.raises(CorruptFileError, match="looks like text"):
        load_results(path)


def test_missing_file_says_how_to_make_it(tmp_path):
    with pytest.raises(CorruptFileError, match="does not exist.*dump_autotune_results_to"):
        load_results(tmp_path / "nope.textproto")


def test_entry_without_kernel_is_rejected(tmp_path):
    path = tmp_path / "c.textproto"
    path.write_text("version: 1\nentries { result { time_ms: 1 } }\n")
    with pytest.raises(CorruptFileError, match="entry 0 has no key.kernel"):
        load_results(path)


def test_size_limit(tmp_path, monkeypatch):
    path = tmp_path / "big.pb"
    save_results(path, ENTRIES)
    monkeypatch.setattr(formats, "MAX_FILE_BYTES", 100)
    with pytest.raises(CorruptFileError, match="larger than the .* limit"):
        load_results(path)


def test_newer_file_with_unknown_fields_names_both_versions(tmp_path):
    path = tmp_path / "newer.textproto"
    path.write_text("version: 2\nentries { key { kernel: 'k' } shiny_new_field: 3 }\n")
    with pytest.raises(VersionMismatchError, match="version 2.*reads version 1"):
        load_results(path)
