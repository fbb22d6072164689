"""Unit tests of the ruleset's Python parts that need no Bazel: test_main.py, regen_bazel.py,
regen_diff.py, regen_cache.py, MODULE.bazel (the real-Bazel tests are in
test_bazel_examples.py)."""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
import unittest
import zipfile
from pathlib import Path

import pytest

from autotune_cache.formats import load_results, save_results, serialize_results
from autotune_cache.proto import autotune_results_pb2 as pb

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import regen_bazel  # noqa: E402
import regen_cache  # noqa: E402
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


def _dump_dir(tmp_path: Path, dumped: bytes) -> Path:
    test_dir = tmp_path / "testlogs/pkg/t.dump"
    (test_dir / "test.outputs").mkdir(parents=True)
    (test_dir / "test.outputs/autotune_cache.textproto").write_bytes(dumped)
    return test_dir


@pytest.mark.parametrize("existing", [True, False])
def test_regen_writes_a_binary_committed_cache(tmp_path: Path, existing: bool) -> None:
    workspace = tmp_path / "ws"
    (workspace / "pkg").mkdir(parents=True)
    destination = workspace / "pkg/t.pb"
    if existing:
        save_results(destination, [_on("NVIDIA H200", "n=1", 1), _on("cpu-interpreter", "n=1", 2)])
    test_dir = _dump_dir(tmp_path, serialize_results([_on("cpu-interpreter", "n=1", 7)], text=True))
    target = regen_bazel.DumpTarget("//pkg:t.dump", "pkg/t.pb")
    outcome = regen_cache.regenerate_one(target, "PASSED", test_dir, workspace, check=False)
    assert outcome.ok, outcome.problem
    expected = {("cpu-interpreter", "n=1", 7.0)} | (
        {("NVIDIA H200", "n=1", 1.0)} if existing else set())
    assert {(e.key.device.name, e.key.problem, e.result.time_ms)
            for e in load_results(destination)} == expected
    assert not destination.read_bytes().lstrip().startswith(b"version")  # binary on disk
    assert outcome.change.created == (not existing)


def test_an_unreadable_committed_cache_fails_only_its_own_target(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workspace = tmp_path / "ws"
    (workspace / "pkg").mkdir(parents=True)
    (workspace / "pkg/t.pb").write_bytes(b"version: 1\nthis is text in a binary file\n")
    test_dir = _dump_dir(tmp_path, serialize_results([_on("cpu-interpreter", "n=1", 7)], text=True))
    bad = regen_cache.regenerate_one(regen_bazel.DumpTarget("//pkg:t.dump", "pkg/t.pb"),
                                     "PASSED", test_dir, workspace, check=False)
    assert not bad.ok and "CorruptFileError" in bad.problem and "left as is" in bad.problem
    assert (workspace / "pkg/t.pb").read_bytes().startswith(b"version: 1\nthis is text")
    good = regen_cache.regenerate_one(regen_bazel.DumpTarget("//pkg:u.dump", "pkg/u.textproto"),
                                      "PASSED", test_dir, workspace, check=False)
    assert good.ok
    assert regen_cache.report([bad, good], check=False) == 1
    out = capsys.readouterr().out
    assert "pkg/t.pb: NOT REGENERATED (//pkg:t.dump): CorruptFileError" in out, out
    assert "pkg/u.textproto: ok: created" in out and "2 cache(s): 1 rewritten, 1 failed" in out


# --- regen_cache against a fake Bazel: exit codes and flags ------------------------------------

FAKE_BAZEL = r'''#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_BAZEL_LOG"], "a") as log:
    log.write(json.dumps(args) + "\n")
verb = args[0]
if verb == "query" and any(a.startswith("--test_env") for a in args):
    print("ERROR: --test_env=A=1 :: Unrecognized option: --test_env=A=1", file=sys.stderr)
    sys.exit(2)
if verb == "query":
    if "--output=label" in args:
        print("//pkg:t")
    else:
        print('<?xml version="1.1"?><query version="2">'
              '<rule class="py_test" name="//pkg:t.dump"><list name="tags">'
              '<string value="autotune_dump"/>'
              '<string value="autotune_cache_path=pkg/t.autotune.textproto"/>'
              '</list></rule></query>')
    sys.exit(0)
if verb == "test":
    print("ERROR: /ws/pkg/BUILD.bazel:1:1: no such target", file=sys.stderr)
    sys.exit(int(os.environ.get("FAKE_BAZEL_TEST_EXIT", "1")))
print("info is not expected after a failed build", file=sys.stderr)
sys.exit(2)
'''


def _fake_bazel(tmp_path: Path) -> Path:
    fake = tmp_path / "fake_bazel"
    fake.write_text(FAKE_BAZEL.replace("{python}", sys.executable))
    fake.chmod(0o755)
    return fake


def _regen_with_fake_bazel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           *flags: str) -> tuple[int, list[list[str]]]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "MODULE.bazel").write_text("")
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_BAZEL_LOG", str(calls))
    args = regen_cache.parse_args([
        f"--bazel={_fake_bazel(tmp_path)}", f"--workspace={workspace}", "--gpus=none",
        *flags, "//pkg:t"])
    code = regen_cache.run(args)
    return code, [json.loads(line) for line in calls.read_text().splitlines()]


