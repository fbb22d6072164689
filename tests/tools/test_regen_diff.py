"""Unit tests of tools/regen_diff.py: what a regenerated cache changed, and what it keeps."""

from __future__ import annotations

import sys
from pathlib import Path

from autotune_cache.formats import load_results, save_results, serialize_results
from autotune_cache.proto import autotune_results_pb2 as pb

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import regen_diff  # noqa: E402


def _entry(problem: str, time_ms: float, block: int) -> pb.Entry:
    entry = pb.Entry()
    entry.key.kernel = "k"
    entry.key.problem = problem
    entry.key.device.name = "cpu-interpreter"
    entry.result.time_ms = time_ms
    entry.result.tuned_at = f"2026-01-01T00:00:{int(time_ms):02d}Z"
    entry.result.config.params.add(name="BLOCK", int_value=block)
    return entry


def test_diff_counts_added_removed_changed_and_retimed(tmp_path: Path) -> None:
    old, new = tmp_path / "old.textproto", tmp_path / "new.textproto"
    save_results(old, [_entry("n=1", 1, 64), _entry("n=2", 2, 64), _entry("n=3", 3, 64)])
    save_results(new, [_entry("n=1", 1, 64), _entry("n=2", 5, 64), _entry("n=3", 3, 128),
                       _entry("n=4", 4, 64)])
    change = regen_diff.compare(old.read_bytes(), new.read_bytes(), ".textproto")
    assert (change.added, change.removed, change.changed, change.retimed, change.unchanged) == (
        1, 0, 1, 1, 1)
    same = regen_diff.compare(old.read_bytes(), old.read_bytes(), ".textproto")
    assert same.identical_bytes and not same.differs and "byte-identical" in same.describe()
    created = regen_diff.compare(None, new.read_bytes(), ".textproto")
    assert created.created and created.added == 4


def test_regen_keeps_the_entries_of_devices_the_dump_did_not_run_on(tmp_path: Path) -> None:
    def on(device: str, problem: str, time_ms: float) -> pb.Entry:
        entry = _entry(problem, time_ms, 64)
        entry.key.device.name = device
        return entry

    committed = serialize_results([on("NVIDIA H200", "n=1", 1), on("cpu-interpreter", "n=1", 2),
                                   on("cpu-interpreter", "gone", 3)], text=True)
    dumped = serialize_results([on("cpu-interpreter", "n=1", 7)], text=True)
    merged = regen_diff.committed_bytes(committed, dumped, ".textproto")
    path = tmp_path / "m.textproto"
    path.write_bytes(merged)
    got = {(e.key.device.name, e.key.problem, e.result.time_ms) for e in load_results(path)}
    # The H200 entry survives a regen on the interpreter; the interpreter's own entries are
    # exactly the dump's (its unused "gone" entry is dropped).
    assert got == {("NVIDIA H200", "n=1", 1.0), ("cpu-interpreter", "n=1", 7.0)}
    assert regen_diff.committed_bytes(None, dumped, ".textproto") == dumped
    change = regen_diff.compare(committed, merged, ".textproto")
    assert (change.added, change.removed, change.retimed) == (0, 1, 1)


# --- binary committed caches (cache = "x.pb"): the dump is always text -------------------------


def _on(device: str, problem: str, time_ms: float) -> pb.Entry:
    entry = _entry(problem, time_ms, 64)
    entry.key.device.name = device
    return entry


def _entries(data: bytes, suffix: str, tmp_path: Path) -> set[tuple[str, str, float]]:
    path = tmp_path / f"read{suffix}"
    path.write_bytes(data)
    return {(e.key.device.name, e.key.problem, e.result.time_ms) for e in load_results(path)}


def test_binary_destination_gets_binary_bytes_merged_with_other_devices(tmp_path: Path) -> None:
    committed = serialize_results([_on("NVIDIA H200", "n=1", 1), _on("cpu-interpreter", "n=1", 2)],
                                  text=False)
    dumped = serialize_results([_on("cpu-interpreter", "n=1", 7)], text=True)
    new = regen_diff.committed_bytes(committed, dumped, ".pb")
    assert new == serialize_results([_on("NVIDIA H200", "n=1", 1),
                                     _on("cpu-interpreter", "n=1", 7)], text=False)
    assert b"cpu-interpreter" in new and b"entries {" not in new  # binary, not text
    change = regen_diff.compare(committed, new, ".pb")
    assert (change.added, change.removed, change.retimed, change.unchanged) == (0, 0, 1, 1)
    # Nothing of another device to keep: still converted to binary.
    only_dump = regen_diff.committed_bytes(
        serialize_results([_on("cpu-interpreter", "n=1", 2)], text=False), dumped, ".pb")
    assert _entries(only_dump, ".pb", tmp_path) == {("cpu-interpreter", "n=1", 7.0)}


def test_binary_destination_without_a_committed_file_is_created_binary(tmp_path: Path) -> None:
    dumped = serialize_results([_on("cpu-interpreter", "n=1", 7)], text=True)
    new = regen_diff.committed_bytes(None, dumped, ".pb")
    assert new == serialize_results([_on("cpu-interpreter", "n=1", 7)], text=False)
    assert regen_diff.compare(None, new, ".pb").created
    # A text destination keeps the dump's bytes exactly.
    assert regen_diff.committed_bytes(None, dumped, ".textproto") == dumped


def test_a_kernel_edit_loses_no_entries_so_a_narrowed_check_stays_narrow(tmp_path: Path) -> None:
    """Issue 39: a one-test `--check` after a kernel edit queried the whole workspace ("looking
    for other tests that share it"), because every entry's key changed and the old ones counted
    as removed. Entries are matched by kernel, problem and device now (the vocabulary of diff
    and report): the edit's entries replace the old ones, nothing is lost, and
    widen_where_entries_would_go has nothing to look for."""
    old = [_entry("n=1", 1, 64), _entry("n=2", 2, 64)]
    new = [_entry("n=1", 1, 64), _entry("n=2", 2, 128)]
    for entry in new:
        entry.key.source_fingerprint = "edited"
    a, b = tmp_path / "old.textproto", tmp_path / "new.textproto"
    save_results(a, old)
    save_results(b, new)
    change = regen_diff.compare(a.read_bytes(), b.read_bytes(), ".textproto")
    assert (change.removed, change.changed, change.unchanged) == (0, 1, 1)
    assert change.describe() == ("1 winners changed, 0 re-timed, 0 new, 0 removed, 1 unchanged; "
                                 "2 kernel source changed")


def test_a_rekeyed_entry_says_which_part_of_its_key_changed(tmp_path: Path) -> None:
    """A candidate added to a kernel whose winner stays: "1 unchanged" alone would show a
    reviewer no difference, so the summary names the key's change, in diff's words."""
    old = [_entry("n=1", 1, 64), _entry("n=2", 2, 64), _entry("n=3", 3, 64)]
    new = [_entry("n=1", 1, 64), _entry("n=2", 2, 64), _entry("n=3", 3, 64)]
    new[0].key.configs_fingerprint = "one more config"
    new[1].key.source_fingerprint = "edited"
    new[1].result.time_ms = 5
    a, b = tmp_path / "old.textproto", tmp_path / "new.textproto"
    save_results(a, old)
    save_results(b, new)
    change = regen_diff.compare(a.read_bytes(), b.read_bytes(), ".textproto")
    assert change.rekeyed == (("candidate list changed", 1), ("kernel source changed", 1))
    assert change.describe() == ("0 winners changed, 1 re-timed, 0 new, 0 removed, 2 unchanged; "
                                 "1 candidate list changed; 1 kernel source changed")
