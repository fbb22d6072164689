"""The autotune-cache command line, end to end on files the library writes."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune_cache.cli import main
from autotune_cache.formats import load_results, save_results
from autotune_cache.store.dirstore import DirectoryStore
from tests.cachetools import CPU, fake_tune, make_key

H200_ENTRIES = [fake_tune(make_key(problem={"M": m})) for m in (1, 2)]
CPU_ENTRY = fake_tune(make_key(device=CPU, toolchain={"triton": "3.5.0"}))


@pytest.fixture
def cache_file(tmp_path):
    path = tmp_path / "c.textproto"
    save_results(path, [*H200_ENTRIES, CPU_ENTRY])
    return path


def test_inspect_table(cache_file, capsys):
    assert main(["inspect", str(cache_file)]) == 0
    out = capsys.readouterr().out
    assert "3 entries" in out and "BLOCK=64 warps=4 stages=3" in out
    assert "2  NVIDIA H200 / sm_90 / 132 SMs" in out and "1  triton=3.5.0" in out


def test_inspect_json(cache_file, capsys):
    assert main(["inspect", "--json", str(cache_file)]) == 0
    (report,) = json.loads(capsys.readouterr().out)["files"]
    assert report["format"] == "autotune_cache" and len(report["entries"]) == 3
    assert report["per_device"]["cpu-interpreter / interpreter"] == 1


@pytest.mark.parametrize("chain", [["b.pb", "c.textproto"], ["dir/", "b.binpb", "d.txt"]])
def test_convert_round_trips_through_every_form(cache_file, tmp_path, chain):
    src = cache_file
    for name in chain:
        dst = tmp_path / name
        assert main(["convert", str(src), str(dst)]) == 0
        src = dst
    assert main(["diff", str(cache_file), str(src)]) == 0
    if chain[-1].endswith(".textproto"):
        assert src.read_bytes() == cache_file.read_bytes()


def test_diff_speaks_the_reports_vocabulary(tmp_path, capsys):
    a, b = tmp_path / "a.textproto", tmp_path / "b.textproto"
    save_results(a, H200_ENTRIES)
    changed = fake_tune(make_key(problem={"M": 1}))
    changed.result.time_ms = 99.0
    save_results(b, [changed, CPU_ENTRY])
    assert main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "0 winners changed, 1 re-timed, 1 new, 1 removed, 0 unchanged" in out
    assert "re-timed 1 -> 99 ms" in out


def test_an_added_candidate_is_a_changed_winner_in_diff_as_in_report(tmp_path, capsys):
    """Issue 39: after a candidate was added, `diff` said "3 added, 3 removed, 0 changed" and
    `report --baseline` "2 winners changed, 3 unchanged". The same words now."""
    from autotune_cache.report.model import build_reports

    a, b = tmp_path / "a.textproto", tmp_path / "b.textproto"
    old = [fake_tune(make_key(problem={"M": m})) for m in range(3)]
    new = [fake_tune(make_key(problem={"M": m}, configs="with-one-more"))
           for m in range(3)]
    new[0].result.config.num_warps = 8  # a different winner, among the candidates
    save_results(a, old)
    save_results(b, new)
    assert main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    words = "1 winners changed, 0 re-timed, 0 new, 0 removed, 2 unchanged"
    assert words + "; 3 under a new key (candidate list, kernel source or toolchain)" in out
    report = build_reports([b], [a])
    counts = {k: len(report.changes(k)) for k in ("winner changed", "unchanged", "new")}
    assert counts == {"winner changed": 1, "unchanged": 2, "new": 0} and not report.removed


def test_merge_conflict_policies(tmp_path, capsys):
    key = make_key()
    slow_new, fast_old = fake_tune(key), fake_tune(key)
    slow_new.result.time_ms, slow_new.result.tuned_at = 5.0, "2026-11-29T12:00:00Z"
    fast_old.result.time_ms, fast_old.result.tuned_at = 1.0, "2026-01-01T00:00:00Z"
    a, b = tmp_path / "a.textproto", tmp_path / "b.pb"
    save_results(a, [fast_old, CPU_ENTRY])
    save_results(b, [slow_new])
    out = tmp_path / "m.textproto"
    assert main(["merge", str(a), str(b), "-o", str(out)]) == 1
    assert "conflicting entries" in capsys.readouterr().err
    assert main(["merge", str(a), str(b), "-o", str(out), "--on-conflict=newest"]) == 0
    times = {e.key.device.name: e.result.time_ms for e in load_results(out)}
    assert times == {"NVIDIA H200": 5.0, "cpu-interpreter": 1.0}
    assert main(["merge", str(b), str(a), "-o", str(out), "--on-conflict=fastest"]) == 0
    assert {e.result.time_ms for e in load_results(out) if e.key.device.name != "cpu-interpreter"
            } == {1.0}


def test_prune_file_by_device_and_toolchain(cache_file, capsys):
    assert main(["prune", str(cache_file), "--keep-device=H200", "--dry-run"]) == 0
    assert len(load_results(cache_file)) == 3
    assert "would remove matmul" in capsys.readouterr().out
    assert main(["prune", str(cache_file), "--keep-toolchain=triton=3.6.0"]) == 0
    assert {e.key.device.name for e in load_results(cache_file)} == {"NVIDIA H200"}


def test_prune_directory_by_age_and_temp_files(tmp_path):
    store = DirectoryStore(tmp_path / "d")
    old = fake_tune(make_key(problem={"M": 9}))
    old.result.tuned_at = "2020-01-01T00:00:00Z"
    for e in (*H200_ENTRIES, old):
        store.put(e)
    tmp = store.root / f".tmp-{store.path_for(make_key(problem={'M': 5})).name}.1.abcd"
    tmp.write_text("partial")
    os.utime(tmp, (time.time() - 7200,) * 2)
    assert main(["prune", str(store.root), "--older-than=30d"]) == 0
    assert len(store.entries()) == 2 and not tmp.exists()


def test_verify(cache_file, tmp_path, capsys):
    assert main(["verify", str(cache_file)]) == 0
    store = DirectoryStore(tmp_path / "d")
    store.put(H200_ENTRIES[0])
    damaged = store.root / ("0" * 16 + "-" + "0" * 64 + ".textproto")
    damaged.write_text("version: 1\nentries { key {")
    bad_version = tmp_path / "v.textproto"
    bad_version.write_text("version: 2\n")
    assert main(["verify", str(store.root), str(bad_version)]) == 1
    out = capsys.readouterr().out
    assert "0000000000" in out and "version 2" in out


def test_inspect_unknown_file_is_a_clear_error(tmp_path, capsys):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\xff\xfe junk")
    assert main(["inspect", str(junk)]) == 2
    assert "junk.bin" in capsys.readouterr().err


def test_python_dash_m_entry_point(cache_file):
    out = subprocess.run([sys.executable, "-m", "autotune_cache", "verify", str(cache_file)],
                         capture_output=True, text=True, check=True).stdout
    assert "ok" in out and "3 entries" in out


def test_verify_and_prune_catch_misnamed_entries_and_stale_locks(tmp_path, capsys):
    store = DirectoryStore(tmp_path / "d")
    right = store.put(H200_ENTRIES[0])
    copy = store.root / ("f" * 16 + "-" + "f" * 64 + ".textproto")
    copy.write_bytes(right.read_bytes())
    lock = store.lock_path(make_key())
    lock.write_text("")
    os.utime(lock, (time.time() - 7200,) * 2)
    assert main(["verify", str(store.root)]) == 1
    assert "lookups never find it" in capsys.readouterr().out
    assert main(["prune", str(store.root)]) == 0
    assert right.exists() and not copy.exists() and not lock.exists()
    assert main(["verify", str(store.root)]) == 0


def superseded_file(tmp_path):
    """A cache that an old accumulating dump left with two generations of one kernel."""
    old = fake_tune(make_key(problem={"M": 1}, source="before-edit"))
    new = fake_tune(make_key(problem={"M": 1}, source="after-edit"))
    new.result.tuned_at = "2026-11-30T10:00:00Z"
    other = fake_tune(make_key(problem={"M": 2}, source="after-edit"))
    path = tmp_path / "old.textproto"
    save_results(path, [old, new, other])
    return path, new


def test_inspect_marks_the_live_entry_and_prune_drops_superseded_ones(tmp_path, capsys):
    path, new = superseded_file(tmp_path)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.count("  superseded\n") == 1 and out.count("  live\n") == 2
    assert f"drop them with: autotune-cache prune --superseded {path}" in out
    assert main(["inspect", "--json", str(path)]) == 0
    (report,) = json.loads(capsys.readouterr().out)["files"]
    assert sorted(e["live"] for e in report["entries"]) == [False, True, True]
    assert main(["prune", "--superseded", str(path)]) == 0
    out = capsys.readouterr().out
    assert "removed matmul [M=1] on NVIDIA H200 / sm_90 / 132 SMs (superseded)" in out
    kept = load_results(path)
    assert [e.key.source_fingerprint for e in kept] == ["after-edit", "after-edit"]
    assert new in kept


def test_version_and_convert_to_an_unknown_extension_is_refused(cache_file, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.startswith("autotune-cache 0.")
    target = tmp_path / "cache.json"
    assert main(["convert", str(cache_file), str(target)]) == 2
    assert "'.json' is not a results-file extension" in capsys.readouterr().err
    assert not target.exists()


def verb_commands(cache_file, tmp_path):
    """Every verb once, on real files, with the exit status it must give."""
    other = tmp_path / "other.textproto"
    save_results(other, H200_ENTRIES)
    return [
        (["inspect", cache_file], 0), (["verify", cache_file], 0),
        (["diff", cache_file, other], 1), (["convert", cache_file, tmp_path / "c.pb"], 0),
        (["merge", cache_file, other, "-o", tmp_path / "m.textproto"], 0),
        (["prune", other, "--keep-device=H200", "--dry-run"], 0),
        (["report", cache_file, "-o", tmp_path / "r.html"], 0),
    ]


def test_every_verb_speaks_json_with_its_exit_status(cache_file, tmp_path, capsys):
    for argv, status in verb_commands(cache_file, tmp_path):
        assert main([*map(str, argv), "--json"]) == status, argv
        doc = json.loads(capsys.readouterr().out)
        assert doc["command"] == argv[0] and doc["exit"] == status
    assert main(["diff", str(cache_file), str(tmp_path / "other.textproto"), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert [r["device"] for r in doc["removed"]] == ["cpu-interpreter / interpreter"]
    assert doc["new"] == [] and doc["changed"] == [] and doc["counts"]["unchanged"] >= 1
    assert main(["verify", str(tmp_path / "missing.textproto"), "--json"]) == 2
    (entry,) = json.loads(capsys.readouterr().out)["files"]
    assert entry["ok"] is False and "missing.textproto" in entry["error"]
    assert entry["bad_input"] is True


def test_bad_input_is_exit_2_with_a_json_error(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "nope.textproto"), "--json"]) == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {
        "command": "inspect", "exit": 2, "error": json.loads(captured.out)["error"]}
    assert "nope.textproto" in captured.err
    with pytest.raises(SystemExit) as exit_info:
        main(["prune", str(tmp_path), "--older-than=soon"])
    assert exit_info.value.code == 2
    assert "--older-than=soon: use a number" in capsys.readouterr().err


def test_each_verb_help_has_an_example_and_points_at_the_exit_statuses(capsys):
    """The exit-status table is printed once, by `autotune-cache --help` (it repeated under
    every verb); each verb's positionals and options have help text (issue 39)."""
    for verb in ("inspect", "convert", "merge", "diff", "prune", "verify", "report"):
        with pytest.raises(SystemExit):
            main([verb, "--help"])
        text = capsys.readouterr().out
        assert f"example:\n  autotune-cache {verb} " in text, verb
        assert "exit status: see `autotune-cache --help`" in text
        assert "  1  the check failed" not in text
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "  1  the check failed" in text and "  2  bad input" in text
    for verb, words in (("merge", ["the union", "nothing is written"]),
                        ("prune", ["change nothing", "--allow-empty"]),
                        ("diff", ["the old file"]), ("convert", ["to read"])):
        with pytest.raises(SystemExit):
            main([verb, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert all(w in text for w in words), (verb, text)


def test_a_closed_pipe_ends_quietly(cache_file):
    """`autotune-cache inspect BIG | head -1`: no traceback, exit 141 like `cat`."""
    many = [str(cache_file)] * 400
    proc = subprocess.Popen([sys.executable, "-m", "autotune_cache", "inspect", *many],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().startswith(str(cache_file).encode())
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait() == 141 and err == ""


def test_the_reference_states_the_exit_statuses_the_cli_uses():
    from autotune_cache.cli import EXIT_STATUSES

    reference = (Path(__file__).parents[2] / "docs" / "reference.md").read_text()
    for code, meaning in EXIT_STATUSES.items():
        assert f"| {code} | {meaning.split(' (`')[0].split('`|')[0][:40]}" in reference, code


def test_verify_on_a_missing_path_exits_2_as_its_help_table_says(cache_file, tmp_path, capsys):
    """Issue 52: `verify` exited 1 on a missing path while `--help` said 2 (bad input). A
    missing path is bad input, also beside a good file; a damaged file is the check failing."""
    missing = tmp_path / "missing.textproto"
    assert main(["verify", str(cache_file), str(missing)]) == 2
    out = capsys.readouterr().out
    assert f"FAIL {missing}" in out and f"ok {cache_file}" in out
    damaged = tmp_path / "damaged.textproto"
    damaged.write_text("version: 1\nentries { key {")
    assert main(["verify", str(damaged)]) == 1
    assert main(["verify", str(damaged), str(missing)]) == 2
    dangling = tmp_path / "dangling.textproto"
    dangling.symlink_to(tmp_path / "nowhere.textproto")
    assert main(["verify", str(dangling)]) == 2
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["--help"])
    table = " ".join(capsys.readouterr().out.split())
    assert "2 bad input: a wrong option, or a path that is missing" in table
    assert "for `verify`: missing or unreadable; a damaged file is 1" in table


def test_a_dry_run_that_would_empty_the_file_is_refused_like_the_real_run(cache_file, capsys):
    """Issue 52: the dry run exited 0 and the real run was then refused. Both refuse now, with
    the same message; the dry run first lists what the criteria match."""
    before = cache_file.read_bytes()
    assert main(["prune", str(cache_file), "--keep-device=A100", "--dry-run"]) == 2
    dry = capsys.readouterr()
    assert dry.out.count("would remove matmul") == 3
    assert main(["prune", str(cache_file), "--keep-device=A100"]) == 2
    real = capsys.readouterr()
    assert "which would leave it empty; nothing was changed" in real.err
    assert dry.err == real.err and cache_file.read_bytes() == before
    assert main(["prune", str(cache_file), "--keep-device=A100", "--dry-run", "--allow-empty"]) \
        == 0
    assert "would remove 3 entries" in capsys.readouterr().out
    assert main(["prune", str(cache_file), "--keep-device=A100", "--dry-run", "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit"] == 2 and "leave it empty" in doc["error"]


@pytest.mark.parametrize(("age", "seconds"), [("90m", 5400), ("90min", 5400), ("1.5h", 5400),
                                               ("30s", 30), ("2d", 172800), ("1w", 604800)])
def test_older_than_reads_m_and_min_as_minutes(age, seconds):
    from autotune_cache.cli import parse_age

    assert parse_age(age) == seconds


def test_older_than_help_says_m_means_minutes(capsys):
    with pytest.raises(SystemExit):
        main(["prune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "m or min (minutes, never months)" in text
    with pytest.raises(SystemExit):
        main(["prune", "x.textproto", "--older-than=1mo"])
    assert "m or min (minutes)" in capsys.readouterr().err


def test_inspect_and_diff_escape_control_characters_in_names(tmp_path, capsys):
    """Issue 52: a kernel name from a shared file holding ESC, CR or a newline could forge a
    line of `inspect`'s table or `diff`'s report, or drive the terminal. Each is escaped."""
    hostile = "evil\x1b[2K\rok_kernel\n+ forged [M=1] on H200"
    a, b = tmp_path / "a.textproto", tmp_path / "b.textproto"
    save_results(a, [fake_tune(make_key())])
    save_results(b, [fake_tune(make_key(kernel=hostile, toolchain={"triton": "3.6\n0"}))])
    assert main(["inspect", str(b)]) == 0
    inspect_out = capsys.readouterr().out
    assert main(["diff", str(a), str(b)]) == 1
    diff_out = capsys.readouterr().out
    for out in (inspect_out, diff_out):
        assert "\x1b" not in out and "\r" not in out, out
        assert "evil\\x1b[2K\\rok_kernel\\n+ forged" in out
        assert not any(line.startswith(("+ forged", "ok_kernel")) for line in out.splitlines())
    assert "triton=3.6\\n0" in inspect_out
    assert len([line for line in diff_out.splitlines() if line.startswith("+ ")]) == 1
    assert main(["inspect", "--json", str(b)]) == 0  # JSON keeps the name as it is
    (report,) = json.loads(capsys.readouterr().out)["files"]
    assert report["entries"][0]["kernel"] == hostile


@pytest.mark.parametrize("verb", ["merge", "convert"])
def test_writing_onto_a_symlink_writes_through_it(verb, cache_file, tmp_path):
    """Issue 52: `merge -o` and `convert` replaced a symbolic link with a file; the dump writes
    through one. Both write through now: the link stays and its target gets the entries."""
    target = tmp_path / "store" / "real.textproto"
    target.parent.mkdir()
    save_results(target, H200_ENTRIES[:1])
    link = tmp_path / "linked.textproto"
    link.symlink_to(target)
    argv = (["merge", str(cache_file), str(link), "-o", str(link), "--on-conflict=newest"]
            if verb == "merge" else ["convert", str(cache_file), str(link)])
    assert main(argv) == 0
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert len(load_results(target)) == 3
    assert load_results(link) == load_results(target)