def test_a_failed_inner_build_is_reported_as_such(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    code, invocations = _regen_with_fake_bazel(
        tmp_path, monkeypatch, "--bazel_flag=--override_repository=x=/y")
    assert code == 1
    out = capfd.readouterr().out
    assert re.search(r"pkg/t\.autotune\.textproto: NOT REGENERATED \(//pkg:t\.dump\): "
                     r"bazel test failed to build \(exit 1\)", out), out
    assert "test.log" not in out
    queries = [a for a in invocations if a[0] == "query"]
    (test,) = [a for a in invocations if a[0] == "test"]
    assert len(queries) == 2 and all("--override_repository=x=/y" in q for q in queries)
    assert "--override_repository=x=/y" in test


def test_bazel_flags_that_query_rejects_still_go_to_the_test_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    code, invocations = _regen_with_fake_bazel(tmp_path, monkeypatch, "--bazel_flag=--test_env=A=1")
    assert code == 1
    assert "querying without --bazel_flag values" in capfd.readouterr().err
    queries = [a for a in invocations if a[0] == "query"]
    (test,) = [a for a in invocations if a[0] == "test"]
    # One rejected query with the flag, then both queries without it.
    assert ["--test_env=A=1" in q for q in queries] == [True, False, False]
    assert "--test_env=A=1" in test


def test_a_dump_without_status_after_a_good_build_says_so(tmp_path: Path) -> None:
    problem = regen_cache._not_passed("NO STATUS", tmp_path / "nowhere", 0)
    assert "no test status" in problem and "no test.log" in problem
    (tmp_path / "test.log").write_text("log")
    assert f"see {tmp_path / 'test.log'}" in regen_cache._not_passed("FAILED", tmp_path, 3)


def test_main_catches_library_errors_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune_cache.errors import CorruptFileError

    def broken(args: argparse.Namespace) -> int:
        raise CorruptFileError("x.pb: looks like text")

    monkeypatch.setattr(regen_cache, "run", broken)
    assert regen_cache.main(["--dry_run"]) == 2


# --- test_main.py run as Bazel would run it (a subprocess per shard) ---------------------------

TEST_MAIN = REPO / "rules/private/test_main.py"

ABSLTEST_LIKE_MAIN = '''
"""Nine cases in two classes, run the way absltest.main() runs them: absltest's _setup_sharding
touches TEST_SHARD_STATUS_FILE, then replaces getTestCaseNames on the loader *instance* with a
filter that deals sorted names round-robin to the shards, then hands the loader to
unittest.TestProgram."""
import itertools, os, sys, unittest

RAN = os.environ["RAN_FILE"]

def _record(self):
    with open(RAN, "a") as f:
        f.write(self.id().split(".", 1)[1] + "\\n")

class A(unittest.TestCase):
    pass

class B(unittest.TestCase):
    pass

for cls, names in ((A, "abcde"), (B, "fghi")):
    for n in names:
        setattr(cls, "test_" + n, _record)
del cls, names, n

def absl_like_main():
    if "TEST_SHARD_STATUS_FILE" in os.environ:
        open(os.environ["TEST_SHARD_STATUS_FILE"], "w").close()
    loader = unittest.TestLoader()
    if "TEST_TOTAL_SHARDS" in os.environ:
        total = int(os.environ["TEST_TOTAL_SHARDS"])
        index = int(os.environ["TEST_SHARD_INDEX"])
        delegate = loader.getTestCaseNames
        buckets = itertools.cycle(range(total))
        def sharded(test_case_class):
            names = delegate(test_case_class)
            mine = [n for n in sorted(names) if next(buckets) == index]
            return [n for n in names if n in mine]
        loader.getTestCaseNames = sharded
    unittest.TestProgram(argv=sys.argv[:1], testLoader=loader)

if __name__ == "__main__":
    absl_like_main()
'''

PLAIN_UNITTEST_MAIN = ABSLTEST_LIKE_MAIN.replace(
    "    absl_like_main()", "    unittest.main()")

SELF_SHARDING_MAIN = '''
import os, unittest

class T(unittest.TestCase):
    def test_all_sizes(self):
        total = int(os.environ.get("TEST_TOTAL_SHARDS", "1"))
        index = int(os.environ.get("TEST_SHARD_INDEX", "0"))
        open(os.environ["TEST_SHARD_STATUS_FILE"], "a").close()
        with open(os.environ["RAN_FILE"], "a") as f:
            for size in range(9)[index::total]:
                f.write(f"size{size}\\n")

if __name__ == "__main__":
    unittest.main()
'''

SCRIPT_MAIN = '''
import os
with open(os.environ["RAN_FILE"], "a") as f:
    f.write("script\\n")
'''


def _run_shards(tmp_path: Path, source: str, total: int = 3,
                extra_env: dict[str, str] | None = None) -> tuple[list[str], list[int], str]:
    """Runs a user main through test_main.py once per shard; returns what ran (one line per
    case), the exit codes, and the stderr of every shard."""
    main = tmp_path / "user_test.py"
    main.write_text(textwrap.dedent(source))
    ran = tmp_path / "ran.txt"
    ran.write_text("")
    codes, errors = [], []
    for index in range(total):
        status = tmp_path / f"status_{index}"
        env = {**os.environ, "AUTOTUNE_TEST_MAIN": str(main), "RAN_FILE": str(ran),
               "TEST_TOTAL_SHARDS": str(total), "TEST_SHARD_INDEX": str(index),
               "TEST_SHARD_STATUS_FILE": str(status), "TEST_TARGET": "//pkg:user_test",
               **(extra_env or {})}
        done = subprocess.run([sys.executable, str(TEST_MAIN)], env=env, capture_output=True,
                              text=True, check=False, timeout=60)
        codes.append(done.returncode)
        errors.append(done.stderr)
        assert done.returncode != 0 or status.exists(), (index, done.stderr)
    return ran.read_text().split(), codes, "\n".join(errors)


def test_absltest_sharding_is_not_split_a_second_time(tmp_path: Path) -> None:
    ran, codes, stderr = _run_shards(tmp_path, ABSLTEST_LIKE_MAIN)
    assert codes == [0, 0, 0], stderr
    # Every one of the nine cases ran exactly once over the three shards.
    assert sorted(ran) == sorted(f"{c}.test_{n}" for c, names in (("A", "abcde"), ("B", "fghi"))
                                 for n in names), ran
    assert "the test framework shards the test cases itself" in stderr


def test_plain_unittest_cases_are_split_over_the_shards(tmp_path: Path) -> None:
    ran, codes, stderr = _run_shards(tmp_path, PLAIN_UNITTEST_MAIN)
    assert codes == [0, 0, 0], stderr
    assert len(ran) == 9 and len(set(ran)) == 9, ran
    assert stderr.count("runs 3 test case(s)") == 3, stderr


def test_a_main_that_splits_its_work_itself_is_refused_unless_declared(tmp_path: Path) -> None:
    ran, codes, stderr = _run_shards(tmp_path, SELF_SHARDING_MAIN)
    # Shard 1 ran the only case, which split its sizes again: a silent skip without the check.
    assert codes[0] == 2 and "Set `shard_test_cases = False`" in stderr, (codes, stderr)
    ran, codes, stderr = _run_shards(tmp_path, SELF_SHARDING_MAIN,
                                     extra_env={"AUTOTUNE_SHARD_TEST_CASES": "0"})
    assert codes == [0, 0, 0], stderr
    assert sorted(ran) == sorted(f"size{i}" for i in range(9)), ran


def test_a_sharded_main_without_sharding_support_fails_clearly(tmp_path: Path) -> None:
    ran, codes, stderr = _run_shards(tmp_path, SCRIPT_MAIN)
    assert codes == [2, 2, 2], stderr
    assert "//pkg:user_test is sharded (shard 1 of 3), but its main did not implement" in stderr
    assert "--incompatible_check_sharding_support" in stderr
    assert ran == ["script"] * 3


ONE_CASE_MAIN = '''
import os, sys, unittest

class One(unittest.TestCase):
    def test_only(self):
        with open(os.environ["RAN_FILE"], "a") as f:
            f.write("only\\n")

if __name__ == "__main__":
    program = unittest.main(exit=False)
    # Python >= 3.12's unittest.main() exits 5 when no test ran; do the same on every version.
    result = program.result
    sys.exit(5 if result.testsRun == 0 else (0 if result.wasSuccessful() else 1))
'''


def test_more_shards_than_test_cases_pass(tmp_path: Path) -> None:
    ran, codes, stderr = _run_shards(tmp_path, ONE_CASE_MAIN)
    assert codes == [0, 0, 0], stderr
    assert ran == ["only"], ran
    assert stderr.count("this shard has no test cases") == 2, stderr


PATH_PROBE_MAIN = '''
import os, sys
with open(os.environ["RAN_FILE"], "w") as f:
    f.write(sys.path[0] + "\\n")
try:
    import undeclared_sibling
except ImportError:
    with open(os.environ["RAN_FILE"], "a") as f:
        f.write("no-sibling\\n")
'''


@pytest.mark.parametrize("safe_path", [False, True])
def test_user_main_gets_its_runfiles_directory_not_the_source_tree(
        tmp_path: Path, safe_path: bool) -> None:
    if safe_path and sys.version_info < (3, 11):
        pytest.skip("safe-path mode (-P) needs Python 3.11")
    source, runfiles = tmp_path / "src/pkg", tmp_path / "runfiles/ws/pkg"
    source.mkdir(parents=True)
    runfiles.mkdir(parents=True)
    (source / "user_test.py").write_text(PATH_PROBE_MAIN)
    (source / "undeclared_sibling.py").write_text("")  # in the source tree, not in runfiles
    (runfiles / "user_test.py").symlink_to(source / "user_test.py")
    ran = tmp_path / "ran.txt"
    env = {**os.environ, "AUTOTUNE_TEST_MAIN": "pkg/user_test.py", "RAN_FILE": str(ran),
           "TEST_SRCDIR": str(tmp_path / "runfiles"), "TEST_WORKSPACE": "ws"}
    env.pop("PYTHONSAFEPATH", None)
    argv = [sys.executable, *(["-P"] if safe_path else []), str(TEST_MAIN)]
    done = subprocess.run(argv, env=env, cwd=tmp_path / "runfiles/ws", capture_output=True,
                          text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    first, sibling = ran.read_text().split()
    assert sibling == "no-sibling"
    if safe_path:
        assert first not in (str(runfiles), str(source), str(TEST_MAIN.parent))
    else:
        assert first == str(runfiles)


# --- MODULE.bazel (Bazel 7+ cannot run here: a static check of the documented layout) ----------


def _module_calls(name: str) -> list[dict[str, object]]:
    tree = ast.parse((REPO / "MODULE.bazel").read_text())
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == name:
            calls.append({k.arg: ast.literal_eval(k.value) for k in node.keywords})
    return calls


def test_the_ruleset_pip_hub_covers_every_supported_python_version() -> None:
    text = (REPO / "pyproject.toml").read_text()
    minimum = re.search(r'requires-python = ">=3\.(\d+)"', text).group(1)
    supported = {f"3.{minor}" for minor in range(int(minimum), 14)}
    toolchains = {c["python_version"] for c in _module_calls("python.toolchain")}
    hub = [c for c in _module_calls("pip.parse") if c["hub_name"] == "rules_autotune_pypi"]
    assert supported <= toolchains, (supported, toolchains)
    assert {c["python_version"] for c in hub} == supported
    assert len(hub) == len(supported)
    assert all(c["requirements_lock"] == "//:requirements_lock.txt" for c in hub)
    assert [c["python_version"] for c in _module_calls("python.toolchain")
            if c.get("is_default")] == ["3.11"]
