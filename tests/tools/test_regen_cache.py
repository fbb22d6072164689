"""Unit tests of tools/regen_cache.py: writing caches, summaries, and runs against a fake Bazel."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pytest

from autotune_cache.formats import load_results, save_results, serialize_results
from autotune_cache.proto import autotune_results_pb2 as pb

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import regen_bazel  # noqa: E402
import regen_cache  # noqa: E402

# --- binary committed caches (cache = "x.pb"): the dump is always text -------------------------


def _entry(problem: str, time_ms: float, block: int) -> pb.Entry:
    entry = pb.Entry()
    entry.key.kernel = "k"
    entry.key.problem = problem
    entry.key.device.name = "cpu-interpreter"
    entry.result.time_ms = time_ms
    entry.result.tuned_at = f"2026-01-01T00:00:{int(time_ms):02d}Z"
    entry.result.config.params.add(name="BLOCK", int_value=block)
    return entry


def _on(device: str, problem: str, time_ms: float) -> pb.Entry:
    entry = _entry(problem, time_ms, 64)
    entry.key.device.name = device
    return entry


def _entries(data: bytes, suffix: str, tmp_path: Path) -> set[tuple[str, str, float]]:
    path = tmp_path / f"read{suffix}"
    path.write_bytes(data)
    return {(e.key.device.name, e.key.problem, e.result.time_ms) for e in load_results(path)}


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


def test_a_broken_committed_cache_is_replaced_and_said_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A hand-broken committed file (merge-conflict markers, text in a binary file) is what the
    regen is for: its dump did not load it (the test wrapper), so the dump replaces it. An
    unreadable dump still fails only its own file."""
    workspace = tmp_path / "ws"
    (workspace / "pkg").mkdir(parents=True)
    (workspace / "pkg/t.pb").write_bytes(b"version: 1\nthis is text in a binary file\n")
    (workspace / "pkg/c.textproto").write_bytes(b"<<<<<<< HEAD\nversion: 1\n=======\n")
    test_dir = _dump_dir(tmp_path, serialize_results([_on("cpu-interpreter", "n=1", 7)], text=True))
    checked = regen_cache.regenerate_one(regen_bazel.DumpTarget("//pkg:c.dump", "pkg/c.textproto"),
                                         "PASSED", test_dir, workspace, check=True)
    assert checked.ok and checked.change.differs
    assert checked.notes[0].startswith("would replace a broken results file (")
    assert (workspace / "pkg/c.textproto").read_bytes().startswith(b"<<<<<<< HEAD")
    replaced = [regen_cache.regenerate_one(regen_bazel.DumpTarget(f"//pkg:{n}.dump", f"pkg/{n}"),
                                           "PASSED", test_dir, workspace, check=False)
                for n in ("t.pb", "c.textproto")]
    assert all(o.ok for o in replaced), replaced
    assert {e.result.time_ms for e in load_results(workspace / "pkg/t.pb")} == {7.0}
    assert {e.result.time_ms for e in load_results(workspace / "pkg/c.textproto")} == {7.0}
    bad_dump = _dump_dir(tmp_path / "other", b"<<<<<<< HEAD\n")
    bad = regen_cache.regenerate_one(regen_bazel.DumpTarget("//pkg:u.dump", "pkg/u.textproto"),
                                     "PASSED", bad_dump, workspace, check=False)
    assert not bad.ok and "CorruptFileError" in bad.problem and "left as is" in bad.problem
    assert not (workspace / "pkg/u.textproto").exists()
    assert regen_cache.report([*replaced, bad], check=False) == 1
    out = capsys.readouterr().out
    assert ("pkg/c.textproto: ok: replaced a broken results file (not a valid text-format "
            "autotune results file: line 1 holds an unresolved merge-conflict marker") in out, out
    assert "pkg/t.pb: ok: replaced a broken results file (" in out
    assert "pkg/u.textproto: NOT REGENERATED (//pkg:u.dump): CorruptFileError" in out
    assert "3 cache(s): 2 rewritten, 1 failed" in out


