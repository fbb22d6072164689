"""Unit tests of the ruleset's Python parts that need no Bazel: test_main.py, regen_bazel.py,
regen_diff.py (the real-Bazel tests are in test_bazel_examples.py)."""

from __future__ import annotations

import importlib.util
import json
import sys
import unittest
import zipfile
from pathlib import Path

import pytest

from autotune_cache.formats import save_results
from autotune_cache.proto import autotune_results_pb2 as pb

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import regen_bazel  # noqa: E402
import regen_diff  # noqa: E402


def _load_test_main():
    """rules/private/test_main.py as a module (it is not in a Python package)."""
    spec = importlib.util.spec_from_file_location(
        "autotune_test_main", REPO / "rules/private/test_main.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


test_main = _load_test_main()


def test_dump_refuses_forced_shards_with_a_clear_message() -> None:
    env = {"AUTOTUNE_DUMP_TARGET": "//pkg:t.dump", "TEST_TOTAL_SHARDS": "4",
           "TEST_SHARD_INDEX": "2"}
    message = test_main.sharding_error(env)
    assert message and "//pkg:t.dump is running as shard 2 of 4" in message
    assert "--test_sharding_strategy=disabled" in message
    assert test_main.sharding_error({**env, "TEST_TOTAL_SHARDS": "1"}) is None
    # A sharded *load* test is fine: only dumps refuse.
    assert test_main.sharding_error({"TEST_TOTAL_SHARDS": "4"}) is None
    with pytest.raises(SystemExit, match="not a number"):
        test_main.sharding_error({**env, "TEST_TOTAL_SHARDS": "x"})


def test_shards_split_unittest_cases_round_robin_by_id() -> None:
    class Many(unittest.TestCase):
        def test_a(self) -> None: ...
        def test_b(self) -> None: ...
        def test_c(self) -> None: ...
        def test_d(self) -> None: ...
        def test_e(self) -> None: ...

    suite = unittest.defaultTestLoader.loadTestsFromTestCase(Many)
    shards = [[c.id().rsplit(".", 1)[1] for c in test_main.shard_suite(suite, i, 3)]
              for i in range(3)]
    assert shards == [["test_a", "test_d"], ["test_b", "test_e"], ["test_c"]]


def test_missing_main_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="Set `main`"):
        test_main.resolve_main({"AUTOTUNE_TEST_MAIN": "pkg/nope.py", "TEST_SRCDIR": str(tmp_path),
                                "TEST_WORKSPACE": "ws"})
    with pytest.raises(SystemExit, match="AUTOTUNE_TEST_MAIN is not set"):
        test_main.resolve_main({})


QUERY_XML = """<?xml version="1.1" encoding="UTF-8" standalone="no"?>
<query version="2">
  <rule class="py_test" location="/ws/examples/triton/BUILD.bazel:29:22"
        name="//examples/triton:matmul_test.dump">
    <list name="tags">
      <string value="manual"/><string value="autotune_dump"/>
      <string value="autotune_cache_path=examples/triton/matmul_test.autotune.textproto"/>
    </list>
  </rule>
  <rule class="py_test" location="/ws/x/BUILD.bazel:1:1" name="@//x:other">
    <list name="tags"><string value="manual"/></list>
  </rule>
</query>
"""


def test_dump_targets_come_from_query_xml() -> None:
    (target,) = regen_bazel.parse_dump_targets(QUERY_XML)
    assert target == regen_bazel.DumpTarget(
        "//examples/triton:matmul_test.dump", "examples/triton/matmul_test.autotune.textproto")
    assert target.test_label == "//examples/triton:matmul_test"
    broken = QUERY_XML.replace(
        '<string value="autotune_cache_path=examples/triton/matmul_test.autotune.textproto"/>', "")
    with pytest.raises(regen_bazel.RegenError, match="autotune_cache_path="):
        regen_bazel.parse_dump_targets(broken)


