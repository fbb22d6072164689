"""Issue 49 in plain processes (AUTOTUNE_FLAGS, no pytest): the dump's table row by row, a
SIGKILL during an in-place regen, and a child made with os.fork() during a dump run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune_cache.formats import load_results, save_results
from autotune_cache.foundation.key import Device
from tests.cachetools import fake_tune, make_key
from tests.reliability.conftest import ROOT, child_env, run_python

CPU = Device(name="cpu (interpreter)")


def shared_file(path: Path) -> Path:
    """Entries of a GPU job (H200, make_key's default device), of an older toolchain on this
    device (CPU), one this run uses and one no test uses any more."""
    save_results(path, [
        fake_tune(make_key(problem={"M": 1})),
        fake_tune(make_key(problem={"M": 2})),
        fake_tune(make_key(problem={"M": 1}, device=CPU, toolchain={"triton": "3.5.0"})),
        fake_tune(make_key(problem={"M": 1}, device=CPU)),
        fake_tune(make_key(kernel="old", problem={"M": 9}, device=CPU)),
    ])
    return path


def where(path: Path) -> set[tuple[str, int, str]]:
    out = set()
    for e in load_results(path):
        kind = "gpu" if e.key.device.name != CPU.name else (
            "old triton" if e.key.toolchain[0].version == "3.5.0" else "cpu")
        out.add((e.key.kernel, int(e.key.problem.split("=")[1]), kind))
    return out


GPU = {("matmul", 1, "gpu"), ("matmul", 2, "gpu"), ("matmul", 1, "old triton")}

# A plain process regenerates in place (load F, dump F), on the CPU, using M=1 and M=3.
PROCESS = """
import sys
from pathlib import Path
from autotune_cache import Cache, Settings
from autotune_cache.foundation.key import Device
from tests.cachetools import fake_tune, make_key
cpu = Device(name="cpu (interpreter)")
dump = Path(sys.argv[1])
cache = Cache(Settings(load_from=(dump,), dump_to=dump, dump_merge=sys.argv[2] == "merge"))
for m in (1, 3):
    key = make_key(problem={"M": m}, device=cpu)
    if cache.lookup(key) is None:
        cache.record(fake_tune(key))
cache.close()
"""

# Row: process argument, environment, the file after, the dump line's tail.
TABLE = {
    "full": ("", {}, GPU | {("matmul", 1, "cpu"), ("matmul", 3, "cpu")},
             "kept 3 (2 other devices, 1 other toolchains); dropped 1 no longer used (old)"),
    "subset (Bazel test filter)": ("", {"TESTBRIDGE_TEST_ONLY": "test_one"},
                                   GPU | {("matmul", 1, "cpu"), ("matmul", 3, "cpu"),
                                          ("old", 9, "cpu")},
                                   "kept 4 (1 not selected, 2 other devices, 1 other "
                                   "toolchains); dropped 0 [subset run: --test_filter=test_one]"),
    "merge": ("merge", {}, GPU | {("matmul", 1, "cpu"), ("matmul", 3, "cpu"), ("old", 9, "cpu")},
              "kept 4 (1 --autotune-dump-merge, 2 other devices, 1 other toolchains); "
              "dropped 0 [merge run]"),
}


@pytest.mark.parametrize("row", list(TABLE))
def test_the_table_row_by_row_in_a_plain_process(tmp_path, row):
    arg, extra, after, tail = TABLE[row]
    dump = shared_file(tmp_path / "cache.textproto")
    res = run_python(PROCESS.replace("sys.argv[1]", repr(str(dump)))
                     .replace("sys.argv[2]", repr(arg)), env=extra)
    res.assert_no_traceback()
    assert res.rc == 0, res.text
    assert f"autotune_cache: dump: wrote 2 entries to {dump}; {tail}" in res.err, res.err
    assert res.err.count("dump: wrote") == 1
    assert where(dump) == after


def _wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_sigkill_during_an_in_place_regen_leaves_the_committed_file_intact(tmp_path):
    """Issue 49: a killed in-place regen shrank the committed file to the entries tuned so far.
    The file is replaced only once, at the end of a run that completed."""
    dump = tmp_path / "cache.textproto"
    save_results(dump, [fake_tune(make_key(problem={"M": m})) for m in range(300)])
    before = dump.read_bytes()
    marker = tmp_path / "tuned"
    code = f"""
import time
from pathlib import Path
from autotune_cache import Cache, Settings
from tests.cachetools import fake_tune, make_key
dump = Path({str(dump)!r})
cache = Cache(Settings(load_from=(dump,), dump_to=dump))
for m in (1000, 1001, 1002):  # new results, each written as soon as it is tuned (once)
    key = make_key(problem={{"M": m}})
    assert cache.lookup(key) is None
    cache.record(fake_tune(key))
Path({str(marker)!r}).touch()
time.sleep(600)
"""
    proc = subprocess.Popen([sys.executable, "-c", code], env=child_env(), cwd=ROOT)
    try:
        _wait_for(lambda: marker.exists() or proc.poll() is not None)
        assert proc.poll() is None, "the regen ended early"
        proc.send_signal(signal.SIGKILL)  # a CI timeout, the OOM killer
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert dump.read_bytes() == before
    # The next regen finds every committed entry, and sweeps the killed run's directory.
    res = run_python(f"""
from pathlib import Path
from autotune_cache import Cache, Settings
from tests.cachetools import make_key
dump = Path({str(dump)!r})
cache = Cache(Settings(load_from=(dump,), dump_to=dump))
assert all(cache.lookup(make_key(problem={{"M": m}})) is not None for m in range(300))
cache.close()
""")
    res.assert_no_traceback()
    assert res.rc == 0, res.text
    assert len(load_results(dump)) == 300


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_forked_child_is_a_member_of_the_dump_run_never_its_root(tmp_path):
    """Issue 49: a child made with os.fork() kept the root's DumpFile, wrote the dump at its exit
    and deleted the run directory: its own entry, and that of a subprocess started later, were
    lost. It is a member: its entry, the root's and the later subprocess's are all dumped."""
    dump = tmp_path / "cache.textproto"
    res = run_python(f"""
import os, subprocess, sys
from pathlib import Path
from autotune_cache import Cache, Settings, configure, get_cache
from tests.cachetools import fake_tune, make_key
dump = Path({str(dump)!r})
configure(Settings(dump_to=dump))
cache = get_cache()
cache.record(fake_tune(make_key(problem={{"M": 1}})))
run_dir = os.environ["AUTOTUNE_DUMP_RUN"]
pid = os.fork()
if pid == 0:
    get_cache().record(fake_tune(make_key(problem={{"M": 2}})))
    sys.exit(0)  # a normal exit: atexit runs in the child
os.waitpid(pid, 0)
assert os.path.isdir(run_dir), "the forked child ended the run"
assert not dump.exists(), "the forked child wrote the dump"
subprocess.run([sys.executable, "-c", '''
from pathlib import Path
from autotune_cache import Cache, Settings
from tests.cachetools import fake_tune, make_key
cache = Cache(Settings(dump_to=Path({str(dump)!r})))
cache.record(fake_tune(make_key(problem={{"M": 3}})))
cache.close()
'''], check=True)
cache.record(fake_tune(make_key(problem={{"M": 4}})))
""")
    res.assert_no_traceback()
    assert res.rc == 0, res.text
    assert sorted(e.key.problem for e in load_results(dump)) == ["M=1", "M=2", "M=3", "M=4"]
    assert res.err.count("dump: wrote") == 1, res.err


def test_a_process_that_dies_of_an_uncaught_exception_drops_nothing(tmp_path):
    """A plain process's dump is written at its exit; one that ended with an uncaught exception
    did not complete, so its dump is a failed run's: this device's entries it did not reproduce
    are kept, not dropped as no longer used."""
    dump = shared_file(tmp_path / "cache.textproto")
    res = run_python(f"""
from pathlib import Path
from autotune_cache import Settings, configure, get_cache
from autotune_cache.foundation.key import Device
from tests.cachetools import fake_tune, make_key
dump = Path({str(dump)!r})
configure(Settings(load_from=(dump,), dump_to=dump))
get_cache().record(fake_tune(make_key(problem={{"M": 3}}, device=Device(name="cpu (interpreter)"))))
raise RuntimeError("the program failed")
""")
    assert res.rc == 1 and "RuntimeError: the program failed" in res.err, res.text
    assert ("old", 9, "cpu") in where(dump) and ("matmul", 3, "cpu") in where(dump), res.err
    assert "[failed run]" in res.err, res.err
