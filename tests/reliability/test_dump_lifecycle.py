"""Issue 36: no run may lose committed entries. Each test is the user's case, in real processes:
a late child, eight concurrent merge-mode dumps, an in-place regen whose subprocess starts after
the first rewrite, a dump path that is a symbolic link, the litter of killed runs, and lock
directories squatted by another account."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from autotune_cache.formats import load_results, save_results
from autotune_cache.store.dumpfile import RUN_PREFIX
from tests.cachetools import fake_tune, make_key
from tests.reliability.conftest import ROOT, child_env, run_python


def problems(path: Path) -> set[str]:
    return {e.key.problem for e in load_results(path)}


def problem(**values: int) -> str:
    return make_key(problem=values).problem


# The run's root records 5 entries, starts a child that waits, and exits; the child then dumps
# its 1 entry to the same path (it inherited the run, which has ended).
LATE_CHILD = """
import subprocess, sys, time
from pathlib import Path
from autotune_cache import Cache, Settings
from tests.cachetools import fake_tune, make_key
dump, go = sys.argv[1], sys.argv[2]
child = '''
import sys, time
from pathlib import Path
from autotune_cache import Cache, Settings
from tests.cachetools import fake_tune, make_key
while not Path(sys.argv[2]).exists():
    time.sleep(0.05)
cache = Cache(Settings(dump_to=Path(sys.argv[1])))
cache.record(fake_tune(make_key(problem={"child": 1})))
cache.close()
'''
cache = Cache(Settings(dump_to=Path(dump)))
for i in range(5):
    cache.record(fake_tune(make_key(problem={"root": i})))
late = subprocess.Popen([sys.executable, "-c", child, dump, go], stdout=subprocess.DEVNULL,
                        stderr=open(go + ".log", "w"), start_new_session=True)
