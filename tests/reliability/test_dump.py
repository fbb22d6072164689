"""The dump file across processes: one run's processes dump the union of their entries, other
runs never mix in, and a dump that cannot be written fails the process naming the file."""

from __future__ import annotations

import subprocess
import sys

from autotune_cache.formats import load_results, save_results
from tests.cachetools import fake_tune, make_key
from tests.reliability.conftest import ROOT, child_env, run_python

DUMPER = """
import sys
from autotune_cache import Cache, Settings
from tests.cachetools import fake_tune, make_key
w = int(sys.argv[1])
cache = Cache(Settings(dump_to={dump!r}))
for i in range(4):
    key = make_key(problem={{"W": w, "i": i}})
    assert cache.lookup(key) is None
    cache.record(fake_tune(key))
shared = make_key(problem={{"shared": 1}})
if cache.lookup(shared) is None:
    cache.record(fake_tune(shared))
cache.close()
"""

# The root of one run: it records an entry, starts 8 dumping children and waits for them.
RUN_ROOT = """
import subprocess, sys
from autotune_cache import Cache, Settings
from tests.cachetools import fake_tune, make_key
cache = Cache(Settings(dump_to={dump!r}))
root = make_key(problem={{"root": 1}})
cache.record(fake_tune(root))
children = [subprocess.Popen([sys.executable, "-c", {dumper!r}, str(w)]) for w in range(8)]
assert all(c.wait(timeout=120) == 0 for c in children)
cache.close()
"""

# A write past RLIMIT_FSIZE fails with EFBIG, as a full disk fails with ENOSPC.
DISK_FULL = """
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (300, 300))
"""


def test_the_processes_of_one_run_dump_the_union(tmp_path):
    """A dumping process that starts dumping children: the dump is all of their entries, and
    nothing is left beside it (no lock file, no partial files)."""
    dump = tmp_path / "out" / "dump.textproto"
    dump.parent.mkdir()
    save_results(dump, [fake_tune(make_key(problem={"earlier": "run"}))])
    dumper = DUMPER.format(dump=str(dump))
    res = run_python(RUN_ROOT.format(dump=str(dump), dumper=dumper))
    assert res.rc == 0, res.text
    problems = {e.key.problem for e in load_results(dump)}
    expected = {make_key(problem={"W": w, "i": i}).problem for w in range(8) for i in range(4)}
    shared = make_key(problem={"shared": 1}).problem
    root = make_key(problem={"root": 1}).problem
    assert problems == expected | {shared, root}  # and not the earlier run's entry
    assert sorted(p.name for p in dump.parent.iterdir()) == ["dump.textproto"]


def test_independent_processes_each_write_their_own_run(tmp_path):
    """Processes that do not descend from one another are separate runs: the dump holds one
    whole run (the last to finish), never a mix and never a damaged file."""
    dump = tmp_path / "dump.textproto"
    procs = [subprocess.Popen([sys.executable, "-c", DUMPER.format(dump=str(dump)), str(w)],
                              cwd=ROOT, env=child_env(), stderr=subprocess.PIPE, text=True)
             for w in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    runs = {frozenset(e.key.problem for e in load_results(dump))}
    whole = [frozenset({make_key(problem={"W": w, "i": i}).problem for i in range(4)}
                       | {make_key(problem={"shared": 1}).problem}) for w in range(4)]
    assert runs <= set(whole)


def test_dump_that_fails_at_exit_fails_the_process_and_keeps_the_old_dump(tmp_path):
    loaded = tmp_path / "committed.textproto"
    save_results(loaded, [fake_tune(make_key())])
    dump = tmp_path / "dump.textproto"
    dump.write_text("version: 1\n")
    code = DISK_FULL + f"""
from autotune_cache import configure, get_cache, Settings
from tests.cachetools import make_key
configure(Settings(load_from={str(loaded)!r}, dump_to={str(dump)!r}))
assert get_cache().lookup(make_key()) is not None  # a hit only: the dump is written at exit
print("done")
"""
    res = run_python(code, env={"PYTHONDONTWRITEBYTECODE": "1"})
    res.assert_no_traceback()
    assert res.out.strip() == "done"
    assert res.rc != 0, "a failed dump must fail the process"
    assert str(dump) in res.err, res.err
    assert dump.read_text() == "version: 1\n", "the old dump was damaged"


def test_disk_full_messages_name_the_path(tmp_path):
    src = tmp_path / "in.textproto"
    save_results(src, [fake_tune(make_key(problem={"i": i})) for i in range(5)])
    dst = tmp_path / "out.textproto"
    code = DISK_FULL + f"""
import sys
from autotune_cache.cli import main
sys.exit(main(["convert", {str(src)!r}, {str(dst)!r}]))
"""
    res = run_python(code, env={"PYTHONDONTWRITEBYTECODE": "1"})
    res.assert_no_traceback()
    assert res.rc == 2 and str(dst) in res.err, res.err


def test_record_never_waits_for_the_dump_lock_another_run_holds(tmp_path):
    """Issue 22, item 6: while another run holds the dump's merge lock, record() does not wait
    (it once waited up to 120 s per entry). The other run holds the lock until this process has
    recorded 50 entries, so a record() that waited would hang this test instead of passing."""
    dump, release = tmp_path / "dump.textproto", tmp_path / "release"
    holder = subprocess.Popen([sys.executable, "-c", f"""
import time
from pathlib import Path
from autotune_cache.store.dumpfile import DumpFile
with DumpFile(Path({str(dump)!r}), merge=True)._file_lock():
    print("held", flush=True)
    while not Path({str(release)!r}).exists():
        time.sleep(0.05)
"""], env=child_env(), cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        res = run_python(f"""
            from pathlib import Path
            from autotune_cache import Cache, Settings
            from tests.cachetools import fake_tune, make_key
            cache = Cache(Settings(dump_to=Path({str(dump)!r}), dump_merge=True))
            for i in range(50):
                cache.record(fake_tune(make_key(problem={{"i": i}})))
            print("recorded 50 while the lock was held", flush=True)
            Path({str(release)!r}).touch()
            cache.close()  # the one write, after the other run lets go
        """, timeout=90)
    finally:
        release.touch()
        holder.wait(timeout=30)
    res.assert_no_traceback()
    assert "recorded 50 while the lock was held" in res.out, res.text
    assert len(load_results(dump)) == 50