def test_a_symlinked_committed_cache_is_written_through_the_link(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "pkg").mkdir(parents=True)
    shared = tmp_path / "elsewhere/shared.textproto"
    shared.parent.mkdir()
    save_results(shared, [_on("cpu-interpreter", "n=1", 3)])
    (workspace / "pkg/t.textproto").symlink_to(shared)
    test_dir = _dump_dir(tmp_path, serialize_results([_on("cpu-interpreter", "n=1", 7)], text=True))
    outcome = regen_cache.regenerate_one(regen_bazel.DumpTarget("//pkg:t.dump", "pkg/t.textproto"),
                                         "PASSED", test_dir, workspace, check=False)
    assert outcome.ok and outcome.notes == (f"written through the symlink to {shared}",)
    assert (workspace / "pkg/t.textproto").is_symlink()
    assert {e.result.time_ms for e in load_results(shared)} == {7.0}


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
    # The autotuned tests, their dumps, the dumps that share their cache files in the packages
    # looked at, and (the file does not exist yet) those in the whole workspace.
    assert len(queries) == 4 and all("--override_repository=x=/y" in q for q in queries)
    assert all("--keep_going" in q for q in queries)
    assert "--override_repository=x=/y" in test


def test_bazel_flags_that_query_rejects_still_go_to_the_test_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    code, invocations = _regen_with_fake_bazel(tmp_path, monkeypatch, "--bazel_flag=--test_env=A=1")
    assert code == 1
    assert "querying without --bazel_flag values" in capfd.readouterr().err
    queries = [a for a in invocations if a[0] == "query"]
    (test,) = [a for a in invocations if a[0] == "test"]
    # One rejected query with the flag, then the four queries without it.
    assert ["--test_env=A=1" in q for q in queries] == [True, False, False, False, False]
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



# --- caches shared by several tests, first-time caches, remote execution ----------------------


def _shared_targets(path: str = "pkg/shared.autotune.textproto") -> list:
    return [regen_bazel.DumpTarget(f"//pkg:{name}.dump", path) for name in ("a", "b")]


def test_a_shared_cache_gets_the_union_of_its_tests_dumps(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "pkg").mkdir(parents=True)
    a, b = _shared_targets()
    results = {
        a.label: serialize_results([_on("cpu-interpreter", "n=1", 1)], text=True),
        b.label: serialize_results([_on("cpu-interpreter", "n=2", 2)], text=True),
    }
    status = {a.label: "PASSED", b.label: "PASSED"}
    outcome = regen_cache.regenerate_group([a, b], results, status, workspace, check=False)
    assert outcome.ok and outcome.change.added == 2
    problems = {e.key.problem for e in load_results(workspace / a.cache_path)}
    assert problems == {"n=1", "n=2"}
    # Stable: the same dumps again change nothing.
    again = regen_cache.regenerate_group([a, b], results, status, workspace, check=True)
    assert again.ok and not again.change.differs


def test_a_shared_cache_is_left_alone_when_one_dump_failed(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "pkg").mkdir(parents=True)
    a, b = _shared_targets()
    (workspace / a.cache_path).write_bytes(b"kept")
    results = {a.label: serialize_results([_on("cpu-interpreter", "n=1", 1)], text=True),
               b.label: "the dump test failed"}
    outcome = regen_cache.regenerate_group(
        [a, b], results, {a.label: "PASSED", b.label: "FAILED"}, workspace, check=False)
    assert not outcome.ok
    assert "//pkg:b.dump: the dump test failed" in outcome.problem
    assert "only written when all of their dumps succeed" in outcome.problem
    assert (workspace / a.cache_path).read_bytes() == b"kept"


def test_groups_are_by_cache_file() -> None:
    a, b = _shared_targets()
    c = regen_bazel.DumpTarget("//pkg:c.dump", "pkg/c.autotune.textproto")
    groups = regen_cache.group_by_cache([c, b, a])
    assert groups == {"pkg/c.autotune.textproto": [c], a.cache_path: [a, b]}


def test_placeholders_only_for_missing_caches_of_other_packages_and_empty_files(
        tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "pkg").mkdir(parents=True)
    (workspace / "pkg/empty.autotune.textproto").write_bytes(b"")
    targets = [
        regen_bazel.DumpTarget("//pkg:own.dump", "pkg/own.autotune.textproto"),
        regen_bazel.DumpTarget("//pkg:other.dump", "caches/other.autotune.textproto"),
        regen_bazel.DumpTarget("//pkg:empty.dump", "pkg/empty.autotune.textproto"),
    ]
    touched = regen_cache.create_placeholders(targets, workspace)
    assert touched == {workspace / "caches/other.autotune.textproto": None,
                       workspace / "pkg/empty.autotune.textproto": b""}
    assert not (workspace / "pkg/own.autotune.textproto").exists()
    assert load_results(workspace / "caches/other.autotune.textproto") == []
    xla = regen_bazel.DumpTarget("//pkg:x.dump", "caches/x.textproto", backend="xla")
    with pytest.raises(regen_bazel.RegenError, match="backend \"xla\""):
        regen_cache.create_placeholders([xla], workspace)


