"""Compiling ahead from the start (triton/early.py, detached.py) and the switch interval while the
pool compiles (scheduler.py): the real compiler for sm_90 on this CPU machine, in subprocesses,
and the decisions around it in process."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest

from autotune_cache import Cache, CacheKey, Device, Settings
from autotune_cache.formats import load_results, save_results
from autotune_cache.triton import detached, preload, preload_job, scheduler
from autotune_cache.triton.scheduler import Priority
from tests.triton import kernels
from tests.triton.test_compile_ahead import (  # noqa: F401 - isolated: an autouse fixture
    StubJit,
    isolated,
    make_b,
    spec,
    write_results,
)
from tests.triton.test_compile_helper import _cubins, _run

ROOT = Path(__file__).resolve().parents[2]
H100 = Device(name="NVIDIA H100 80GB HBM3", arch="sm_90", sm_count=132)
A100 = Device(name="NVIDIA A100-SXM4-80GB", arch="sm_80", sm_count=108)


def test_the_winners_compile_as_kernels_are_decorated_without_the_gpu_driver(tmp_path):
    """Triton's real compiler for sm_90 on a machine with no GPU, where Triton's driver cannot
    start at all: started before the kernels are decorated, the early start compiles both
    loaded winners into a fresh compile cache, under the keys a launch computes (the same
    binaries as the tuning's), with Python's switch interval at 200 us and back to 5 ms after.
    The first launch then confirms the guessed device and loads its winner from the compile
    cache: no tuning, no new binary."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "AUTOTUNE_"))}
    env.update(TRITON_CACHE_DIR=str(tmp_path / "tc"), AUTOTUNE_FLAGS="", AUTOTUNE_PROGRESS="0",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    results = tmp_path / "r.textproto"
    _run("tune", results, env)
    tuned = _cubins(tmp_path / "tc")
    env["TRITON_CACHE_DIR"] = str(tmp_path / "fresh")  # a CI sandbox: nothing compiled yet
    out = _run("early", results, env)
    assert out["jobs"] == 2 and out["compiled"] == [True, True]
    assert out["driver_before_launch"] is False
    assert out["guessed"] == "Fake H100 / sm_90 / 132 SMs"
    assert out["interval_while_compiling"] == [pytest.approx(0.0002)]
    assert out["interval_after"] == pytest.approx(0.005)
    assert out["confirmed"] is True and out["tuned"] is False
    assert out["launch_compiles"] == 1  # Triton's own compile path, a compile-cache hit
    # Before either kernel was decorated, one launcher per recorded signature was queued
    # (Triton 3.6; 3.9 builds no launcher per signature).
    if detached.per_signature_launchers():
        assert out["launchers_before_kernels"] == 2
        assert out["launcher_names"] == ["x_ptr,out_ptr,n,BLOCK_SIZE",
                                         "x_ptr,y_ptr,out_ptr,n,BLOCK_SIZE"]
    else:
        assert out["launcher_names"] == []
    fresh = _cubins(tmp_path / "fresh")
    assert fresh < tuned and len(fresh) == 2  # the two winners of the tuning's four candidates


def test_pick_takes_the_one_listed_nvidia_model_of_the_file(tmp_path):
    """The device is the file's one NVIDIA device among the models the kernel driver lists;
    none when several remain or none is listed there; a file of one device on a machine that
    lists nothing (no /proc/driver/nvidia in the container) is taken as it is."""
    gpus = tmp_path / "gpus"
    for bus, model in (("0000:18:00.0", H100.name), ("0000:2a:00.0", H100.name)):
        (gpus / bus).mkdir(parents=True)
        (gpus / bus / "information").write_text(f"Model: \t\t {model}\nIRQ:   42\n")
    models = detached.visible_models(str(gpus))
    assert models == {H100.name}
    assert detached.pick([H100, A100, H100], models) == H100
    assert detached.pick([A100], models) is None
    assert detached.pick([A100, H100], None) is None
    assert detached.pick([A100], None) == A100
    interp = Device(name="cpu-interpreter", arch="interpreter")
    assert detached.pick([interp], None) is None
    assert detached.visible_models(str(tmp_path / "none")) is None
    assert detached.target_of(H100).arch == 90 and detached.target_of(interp) is None


def _moved_to(path: Path, device: Device) -> None:
    """The file's entries as if tuned on `device` (its toolchain: this Triton, its ptxas)."""
    from autotune_cache.proto import autotune_results_pb2 as pb
    from autotune_cache.triton.device import toolchain

    entries = load_results(path)
    for entry in entries:
        entry.key.device.CopyFrom(device.to_proto())
        del entry.key.toolchain[:]
        entry.key.toolchain.extend(pb.Version(name=n, version=v)
                                   for n, v in sorted(toolchain(device).items()))
    save_results(path, entries)


def test_a_wrong_guess_is_dropped_at_the_first_launch(use_cache, fake, tmp_path, monkeypatch):
    """The file names an H100 and the early start compiles for it as B is decorated; the first
    launch runs on another device: the compile-ahead starts again for that one, and B's
    preloads are scanned again for it instead of awaiting the H100's."""
    path, _ = write_results(use_cache, fake, tmp_path, which="b")
    _moved_to(path, H100)
    compiled: list[str] = []
    monkeypatch.setattr(preload_job, "compile_detached",
                        lambda fn, spec, target: compiled.append(spec) or True)
    monkeypatch.setattr(detached, "visible_models", lambda root=None: None)
    view = Cache(Settings(load_from=(path,)))
    assert preload.start_early(view)
    b = make_b(StubJit(kernels.accumulate_kernel))
    early = preload.ahead()
    assert early is not None and early.early and early.device == H100
    guessed = dict(preload.started(b) or {})
    assert len(guessed) == 1
    for job in guessed.values():
        preload.wait(job)
    assert compiled == [spec("b", 100)]  # for the guessed H100, detached from the driver
    other = CacheKey(kernel=b.kernel_name, source_fingerprint="s", configs_fingerprint="c",
                     problem={}, device=A100, toolchain=early.toolchain)
    real = Cache(Settings(load_from=(path,)))
    own = preload.first_launch(b, other, real)
    ahead = preload.ahead()
    assert ahead is not early and not ahead.early and ahead.device == A100
    assert own == {} and preload.started(b) == {}
    assert not preload.unconfirmed()


def test_nothing_starts_early_under_the_interpreter_or_twice(use_cache, fake, tmp_path):
    """Under TRITON_INTERPRET (this suite's default) the early start does nothing; a second
    start, with a compile-ahead running, does not replace it."""
    from autotune_cache.triton import early

    path, _ = write_results(use_cache, fake, tmp_path, which="b")
    early.start(Settings(load_from=(path,)))
    assert preload.ahead() is None
    assert preload.start_early(Cache(Settings(load_from=(path,))))
    first = preload.ahead()
    assert not preload.start_early(Cache(Settings(load_from=(path,))))
    assert preload.ahead() is first


def test_compile_at_start_asks_only_where_it_can_help(tmp_path, monkeypatch):
    """Asked for (at the program's own `import triton`) only with loaded files, the flag on (off
    by default), a GPU device node and no remote compile cache."""
    from autotune_cache import startup
    from autotune_cache.foundation import machine

    asked: list[object] = []
    monkeypatch.setattr(startup, "when_triton_imported", asked.append)
    node = tmp_path / "nvidiactl"
    node.touch()
    monkeypatch.setattr(machine, "GPU_NODES", (str(node),))
    loads = Settings(load_from=(tmp_path / "r.textproto",), compile_at_start=True)
    startup.compile_at_start(Settings(compile_at_start=True))
    startup.compile_at_start(Settings(load_from=loads.load_from))  # the default: off
    startup.compile_at_start(Settings(load_from=loads.load_from, remote_cache="redis://h:1",
                                      remote_compile_cache=True, compile_at_start=True))
    assert asked == []
    startup.compile_at_start(loads)
    assert len(asked) == 1
    monkeypatch.setattr(machine, "GPU_NODES", (str(tmp_path / "absent"),))
    startup.compile_at_start(loads)
    assert len(asked) == 1


def _busy_job(pool: scheduler.CompileScheduler, seen: list[float]) -> threading.Event:
    release = threading.Event()

    def work() -> None:
        seen.append(sys.getswitchinterval())
        release.wait(10)

    pool.submit(work, Priority.AHEAD)
    return release


@pytest.mark.parametrize("configured, user, during, after", [
    (200, 0.005, 0.0002, 0.005),      # ours while compiling, Python's back after
    (0, 0.005, 0.005, 0.005),         # 0: Python's own, untouched
    (200, 0.0001, 0.0001, 0.0001),    # the program's shorter one is kept
])
def test_the_switch_interval_while_the_pool_compiles(configured, user, during, after):
    before = sys.getswitchinterval()
    sys.setswitchinterval(user)
    pool = scheduler.CompileScheduler().size(1)
    pool.switch_interval_us = configured
    seen: list[float] = []
    try:
        release = _busy_job(pool, seen)
        while not seen:
            threading.Event().wait(0.01)
        assert sys.getswitchinterval() == pytest.approx(during)
        release.set()
        with pool._cond:
            assert pool._cond.wait_for(lambda: not any(pool._running.values()), timeout=10)
        assert sys.getswitchinterval() == pytest.approx(after)
    finally:
        pool.stop()
        sys.setswitchinterval(before)


def test_an_interval_the_program_sets_meanwhile_is_kept():
    before = sys.getswitchinterval()
    pool = scheduler.CompileScheduler().size(1)
    pool.switch_interval_us = 200
    seen: list[float] = []
    try:
        release = _busy_job(pool, seen)
        while not seen:
            threading.Event().wait(0.01)
        sys.setswitchinterval(0.002)  # the program's own, while we compile
        release.set()
        with pool._cond:
            assert pool._cond.wait_for(lambda: not any(pool._running.values()), timeout=10)
        assert sys.getswitchinterval() == pytest.approx(0.002)
    finally:
        pool.stop()
        sys.setswitchinterval(before)


def _real_spec(block: int) -> str:
    """accumulate_kernel's specialization data as Triton records it (BLOCK_SIZE constexpr)."""
    return json.dumps({
        "name": "accumulate_kernel",
        "signature": {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                      "BLOCK_SIZE": "constexpr"},
        "constant_keys": [[3]], "constant_vals": [block], "attrs_keys": [], "attrs_vals": [],
        "options": {"num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None},
        "key": "k"})


@pytest.mark.parametrize("dump_run", [True, False])
def test_a_regen_after_an_upgrade_compiles_the_stale_candidates_from_the_start(
        use_cache, fake, tmp_path, monkeypatch, dump_run):
    """The file's entries were recorded under another Triton (an upgrade): in a dump run (the
    regen) the early start compiles the stale winner and every other candidate of its entry,
    derived from the winner's specialization, at the lowest priority, so the tuning that
    follows finds them in the compile cache; a run that only loads compiles none of them."""
    from autotune_cache.proto import autotune_results_pb2 as pb

    path, _ = write_results(use_cache, fake, tmp_path, which="b")
    _moved_to(path, H100)
    entries = load_results(path)
    for entry in entries:
        entry.result.triton_specialization = _real_spec(64)
        entry.key.toolchain[0].CopyFrom(pb.Version(name="triton", version="0.0.1"))
    save_results(path, entries)
    assert {t.config.params[0].int_value for t in entries[0].result.candidates} == \
        {16, 32, 64, 128}
    compiled: list[str] = []
    monkeypatch.setattr(preload_job, "compile_detached",
                        lambda fn, spec, target: compiled.append(spec) or True)
    monkeypatch.setattr(detached, "visible_models", lambda root=None: None)
    assert preload.start_early(Cache(Settings(load_from=(path,))), stale_too=dump_run)
    b = make_b(StubJit(kernels.accumulate_kernel))
    assert preload.started(b) is None  # no current winner to await
    pool = scheduler.scheduler()
    with pool._cond:
        assert pool._cond.wait_for(
            lambda: not any(pool._running.values()) and not any(pool._queues.values()),
            timeout=30)
    # (this file's winner records options of its own: its derived twin is another compile)
    blocks = sorted({json.loads(s)["constant_vals"][0] for s in compiled})
    assert blocks == ([16, 32, 64, 128] if dump_run else [])


def test_a_kernel_is_left_until_its_module_is_imported(tmp_path, monkeypatch):
    """While a module runs, what it defines below a kernel does not exist yet (a helper the
    kernel calls, a global constexpr it reads): the early start neither fingerprints nor
    compiles its kernels, nor resolves a warm-up's name in it, until the import is done."""
    from autotune_cache.triton import warmups
    from autotune_cache.triton.fingerprint import module_importing

    (tmp_path / "halfway_mod.py").write_text(
        "import triton\n"
        "import triton.language as tl\n"
        "from autotune_cache.triton import warmups\n"
        "from autotune_cache.triton.fingerprint import module_importing\n"
        "@triton.jit\n"
        "def k(x, BLOCK: tl.constexpr):\n"
        "    pass\n"
        "SEEN = (module_importing(k), warmups._resolve('halfway_mod.k') is warmups._IMPORTING)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import halfway_mod  # type: ignore[import-not-found]

    assert halfway_mod.SEEN == (True, True)
    assert not module_importing(halfway_mod.k)
    assert warmups._resolve("halfway_mod.k") not in (warmups._UNKNOWN, warmups._IMPORTING)


@pytest.mark.skipif(not detached.per_signature_launchers(),
                    reason="this Triton builds no launcher per signature (3.9: one generic one)")
def test_a_launcher_is_built_ahead_from_the_record_alone(tmp_path):
    """The early start builds each recorded signature's launcher before the kernel exists
    (detached.py `build_launcher_of`): Triton's own launcher class, given the record, writes
    the same C source as for the compiled kernel, so the launch finds that module in the
    compile cache (keyed by the source)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "AUTOTUNE_"))}
    env.update(TRITON_CACHE_DIR=str(tmp_path / "tc"), AUTOTUNE_FLAGS="", AUTOTUNE_PROGRESS="0",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    results = tmp_path / "r.textproto"
    _run("tune", results, env)
    pairs = _run("launchers", results, env)["pairs"]
    assert sorted(p["kernel"] for p in pairs) == ["accumulate_kernel", "add_kernel"]
    for pair in pairs:
        kernel_own, from_record = pair["sources"]
        assert "PyInit___triton_launcher" in kernel_own
        assert from_record == kernel_own, pair["kernel"]
    # The two kernels' signatures differ, and so do their launchers.
    assert pairs[0]["sources"][0] != pairs[1]["sources"][0]


def test_the_ready_up_queues_one_launcher_per_signature_of_the_device(use_cache, fake, tmp_path,
                                                                     monkeypatch):
    """At `import triton` the early start queues, after priming, one launcher build per
    distinct signature among the entries of its device: not another device's, not a record
    with tensor descriptors (its kernel describes that launcher), each once, last in line."""
    from autotune_cache.proto import autotune_results_pb2 as pb
    from autotune_cache.triton import early

    path, _ = write_results(use_cache, fake, tmp_path, problems=(100, 200), which="ab")
    _moved_to(path, H100)
    entries = load_results(path)
    assert len(entries) == 4

    def record(*types: str) -> str:
        return json.dumps({"name": "k", "signature": {f"a{i}": t for i, t in enumerate(types)},
                           "constant_keys": [[1]], "constant_vals": [64]})

    specs = [record("*fp32", "constexpr"), record("*fp32", "constexpr"),
             record("*fp16", "constexpr"), record("tensordesc<fp16[64]>", "constexpr")]
    for entry, text in zip(entries, specs, strict=True):
        entry.result.triton_specialization = text
    elsewhere = pb.Entry()
    elsewhere.CopyFrom(entries[0])
    elsewhere.key.device.CopyFrom(A100.to_proto())
    elsewhere.result.triton_specialization = record("*bf16", "constexpr")
    save_results(path, [*entries, elsewhere])
    queued: list[scheduler.CompileJob] = []
    monkeypatch.setattr(scheduler, "scheduler", lambda *a: type(
        "Pool", (), {"enqueue": staticmethod(queued.append)})())
    monkeypatch.setattr(detached, "prime", lambda target: None)
    monkeypatch.setattr(detached, "per_signature_launchers", lambda: True)  # Triton 3.6's
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # this run's own xdist worker
    view = Cache(Settings(load_from=(str(path),)))
    assert early._launchers(view, H100, "sm_90 target") == 2
    assert {job.priority for job in queued} == {Priority.SPECULATIVE}
    assert {job.target for job in queued} == {"sm_90 target"}
    assert [json.loads(job.fn.args[0])["a0"] for job in queued] == ["*fp16", "*fp32"]
    # A pytest-xdist worker starts from its own offset (the workers share the compile cache);
    # a Triton with no launcher per signature (3.9) queues none.
    queued.clear()
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    assert early._launchers(view, H100, "sm_90 target") == 2
    assert [json.loads(job.fn.args[0])["a0"] for job in queued] == ["*fp32", "*fp16"]
    queued.clear()
    monkeypatch.setattr(detached, "per_signature_launchers", lambda: False)
    assert early._launchers(view, H100, "sm_90 target") == 0 and queued == []
    # What a launcher is built from: the signature alone, in the arguments' order.
    assert detached.launcher_of(specs[0]) == detached.launcher_of(
        specs[0].replace("[64]", "[128]")) == '{"a0": "*fp32", "a1": "constexpr"}'
    assert detached.launcher_of(specs[3]) is None and detached.launcher_of("not json") is None
