"""Items 6, 7 and 11 (disk full) of issue 11: the dump file keeps every process's entries, and a
dump that cannot be written fails the process with a message that names the file."""

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

# A write past RLIMIT_FSIZE fails with EFBIG, as a full disk fails with ENOSPC.
DISK_FULL = """
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (300, 300))
"""


def test_processes_dumping_to_one_file_keep_every_entry(tmp_path):
    dump = tmp_path / "dump.textproto"
    procs = [subprocess.Popen([sys.executable, "-c", DUMPER.format(dump=str(dump)), str(w)],
                              cwd=ROOT, env=child_env(), stderr=subprocess.PIPE, text=True)
             for w in range(8)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    problems = {e.key.problem for e in load_results(dump)}
    expected = {make_key(problem={"W": w, "i": i}).problem for w in range(8) for i in range(4)}
    assert problems == expected | {make_key(problem={"shared": 1}).problem}


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
