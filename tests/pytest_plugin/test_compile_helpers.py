"""Compile helpers under pytest (autotune_cache/compile_helpers.py), as a user's run meets them:
started before the rootdir's conftest.py imports anything, started again when that conftest.py
changes what they would compile, holding none of the run's pipes, stopped with the run, and
awaited by the process's compile-ahead (`settle`).

The helper here is a stand-in module (FAKE_HELPER) that records what it was given and marks one
specialization compiled after a delay; the real helper's compile is tested in
tests/triton/test_compile_helper.py. A `-p` plugin points the library at it and at a file that
stands for the GPU's device node."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from autotune_cache.foundation.compile_helpers import digest
from tests.pytest_plugin import fake_kernel

pytest_plugins = ["pytester"]

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
SPEC = '{"name": "k", "key": "planned"}'

FAKE_HELPER = '''
import json, os, sys, time
from pathlib import Path
from autotune_cache.foundation.compile_helpers import claim, digest
directory, index = Path(sys.argv[1]), int(sys.argv[2])
job = json.loads((directory / "job.json").read_text())
record = {"pid": os.getpid(), "index": index, "of": job["of"], "files": job["files"],
          "cache": os.environ.get("TRITON_CACHE_DIR"), "flags": os.environ.get("AUTOTUNE_FLAGS"),
          "stdin": os.readlink("/proc/self/fd/0"), "stdout": os.readlink("/proc/self/fd/1"),
          "stderr": os.readlink("/proc/self/fd/2"), "directory": str(directory)}
with open(os.environ["HELPER_RECORD"], "a") as f:
    f.write(json.dumps(record) + "\\n")
mine = [digest(%(spec)r)] if index == 0 else []
started = [name for name in mine if claim(directory, name, str(index))]
(directory / f"plan-{index}").write_text(json.dumps(mine))
time.sleep(0.5)
for name in started:
    (directory / name).write_text("")
time.sleep(60)  # still running when the run ends: the plugin stops it
'''

POINT_AT_FAKE = '''
from autotune_cache.foundation import compile_helpers
compile_helpers.HELPER_MODULE = "fake_helper"
compile_helpers.GPU_NODES = (%(node)r,)
'''

SUITE = '''
import time
from autotune_cache.foundation import compile_helpers

def test_settle():
    start = time.monotonic()
    assert compile_helpers.settle(%(spec)r)  # waits for the helper's marker
    assert compile_helpers.settle('{"name": "k", "key": "not planned"}') is False
    assert time.monotonic() - start < 30
'''


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
          ) -> pytest.Pytester:
    for name in ("AUTOTUNE_REGEN_HINT", "TEST_TOTAL_SHARDS", "TRITON_INTERPRET",
                 "TRITON_CACHE_DIR", "PYTEST_XDIST_WORKER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(pytester.path)]))
    monkeypatch.setenv("HELPER_RECORD", str(tmp_path / "record.jsonl"))
    monkeypatch.setenv("AUTOTUNE_FLAGS", "--autotune_compile_helpers=2")
    node = tmp_path / "nvidiactl"
    node.write_text("")
    pytester.makepyfile(fake_helper=FAKE_HELPER % {"spec": SPEC},
                        point_at_fake=POINT_AT_FAKE % {"node": str(node)},
                        test_settle=SUITE % {"spec": SPEC})
    pytester.makepyfile(fake_kernel=(HERE / "fake_kernel.py").read_text())
    committed = pytester.path / "committed.textproto"
    fake_kernel_file(committed)
    return pytester


def fake_kernel_file(path: Path) -> None:
    from autotune_cache.formats import save_results

    save_results(path, [fake_kernel.tune(fake_kernel.key("lib.softmax", 1024))])


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "-p", "point_at_fake", "-p", "autotune_cache.pytest_plugin", "-p", "no:cacheprovider",
        f"--autotune-load={pytester.path / 'committed.textproto'}", *args)


def records(tmp_path: Path) -> list[dict]:
    path = tmp_path / "record.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie (not yet reaped by pytester's process) is gone too.
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")


def test_helpers_start_before_conftest_hold_no_pipe_and_stop_with_the_run(suite, tmp_path):
    """One helper per --autotune_compile_helpers, each given the loaded file and our flags
    dropped; standard input and output are /dev/null and standard error a log file in the
    helpers' directory, so nothing waiting on pytest's pipes waits on them; the test's preload
    waits for the planned specialization and not for another; at the end of the run no helper
    is left running and the directory is gone."""
    run(suite, "test_settle.py").assert_outcomes(passed=1)
    started = records(tmp_path)
    assert sorted(r["index"] for r in started) == [0, 1]
    assert {r["of"] for r in started} == {2}
    for r in started:
        assert r["files"] == [str((suite.path / "committed.textproto").resolve())]
        assert (r["stdin"], r["stdout"]) == ("/dev/null", "/dev/null")
        assert r["stderr"].startswith(r["directory"]) and r["stderr"].endswith(".log")
        assert r["flags"] is None
        assert gone(r["pid"])
        assert not Path(r["directory"]).exists()


def test_a_conftest_changing_tritons_cache_restarts_them_and_other_settings_do_not(
        suite, tmp_path):
    """A conftest.py that sets TRITON_CACHE_DIR: the helpers started before it are stopped and
    new ones compile into the conftest's directory. One that sets an unrelated variable keeps
    the first helpers."""
    cache = suite.path / "conftest_cache"
    # Slow to import, as a conftest importing torch is: the first helpers start meanwhile.
    suite.makeconftest(f"import os, time\ntime.sleep(2)\n"
                       f"os.environ['TRITON_CACHE_DIR'] = {str(cache)!r}\n")
    run(suite, "test_settle.py").assert_outcomes(passed=1)
    started = records(tmp_path)
    assert [r["cache"] for r in started if r["index"] == 0] == [None, str(cache)]
    assert len({r["directory"] for r in started}) == 2  # before and after the conftest
    (tmp_path / "record.jsonl").unlink()
    suite.makeconftest("import os, time\ntime.sleep(2)\n"
                       "os.environ['TOKENIZERS_PARALLELISM'] = 'false'\n")
    run(suite, "test_settle.py").assert_outcomes(passed=1)
    assert len({r["directory"] for r in records(tmp_path)}) == 1


@pytest.mark.parametrize("setting", ["default", "flag", "interpret", "no_gpu", "no_file",
                                     "collect_only"])
def test_no_helpers_where_they_cannot_help(suite, tmp_path, monkeypatch, setting):
    """None by default, with --autotune_compile_helpers=0, under TRITON_INTERPRET (set by a
    conftest.py: those started before it are stopped), without a GPU device node, with no
    file loaded, or for a run that launches nothing (--collect-only, as IDEs run it)."""
    suite.makepyfile(test_settle="def test_nothing():\n    pass\n")
    args = ["test_settle.py", *(["--collect-only"] if setting == "collect_only" else [])]
    if setting == "default":
        monkeypatch.delenv("AUTOTUNE_FLAGS")
    elif setting == "flag":
        monkeypatch.setenv("AUTOTUNE_FLAGS", "--autotune_compile_helpers=0")
    elif setting == "interpret":
        suite.makeconftest("import os, time\ntime.sleep(2)\n"
                           "os.environ['TRITON_INTERPRET'] = '1'\n")
    elif setting == "no_gpu":
        suite.makepyfile(point_at_fake=POINT_AT_FAKE % {"node": str(tmp_path / "absent")})
    result = suite.runpytest_subprocess(
        "-p", "point_at_fake", "-p", "autotune_cache.pytest_plugin", "-p", "no:cacheprovider",
        *([] if setting == "no_file" else [
            f"--autotune-load={suite.path / 'committed.textproto'}"]),
        *(["--autotune-dump", str(suite.path / "out.textproto")] if setting == "no_file"
          else []), *args)
    assert result.ret == 0
    started = records(tmp_path)
    if setting == "interpret":
        assert all(gone(r["pid"]) and not Path(r["directory"]).exists() for r in started)
        assert len({r["directory"] for r in started}) == 1  # before the conftest, not after
    else:
        assert started == []


def test_settle_waits_only_for_a_compile_a_live_helper_is_running(tmp_path, monkeypatch):
    """`settle` returns at once without helpers, for a specialization no plan lists, for one
    whose helper has exited (crashed: no marker), and for one no helper has started (the
    process claims it, and the helper will skip it); it waits for a started one and says
    whether it compiled. After SETTLE_TIMEOUT_S without an answer it stops asking; a changed
    TRITON_CACHE_DIR (a fixture's) stops it too. `planned` answers from live helpers' plans."""
    import subprocess
    import sys
    import threading

    from autotune_cache.foundation import compile_helpers
    from autotune_cache.foundation.compile_helpers import PROCESS_CLAIM, claim

    assert compile_helpers.settle(SPEC) is False  # no helpers
    directory = tmp_path / "h"
    directory.mkdir()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        helpers = compile_helpers._Helpers(
            directory, ("f",), compile_helpers.relevant(os.environ), None, [live, dead])
        monkeypatch.setattr(compile_helpers, "_current", helpers)
        other, crashed, started = SPEC + "1", SPEC + "2", SPEC + "3"
        (directory / "plan-0").write_text(json.dumps([digest(SPEC), digest(started)]))
        (directory / "plan-1").write_text(json.dumps([digest(crashed)]))
        assert compile_helpers.settle(other) is False  # planned by none
        assert compile_helpers.planned(other) is False
        assert compile_helpers.settle(crashed) is False  # its helper is gone
        assert compile_helpers.planned(crashed) is False
        assert compile_helpers.planned(SPEC) is True
        assert compile_helpers.settle(SPEC) is False  # not started: the process's now
        assert (directory / f"{digest(SPEC)}.claim").read_text() == PROCESS_CLAIM
        assert not claim(directory, digest(SPEC), "0")  # the helper then skips it
        assert claim(directory, digest(started), "0")  # the helper started this one
        threading.Timer(0.3, (directory / digest(started)).write_text, [""]).start()
        assert compile_helpers.settle(started) is True
        (directory / digest(started)).unlink()
        (directory / digest(started)).write_text("-")  # left to the process after all
        assert compile_helpers.settle(started) is False
        (directory / digest(started)).unlink()
        monkeypatch.setattr(compile_helpers, "SETTLE_TIMEOUT_S", 0.2)
        assert compile_helpers.settle(started) is False  # no answer in time
        assert helpers.given_up and compile_helpers.planned(SPEC) is False
        helpers.given_up = False
        monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "a fixture's"))
        assert compile_helpers.planned(SPEC) is False
    finally:
        live.kill()
        live.wait()


def test_a_helper_whose_test_process_was_killed_exits_and_cleans_up(tmp_path):
    """A test process killed with SIGKILL never stops its helpers: the real helper notices its
    parent changed after its current compile, removes its directory and exits (here with no
    GPU, where every compile is left at once)."""
    import subprocess
    import sys

    from autotune_cache.formats import save_results
    from autotune_cache.proto import autotune_results_pb2 as pb

    results = tmp_path / "r.textproto"
    save_results(results, [pb.Entry(key=fake_kernel.key("lib.k", n).to_proto(), result=pb.Result(
        triton_specialization=json.dumps({"name": "k", "n": n}))) for n in (1, 2)])
    directory = tmp_path / "h"
    directory.mkdir()
    (directory / "job.json").write_text(json.dumps(
        {"files": [str(results)], "of": 1, "sys_path": [str(ROOT)], "parent": -1}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "AUTOTUNE_"))}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-m", "autotune_cache.triton.compile_helper",
                           str(directory), "0"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "the test process exited" in proc.stderr
    assert not directory.exists()


def test_a_real_helper_done_waits_for_the_test_process_and_stops_with_it(tmp_path, monkeypatch):
    """The real helper (here without a GPU: it leaves every specialization to the process)
    marks its work, then stays alive as a bare waiting interpreter, so no zombie of ours is
    there for the user's os.wait(); stop() ends it and removes the directory. A second run
    nested inside (another owner) neither replaces nor stops it."""
    from autotune_cache.formats import save_results
    from autotune_cache.foundation import compile_helpers
    from autotune_cache.proto import autotune_results_pb2 as pb

    results = tmp_path / "r.textproto"
    save_results(results, [pb.Entry(key=fake_kernel.key("lib.k", 1).to_proto(), result=pb.Result(
        triton_specialization=SPEC))])
    node = tmp_path / "nvidiactl"
    node.write_text("")
    monkeypatch.setattr(compile_helpers, "GPU_NODES", (str(node),))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    for name in ("PYTEST_XDIST_WORKER", "TRITON_INTERPRET"):  # as in a plain run
        monkeypatch.delenv(name, raising=False)
    outer, nested = object(), object()
    assert compile_helpers.start([results], 1, owner=outer)
    helpers = compile_helpers._current
    try:
        marker = helpers.directory / digest(SPEC)
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.read_text() == "-"  # no GPU here: left to the process
        proc = helpers.procs[0]
        while b"-c" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes() \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None  # alive, waiting: not a zombie
        assert not compile_helpers.start([], 2, owner=nested)  # nested: starts nothing...
        compile_helpers.stop(owner=nested)
        assert compile_helpers._current is helpers and proc.poll() is None  # ...stops nothing
    finally:
        compile_helpers.stop(owner=outer)
    assert proc.returncode is not None and not helpers.directory.exists()


def test_xdist_workers_wait_for_the_controllers_helpers(suite, tmp_path):
    """Under pytest-xdist the controller alone starts helpers, and every worker waits for their
    compiles as a single process would (`--dist each`: both workers settle the same planned
    specialization, and both get the helper's compile)."""
    pytest.importorskip("xdist")
    run(suite, "test_settle.py", "-n", "2", "--dist", "each").assert_outcomes(passed=2)
    started = records(tmp_path)
    assert sorted(r["index"] for r in started) == [0, 1]  # the controller's two, no worker's
    assert all(gone(r["pid"]) and not Path(r["directory"]).exists() for r in started)


def test_attached_helpers_are_waited_for_never_stopped_and_a_process_claim_is_final(
        tmp_path, monkeypatch):
    """`attach` (an xdist worker) takes the controller's helpers by pid: it waits for a compile
    a live one started, not for a dead one's; a specialization another test process claimed
    first (or this one, settling it again) is compiled at once, with no wait; stopping the
    worker's run leaves the helpers and their directory to the controller. Files that differ
    from the controller's, or an unreadable record, attach nothing."""
    import subprocess
    import sys
    import threading

    from autotune_cache.foundation import compile_helpers
    from autotune_cache.foundation.compile_helpers import PROCESS_CLAIM, claim

    directory = tmp_path / "h"
    directory.mkdir()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    started, crashed = SPEC + "s", SPEC + "c"
    (directory / "plan-0").write_text(json.dumps([digest(SPEC), digest(started)]))
    (directory / "plan-1").write_text(json.dumps([digest(crashed)]))
    info = {"directory": str(directory), "files": [str(tmp_path / "f")],
            "variables": compile_helpers.relevant(os.environ), "pids": [live.pid, dead.pid]}
    monkeypatch.setattr(compile_helpers, "_current", None)
    owner = object()
    try:
        assert not compile_helpers.attach(info, [tmp_path / "other"], owner)
        assert not compile_helpers.attach({"files": [str(tmp_path / "f")]}, [tmp_path / "f"])
        assert compile_helpers._current is None
        assert compile_helpers.attach(info, [tmp_path / "f"], owner)
        assert compile_helpers.planned(SPEC) and not compile_helpers.planned(crashed)
        assert compile_helpers.settle(crashed) is False  # its helper is gone: no wait
        claim(directory, digest(SPEC), PROCESS_CLAIM)  # another worker got there first
        t0 = time.monotonic()
        assert compile_helpers.settle(SPEC) is False
        assert compile_helpers.settle(SPEC) is False  # twice: still no wait
        assert time.monotonic() - t0 < 5
        assert claim(directory, digest(started), "0")  # the live helper's
        threading.Timer(0.3, (directory / digest(started)).write_text, [""]).start()
        assert compile_helpers.settle(started) is True
        compile_helpers.stop(owner=owner)
        assert compile_helpers._current is None
        assert live.poll() is None and directory.is_dir()  # the controller's to stop
    finally:
        live.kill()
        live.wait()