cache.close()
print(late.pid, flush=True)
"""


def test_a_late_child_adds_to_the_runs_dump_instead_of_replacing_it(tmp_path: Path) -> None:
    dump, go = tmp_path / "dump.textproto", tmp_path / "go"
    res = subprocess.run([sys.executable, "-c", LATE_CHILD, str(dump), str(go)], cwd=ROOT,
                         env=child_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert len(problems(dump)) == 5  # the root has exited
    go.touch()
    pid = int(res.stdout.split()[0])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists() \
            and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower():
        time.sleep(0.1)
    assert problems(dump) == {problem(root=i) for i in range(5)} | {problem(child=1)}, \
        (tmp_path / "go.log").read_text()


MERGER = """
import sys
from pathlib import Path
from autotune_cache import Cache, Settings
from tests.cachetools import fake_tune, make_key
cache = Cache(Settings(dump_to=Path(sys.argv[1]), dump_merge=True))
cache.record(fake_tune(make_key(problem={"w": int(sys.argv[2])})))
cache.close()
"""


def test_eight_concurrent_merge_mode_dumps_keep_every_entry(tmp_path: Path) -> None:
    dump = tmp_path / "shared.textproto"
    procs = [subprocess.Popen([sys.executable, "-c", MERGER, str(dump), str(w)], cwd=ROOT,
                              env=child_env(), stderr=subprocess.PIPE, text=True)
             for w in range(8)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "without its lock" not in err
    assert problems(dump) == {problem(w=w) for w in range(8)}


# An in-place regen: load F and dump F. The root rewrites F mid-run (flush_dump), then starts a
# subprocess; that subprocess must still see F's committed entry, and tune nothing.
IN_PLACE = """
import json, subprocess, sys
from pathlib import Path
from autotune_cache import Cache, Settings
from tests.cachetools import fake_tune, make_key
path = Path(sys.argv[1])
child = '''
import json, sys
from pathlib import Path
from autotune_cache import Cache, Settings
from tests.cachetools import make_key
path = Path(sys.argv[1])
cache = Cache(Settings(load_from=(path,), dump_to=path))
print(json.dumps(cache.lookup(make_key(problem={"committed": 1})) is not None))
cache.close()
'''
cache = Cache(Settings(load_from=(path,), dump_to=path))
cache.record(fake_tune(make_key(problem={"new": 1})))
cache.flush_dump()  # F now holds only this run's entry so far
out = subprocess.run([sys.executable, "-c", child, str(path)], capture_output=True, text=True)
print(out.stdout.strip(), out.returncode)
cache.close()
"""


def test_an_in_place_regens_subprocess_loads_the_committed_snapshot(tmp_path: Path) -> None:
    committed = tmp_path / "committed.textproto"
    save_results(committed, [fake_tune(make_key(problem={"committed": 1}))])
    res = subprocess.run([sys.executable, "-c", IN_PLACE, str(committed)], cwd=ROOT,
                         env=child_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["true", "0"], res.stdout + res.stderr
    assert problems(committed) == {problem(committed=1), problem(new=1)}


def test_a_dump_path_that_is_a_symlink_is_written_through(tmp_path: Path) -> None:
    target = tmp_path / "real" / "cache.textproto"
    target.parent.mkdir()
    save_results(target, [fake_tune(make_key(problem={"old": 1}))])
    link = tmp_path / "cache.textproto"
    link.symlink_to(target)
    res = run_python(f"""
        from pathlib import Path
        from autotune_cache import Cache, Settings
        from tests.cachetools import fake_tune, make_key
        cache = Cache(Settings(dump_to=Path({str(link)!r})))
        cache.record(fake_tune(make_key(problem={{"new": 1}})))
        cache.close()
    """)
    assert res.rc == 0, res.text
    assert link.is_symlink() and link.resolve() == target
    assert problems(target) == {problem(new=1)}


KILLED = """
import os, sys, time
from pathlib import Path
from autotune_cache import Cache, Settings
from tests.cachetools import fake_tune, make_key
cache = Cache(Settings(dump_to=Path(sys.argv[1])))
cache.record(fake_tune(make_key()))
print(os.environ["AUTOTUNE_DUMP_RUN"], flush=True)
time.sleep(600)
"""


def test_a_killed_runs_directory_is_swept_by_the_next_run(tmp_path: Path) -> None:
    dump = tmp_path / "dump.textproto"
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = child_env({"TMPDIR": str(temp)})
    killed = subprocess.Popen([sys.executable, "-c", KILLED, str(dump)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, text=True)
    assert killed.stdout is not None
    run_dir = Path(killed.stdout.readline().strip())
    assert run_dir.is_dir() and run_dir.name.startswith(RUN_PREFIX)
    live = subprocess.Popen([sys.executable, "-c", KILLED, str(tmp_path / "other.textproto")],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert live.stdout is not None
    live_dir = Path(live.stdout.readline().strip())
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
        res = run_python(f"""
            from pathlib import Path
            from autotune_cache import Cache, Settings
            Cache(Settings(dump_to=Path({str(dump)!r}))).close()
        """, env=env)
        assert res.rc == 0, res.text
        assert not run_dir.exists(), "the killed run's directory was left behind"
        assert live_dir.is_dir(), "a live run's directory was swept"
    finally:
        live.kill()
        live.wait(timeout=30)


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/sbin/runuser").exists()
                    and not any(Path(p, "runuser").exists()
                                for p in os.environ.get("PATH", "").split(":")),
                    reason="needs root to act as a second account")
def test_squatted_lock_directories_in_tmp_do_not_unlock_merge_dumps(tmp_path: Path) -> None:
    """Another account pre-creates every predictable lock directory under the temp directory;
    merge-mode dumps still take their lock (under the home directory) and keep every entry."""
    temp = Path(tempfile.gettempdir())
    squatted = [temp / "autotune_cache-dump-locks", temp / f"autotune_cache-dump-locks-"
                f"{os.geteuid()}", temp / "dump-locks", temp / f"dump-locks-{os.geteuid()}"]
    made = []
    for path in squatted:
        if not path.exists():
            path.mkdir()
            os.chown(path, 65534, 65534)  # nobody
            made.append(path)
    try:
        test_eight_concurrent_merge_mode_dumps_keep_every_entry(tmp_path)
    finally:
        for path in made:
            path.rmdir()


def test_merge_and_convert_refuse_a_text_file_no_reader_could_read_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`merge -o a a b` over the text read limit once wrote an unreadable `a` (77 MB of two
    files of 38 and 6 MB). The limit is lowered here so that the files stay small."""
    from autotune_cache import formats
    from autotune_cache.cli import main

    a, b = tmp_path / "a.textproto", tmp_path / "b.textproto"
    save_results(a, [fake_tune(make_key(problem={"a": i})) for i in range(40)])
    save_results(b, [fake_tune(make_key(problem={"b": i})) for i in range(40)])
    before = a.read_bytes()
    monkeypatch.setattr(formats, "MAX_TEXT_BYTES", len(before) + len(b.read_bytes()) // 2)
    assert main(["merge", str(a), str(b), "-o", str(a)]) == 2
    assert a.read_bytes() == before, "the merge destroyed its own input"
    assert main(["merge", str(a), str(b), "-o", str(tmp_path / "ab.pb")]) == 0
    assert len(problems(tmp_path / "ab.pb")) == 80
    assert main(["convert", str(tmp_path / "ab.pb"), str(tmp_path / "ab.textproto")]) == 2
    assert not (tmp_path / "ab.textproto").exists()


def conflicted(path: Path) -> None:
    """A committed file after a bad `git merge`: conflict markers in the middle of it."""
    lines = path.read_text().splitlines(keepends=True)
    middle = len(lines) // 2
    lines[middle:middle] = ["<<<<<<< HEAD\n"]
    lines[middle + 3:middle + 3] = ["=======\n", ">>>>>>> other-branch\n"]
    path.write_text("".join(lines))


def test_a_hand_broken_committed_cache_names_the_line_and_the_regen_recovers(
        tmp_path: Path) -> None:
    """The monorepo walk's dead end: merge-conflict markers in the committed file. The test's
    error names the file, the line and the regen command; the regen (load F, dump F) replaces
    the broken file, saying so, instead of dying on it."""
    committed = tmp_path / "t.autotune.textproto"
    save_results(committed, [fake_tune(make_key(problem={"i": i})) for i in range(3)])
    conflicted(committed)
    strict = run_python(f"""
        from pathlib import Path
        from autotune_cache import Cache, Settings
        from tests.cachetools import make_key
        cache = Cache(Settings(load_from=(Path({str(committed)!r}),), require_complete=True))
        for i in range(3):
            cache.lookup(make_key(problem={{"i": i}}))
    """, env={"AUTOTUNE_REGEN_HINT": "bazel run //pkg:t.regen"})
    assert strict.rc != 0
    assert str(committed) in strict.err
    assert "unresolved merge-conflict marker ('<<<<<<< HEAD')" in strict.err
    assert "line " in strict.err and "bazel run //pkg:t.regen" in strict.err, strict.err
    regen = run_python(f"""
        from pathlib import Path
        from autotune_cache import Cache, Settings
        from tests.cachetools import fake_tune, make_key
        path = Path({str(committed)!r})
        cache = Cache(Settings(load_from=(path,), dump_to=path))
        for i in range(3):
            key = make_key(problem={{"i": i}})
            if cache.lookup(key) is None:
                cache.record(fake_tune(key))
        cache.close()
    """)
    assert regen.rc == 0, regen.text
    assert "is a broken results file, which this dump run replaces" in regen.err
    assert problems(committed) == {problem(i=i) for i in range(3)}


def test_a_file_that_is_not_a_results_file_is_still_never_overwritten(tmp_path: Path) -> None:
    notes = tmp_path / "notes.textproto"
    notes.write_text("my notes, not autotune results\n")
    res = run_python(f"""
        from pathlib import Path
        from autotune_cache import Cache, Settings
        Cache(Settings(dump_to=Path({str(notes)!r}))).close()
    """)
    assert res.rc != 0 and "will not overwrite it" in res.err
    assert notes.read_text() == "my notes, not autotune results\n"


def test_verify_escapes_names_so_a_newline_cannot_forge_an_ok_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autotune_cache.cli import main

    forged = tmp_path / "x.textproto\nok other.textproto"
    forged.write_text("not a results file\n")
    assert main(["verify", str(forged)]) != 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("FAIL ") and "\\n" in lines[0]
    assert not any(line.startswith("ok") for line in lines)


@pytest.mark.parametrize(("damage", "said"), [
    ("bom", "starts with a UTF-8 byte-order mark (bytes EF BB BF"),
    ("cut", "it was cut off or damaged"),
])
def test_a_damaged_files_message_says_what_happened(tmp_path: Path, damage: str,
                                                   said: str) -> None:
    from autotune_cache.errors import CorruptFileError

    path = tmp_path / "c.textproto"
    save_results(path, [fake_tune(make_key(problem={"i": i})) for i in range(3)])
    data = path.read_bytes()
    path.write_bytes(b"\xef\xbb\xbf" + data if damage == "bom" else data[:len(data) // 2])
    with pytest.raises(CorruptFileError) as raised:
        list(load_results(path))
    assert said in str(raised.value)
    assert "newer release" not in str(raised.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give directories to another account")
def test_no_private_lock_directory_fails_a_merge_dump_loudly(tmp_path: Path) -> None:
    """Issue 49: with the home directory unusable and every temp lock name squatted by another
    account, a merge-mode dump went ahead without its lock (a warning). It fails instead, names
    the directories and the fix, and leaves the file as it was."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    for name in ("dump-locks", f"dump-locks-{os.geteuid()}"):
        (temp / name).mkdir()
        os.chown(temp / name, 65534, 65534)  # nobody
    dump = tmp_path / "merged.textproto"
    save_results(dump, [fake_tune(make_key(problem={"M": 1}))])
    before = dump.read_bytes()
    not_a_dir = tmp_path / "a-file"  # HOME below a regular file: no ~/.cache can be made
    not_a_dir.write_text("")
    res = run_python(f"""
from pathlib import Path
from autotune_cache import Cache, Settings
from tests.cachetools import fake_tune, make_key
cache = Cache(Settings(dump_to=Path({str(dump)!r}), dump_merge=True))
cache.record(fake_tune(make_key(problem={{"M": 2}})))
cache.close()
""", env={"HOME": str(not_a_dir / "home"), "TMPDIR": str(temp)})
    assert res.rc != 0, res.text
    assert "--autotune_dump_merge needs its lock" in res.err and "HOME" in res.err, res.err
    assert dump.read_bytes() == before