def test_statuses_come_from_the_build_event_json(tmp_path: Path) -> None:
    bep = tmp_path / "bep.json"
    def summary(label: str, status: str) -> dict:
        return {"id": {"testSummary": {"label": label}}, "testSummary": {"overallStatus": status}}

    events = [summary("//a:b.dump", "PASSED"), summary("@//a:c.dump", "FAILED"),
              {"id": {"progress": {}}, "progress": {}}]
    bep.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    assert regen_bazel.read_test_statuses(bep) == {"//a:b.dump": "PASSED", "//a:c.dump": "FAILED"}
    assert regen_bazel.read_test_statuses(tmp_path / "absent.json") == {}


def test_test_dirs_come_from_the_test_log_uri(tmp_path: Path) -> None:
    bep = tmp_path / "bep.json"
    log = "/out/bazel-out/k8-opt/testlogs/a/b%20c.dump/test.log"
    event = {"id": {"testResult": {"label": "@@//a:b c.dump", "shard": 1}},
             "testResult": {"testActionOutput": [
                 {"name": "test.xml", "uri": "file:///elsewhere/test.xml"},
                 {"name": "test.log", "uri": f"file://{log}"}]}}
    bep.write_text(json.dumps(event) + "\n")
    assert regen_bazel.read_test_dirs(bep) == {
        "//a:b c.dump": Path("/out/bazel-out/k8-opt/testlogs/a/b c.dump")}


@pytest.mark.parametrize("layout", ["zipped", "unzipped", "absent"])
def test_dump_is_read_from_either_outputs_layout(tmp_path: Path, layout: str) -> None:
    outputs = tmp_path / "examples/triton/t.dump/test.outputs"
    outputs.mkdir(parents=True)
    if layout == "zipped":
        with zipfile.ZipFile(outputs / "outputs.zip", "w") as z:
            z.writestr("autotune_cache.textproto", b"version: 1\n")
    elif layout == "unzipped":
        (outputs / "autotune_cache.textproto").write_bytes(b"version: 1\n")
    expected = None if layout == "absent" else b"version: 1\n"
    test_dir = regen_bazel.outputs_dir(tmp_path, "//examples/triton:t.dump")
    assert regen_bazel.read_dump(test_dir) == expected


def test_workspace_is_found_from_bazel_run_or_markers(tmp_path: Path) -> None:
    (tmp_path / "MODULE.bazel").write_text("")
    (tmp_path / "a/b").mkdir(parents=True)
    assert regen_bazel.find_workspace({}, tmp_path / "a/b") == tmp_path
    assert regen_bazel.find_workspace({"BUILD_WORKSPACE_DIRECTORY": "/w"}, tmp_path) == Path("/w")
    with pytest.raises(regen_bazel.RegenError, match="pass --workspace"):
        regen_bazel.find_workspace({}, Path("/"))


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
    from autotune_cache.formats import load_results, serialize_results

    def on(device: str, problem: str, time_ms: float) -> pb.Entry:
        entry = _entry(problem, time_ms, 64)
        entry.key.device.name = device
        return entry

    committed = serialize_results([on("NVIDIA H200", "n=1", 1), on("cpu-interpreter", "n=1", 2),
                                   on("cpu-interpreter", "gone", 3)], text=True)
    dumped = serialize_results([on("cpu-interpreter", "n=1", 7)], text=True)
    merged = regen_diff.keep_other_devices(committed, dumped, ".textproto")
    path = tmp_path / "m.textproto"
    path.write_bytes(merged)
    got = {(e.key.device.name, e.key.problem, e.result.time_ms) for e in load_results(path)}
    # The H200 entry survives a regen on the interpreter; the interpreter's own entries are
    # exactly the dump's (its unused "gone" entry is dropped).
    assert got == {("NVIDIA H200", "n=1", 1.0), ("cpu-interpreter", "n=1", 7.0)}
    assert regen_diff.keep_other_devices(None, dumped, ".textproto") == dumped
    change = regen_diff.compare(committed, merged, ".textproto")
    assert (change.added, change.removed, change.retimed) == (0, 1, 1)
