"""The pool's compiles with their back end in compile processes (autotune_cache/triton/offload.py),
on Triton's real compiler for sm_90 without a GPU (offload_probe.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune_cache import cache as cache_mod
from autotune_cache.config.flags import Settings, parse_flags
from autotune_cache.triton import offload, offload_worker, process

ROOT = Path(__file__).resolve().parents[2]


def _probe(*args: str, cache_dir: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TRITON_", "AUTOTUNE_", "PYTEST_XDIST_"))}
    env.update(AUTOTUNE_FLAGS="", AUTOTUNE_PROGRESS="0",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    if cache_dir is not None:
        env["TRITON_CACHE_DIR"] = str(cache_dir)
    proc = subprocess.run([sys.executable, "-m", "tests.triton.offload_probe", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_split_compile_files_what_triton_files_byte_for_byte(tmp_path):
    """A vector add and two matmuls (tl.dot: wgmma on sm_90): the compile cache a split fills
    holds the same files, byte for byte, as Triton's own compile of the same source (the
    front end's .source and .ttir, the process's .ttgir, .llir, .ptx, .cubin and the metadata
    JSON), and Triton's compile after the split is a compile-cache hit. One process served
    all three, one after the other."""
    out = _probe("identical", str(tmp_path / "split"), str(tmp_path / "triton"))
    assert out["filled"] == [True, True, True] and out["hits"] == [True, True, True]
    assert out["same_names"] and out["different"] == []
    assert out["exts"] == ["cubin", "json", "llir", "ptx", "source", "ttgir", "ttir"]
    assert out["stats"] == {"split": 3, "hits": 0, "declined": 0, "failed": 0, "no_process": 0,
                            "started": 1}


def test_a_tunings_candidates_split_through_tritons_hook_and_fail_as_before(tmp_path):
    """compile_candidates on two threads: every candidate's back end runs in a compile process
    (at most one per thread), the candidate whose front end fails (a block of 24: not a power
    of two) fails as it does without them, and the binaries are the same, byte for byte."""
    on = _probe("candidates", "on", cache_dir=tmp_path / "on")
    off = _probe("candidates", "off", cache_dir=tmp_path / "off")
    assert on["failures"] == off["failures"] == [1]
    assert on["specs"] == off["specs"] == [0, 1, 2, 3]
    assert on["cubins"] == off["cubins"] and len(on["cubins"]) == 3
    assert on["stats"]["split"] == 3 and on["stats"]["declined"] == 1
    assert 1 <= on["stats"]["started"] <= 3  # two threads, and the one waiting for them
    assert off["stats"] == {"split": 0, "hits": 0, "declined": 0, "failed": 0, "no_process": 0,
                            "started": 0}


def test_a_dump_runs_queued_candidates_split_the_same_way(tmp_path):
    """queue_candidates (a dump run's tunings, compiled while its tests go on and waited for at
    its end) goes through the same hook and lane: the same splits, failures and binaries."""
    queued = _probe("candidates", "on", "queued", cache_dir=tmp_path / "queued")
    at_once = _probe("candidates", "off", cache_dir=tmp_path / "off")
    assert queued["failures"] == at_once["failures"] == [1]
    assert queued["specs"] == at_once["specs"] == [0, 1, 2, 3]
    assert queued["cubins"] == at_once["cubins"] and len(queued["cubins"]) == 3
    assert queued["stats"]["split"] == 3 and queued["stats"]["declined"] == 1


@pytest.fixture
def fresh_pool(monkeypatch):
    """This process's compile processes, made again for the test and ended after it, and no
    process cache beyond the test."""
    monkeypatch.setattr(cache_mod, "_cache", None)
    process.current().offload = None
    yield
    offload._pool().close()
    process.current().offload = None


def test_the_flag_and_an_xdist_share_bound_the_processes(fresh_pool, monkeypatch):
    """--autotune_compile_in_processes=false: none; else one per pool thread, an xdist worker's
    share of them; and the flag reads as documented."""
    assert parse_flags("--autotune_compile_in_processes=false").compile_in_processes is False
    assert Settings().compile_in_processes is True
    cache_mod.configure(Settings(compile_in_processes=False, compile_workers=8))
    assert offload._limit() == 0
    assert offload.fill(object(), object(), {}) is False
    assert offload.stats().started == 0
    cache_mod.configure(Settings(compile_workers=8))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert offload._limit() == 9  # the pool's threads, and a thread running a job it waits for
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    assert offload._limit() == 3


def test_a_process_that_dies_is_replaced_and_its_compile_left_to_the_thread(fresh_pool):
    """A compile process that ends without answering fails only that split (Triton compiles
    it on the thread); the pool ends it and starts another for the next one."""
    pool = offload._pool()
    first = pool.take(1, dict(os.environ))
    assert first is not None and pool.take(1, dict(os.environ)) is None  # one at most
    first.proc.kill()
    first.proc.wait(timeout=30)
    assert first.ask({"ttir": ""}) is None
    pool.give(first, alive=False)
    second = pool.take(1, dict(os.environ))
    assert second is not None and second is not first and second.proc.poll() is None
    pool.give(second, alive=True)
    assert pool.idle == [second] and pool.stats.started == 2


def test_a_compile_process_imports_triton_alone_in_its_own_session(fresh_pool, tmp_path):
    """The process runs isolated (-I -S: no start-up hook, sitecustomize or PYTHON* variable of
    the user's), in a session of its own (a terminal's Ctrl-C is the program's), and answers a
    request it cannot compile with the reason, staying up for the next."""
    worker = offload._Worker(dict(os.environ))
    try:
        assert worker.proc.args[1:3] == ["-I", "-S"]
        assert os.getsid(worker.proc.pid) == worker.proc.pid != os.getsid(0)
        answer = worker.ask({"ttir": "not mlir"})
        assert answer[0] == "error" and answer[1]
        assert worker.proc.poll() is None
    finally:
        worker.close()
        worker.proc.wait(timeout=30)
    assert worker.proc.returncode == 0  # its input closed: it ended by itself


def test_messages_round_trip_and_a_cut_stream_reads_as_its_end(tmp_path):
    path = tmp_path / "pipe"
    with path.open("wb") as f:
        offload_worker.write(f, {"a": b"\x00cubin", "b": ("x", 1)})
    with path.open("rb") as f:
        assert offload_worker.read(f) == {"a": b"\x00cubin", "b": ("x", 1)}
        assert offload_worker.read(f) is None
    path.write_bytes(path.read_bytes()[:-3])
    with path.open("rb") as f:
        assert offload_worker.read(f) is None


def test_a_forked_child_holds_no_pipe_of_the_parents_processes(fresh_pool):
    """A program that forks after the pool started a compile process: the child closes its
    copies of the pipes (process.py's fork handler), so the process still ends when the parent
    closes its own, while the child lives on."""
    pool = offload._pool()
    worker = pool.take(1, dict(os.environ))
    assert worker is not None
    pool.give(worker, alive=True)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: waits until the parent has seen its process end
        try:
            process.current()
            os.read(read_end, 1)
        finally:
            os._exit(0)
    try:
        pool.close()
        assert worker.proc.wait(timeout=60) == 0
    finally:
        os.write(write_end, b"x")
        os.waitpid(pid, 0)
        os.close(read_end)
        os.close(write_end)


def test_a_process_compiles_in_the_environment_the_program_had_when_it_asked(fresh_pool):
    """Triton reads its knobs from the environment: a process serves only the variables a
    compile reads as they were when it started; a change ends the idle ones of the old values.
    A variable no compile reads (pytest's PYTEST_CURRENT_TEST, rewritten at every test) starts
    no process."""
    pool = offload._pool()
    before = {**os.environ, "TRITON_DEBUG": "0", "PYTEST_CURRENT_TEST": "a.py::t (setup)"}
    first = pool.take(2, before)
    assert first is not None and first.environment == offload.relevant(before)
    assert "PYTEST_CURRENT_TEST" not in first.environment
    pool.give(first, alive=True)
    assert pool.take(2, {**before, "PYTEST_CURRENT_TEST": "a.py::t (call)"}) is first
    pool.give(first, alive=True)
    second = pool.take(2, {**before, "TRITON_DEBUG": "1"})  # a fixture set a knob since
    assert second is not None and second is not first
    assert first.proc.wait(timeout=60) == 0  # the idle one of the old value was ended
    pool.give(second, alive=True)
    assert pool.stats.started == 2 and pool.idle == [second]


def test_what_a_compile_reads_and_what_asks_it_for_output():
    """The variables a process is matched on, and those that ask a compile to print (an IR
    dump, timings, a debug log), which keep that compile on the program's thread, where its
    output is."""
    assert offload.relevant({"TRITON_CACHE_DIR": "c", "PTXAS_OPTIONS": "-v", "PATH": "p",
                             "PYTEST_CURRENT_TEST": "t", "HOSTNAME": "h"}) == {
        "TRITON_CACHE_DIR": "c", "PTXAS_OPTIONS": "-v", "PATH": "p"}
    for name in ("MLIR_ENABLE_DUMP", "LLVM_IR_ENABLE_DUMP", "TRITON_KERNEL_DUMP",
                 "NVPTX_ENABLE_DUMP", "MLIR_ENABLE_TIMING", "TRITON_LLVM_DEBUG_ONLY",
                 "MLIR_ENABLE_DIAGNOSTICS", "TRITON_DUMP_PTXAS_LOG"):
        assert offload._OUTPUT_RE.search(name), name
    for name in ("TRITON_CACHE_DIR", "PTXAS_OPTIONS", "TRITON_HOME", "CUDA_VISIBLE_DEVICES"):
        assert not offload._OUTPUT_RE.search(name), name


def test_only_the_checked_triton_releases_and_a_real_interpreter_split(monkeypatch):
    """A Triton release whose `compile` the split was not checked against byte for byte, or an
    interpreter embedded in another program (sys.executable would start that program), keeps
    every compile on the threads, and says why at debug level."""
    import triton

    assert offload.supported() is None
    monkeypatch.setattr(triton, "__version__", "3.7.1")
    assert offload.supported() == "Triton 3.7.1 is not one of 3.6, 3.9"
    monkeypatch.setattr(triton, "__version__", "3.9.0")
    monkeypatch.setattr(sys, "executable", "/usr/bin/uwsgi")
    assert "is not a Python interpreter" in (offload.supported() or "")
    monkeypatch.setattr(sys, "executable", "")
    assert offload.supported() is not None
    monkeypatch.setattr(sys, "executable", "/opt/venv/bin/python3.12")
    assert offload.supported() is None


def test_nothing_a_compile_process_prints_reaches_the_replies_or_the_program(fresh_pool):
    """Descriptor 1 of a compile process is its standard error, discarded (a failing compile
    prints on the program's thread, where Triton compiles it again); the replies travel on a
    copy of the pipe; its first message names the Triton it imported, the program's."""
    worker = offload._Worker(dict(os.environ))
    try:
        assert worker.ask({"ttir": "not mlir"})[0] == "error"  # past its set-up
        assert worker.same_triton
        fds = f"/proc/{worker.proc.pid}/fd"
        assert os.readlink(f"{fds}/1") == os.readlink(f"{fds}/2") == "/dev/null"
    finally:
        worker.close()
        worker.proc.wait(timeout=60)