def test_remote_flags_hand_the_dumps_to_bazel(tmp_path: Path) -> None:
    args = regen_cache.parse_args([
        "--gpus=0,1", "--bazel_flag=--remote_executor=grpc://pool:8980", "--bazel_flag=--jobs=50",
        "//pkg:t"])
    plan = regen_cache.scheduling_plan(args, bazel=None)  # no `bazel info` needed
    target = regen_bazel.DumpTarget("//pkg:t.dump", "pkg/t.autotune.textproto")
    command = regen_cache.test_command(args, plan, tmp_path / "bep.json", [target])
    assert "--remote_executor=grpc://pool:8980" in command and "--jobs=50" in command
    assert not any(c.startswith(("--run_under", "--local_test_jobs")) for c in command)
    assert command[0] == "--keep_going" and command[-1] == "//pkg:t.dump"
    assert "Bazel schedules the dumps" in plan.describe()


def test_bazelrc_test_filters_are_turned_off_for_the_chosen_dumps(tmp_path: Path) -> None:
    """A `.bazelrc` with `test --test_tag_filters=-gpu` (or size, timeout, lang filters) would
    filter every dump out; the command turns them off, and an explicit --bazel_flag still wins
    (issue 19)."""
    args = regen_cache.parse_args(["--gpus=none", "--bazel_flag=--test_tag_filters=-flaky",
                                   "//pkg:t"])
    plan = regen_cache.scheduling_plan(args, bazel=None)
    target = regen_bazel.DumpTarget("//pkg:t.dump", "pkg/t.autotune.textproto")
    command = regen_cache.test_command(args, plan, tmp_path / "bep.json", [target])
    for reset in ("--test_tag_filters=", "--test_size_filters=", "--test_timeout_filters=",
                  "--test_lang_filters="):
        assert reset in command
    assert command.index("--test_tag_filters=") < command.index("--test_tag_filters=-flaky")


def test_the_dumps_outputs_are_downloaded_under_remote_download_minimal(tmp_path: Path) -> None:
    """Issue 19, item 11: with --remote_download_minimal (in .bazelrc, common with remote
    execution) Bazel leaves passing tests' outputs remote, so every dump would seem to have
    written nothing. The command asks for them with the one value every Bazel takes; an
    explicit --bazel_flag comes later and still wins."""
    args = regen_cache.parse_args(["--gpus=none", "--bazel_flag=--config=remote", "//pkg:t"])
    plan = regen_cache.scheduling_plan(args, bazel=None)
    target = regen_bazel.DumpTarget("//pkg:t.dump", "pkg/t.autotune.textproto")
    command = regen_cache.test_command(args, plan, tmp_path / "bep.json", [target])
    assert "--remote_download_outputs=all" in command
    assert command.index("--remote_download_outputs=all") < command.index("--config=remote")
    # An explicit --bazel_flag that keeps them remote is named when a dump then wrote nothing.
    minimal = regen_cache.parse_args(["--bazel_flag=--remote_download_minimal", "//pkg:t"])
    harvest = regen_cache.Harvest({}, {})
    test_dir = tmp_path / "testlogs/pkg/t.dump"
    test_dir.mkdir(parents=True)
    bep = tmp_path / "bep.json"
    bep.write_text(json.dumps({"id": {"testSummary": {"label": "//pkg:t.dump"}},
                               "testSummary": {"overallStatus": "PASSED"}}) + "\n")

    class Streaming:
        workspace = tmp_path

        def stream(self, verb: str, *args: str) -> int:
            return 0

        def capture(self, verb: str, *args: str) -> str:
            return str(tmp_path / "testlogs")

    regen_cache.run_dumps(minimal, Streaming(), plan, [target], bep, harvest)
    assert "drop --remote_download_minimal / _toplevel from --bazel_flag" in (
        harvest.results["//pkg:t.dump"]), harvest.results
