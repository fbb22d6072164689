"""Compile-ahead (preload.py): the first launch of the process starts compiling the loaded winners
of every decorated kernel. Under the interpreter nothing compiles, so each kernel's JIT function
is a StubJit that records its preloads and launches the real kernel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
import triton

from autotune_cache import CacheKey, get_cache
from autotune_cache.formats import save_results
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.triton import autotune, engine, preload, process, routing, scheduler
from autotune_cache.triton.scheduler import Priority
from tests.triton import kernels

TABLE = {16: 4.0, 32: 2.0, 64: 1.5, 128: 3.0}  # 64 wins
ROUTED_C = "tests.triton.kernels.double_in_place_kernel"


class StubJit:
    """Stands in for a JIT function on a GPU: records preloads (or fails them), launches the
    real interpreted kernel, and is otherwise that kernel (its fingerprint is the real one)."""

    def __init__(self, real: Any, fail: bool = False) -> None:
        self.fn = real  # what python_function and the fingerprint walk through
        self.fail = fail
        self.preloaded: list[str] = []
        self.lock = threading.Lock()

    def preload(self, spec: str) -> None:
        with self.lock:
            self.preloaded.append(spec)
        if self.fail:
            raise RuntimeError("preload failed on purpose")

    def run(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn.run(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["fn"], name)


def submit_async(key: str) -> Any:
    """Submits a stand-in compile to the active `AsyncCompileMode` as Triton's JIT does: Triton
    3.6 passes (key, compile_fn, finalize_fn), newer releases also a cleanup_fn."""
    import inspect

    from triton.runtime import _async_compile

    mode = _async_compile.active_mode.get()
    hooks = [lambda kernel: None] * (len(inspect.signature(mode.submit).parameters) - 2)
    return mode.submit(key, lambda: "binary", *hooks)


@pytest.fixture(autouse=True)
def isolated(monkeypatch):
    """A compile-ahead of this test's tuners only (a fresh engine state: process.py), on a
    stand-in GPU (no driver to start)."""
    monkeypatch.setattr(process, "_state", process.ProcessState())
    monkeypatch.setattr(preload, "_start_driver", lambda: None)


def make_a(fn: Any, blocks=(16, 32, 64, 128)):
    return autotune(configs=kernels.configs(*blocks), key=["n"])(fn)


def make_b(fn: Any, blocks=(16, 32, 64, 128)):
    return autotune(configs=kernels.configs(*blocks), key=["n"])(fn)


def make_c(fn: Any):
    return routing.routed_autotune(configs=kernels.configs(16, 32, 64, 128), key=["n"])(fn)


def launch_a(kernel, n=100):
    return kernels.launch_add(kernel, n)


def launch_b(kernel, n=100):
    x = torch.rand(n, generator=torch.Generator().manual_seed(n))
    out = torch.ones(n)
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, out, n)
    return out, x + 1


def launch_c(kernel, n=100):
    x = torch.rand(n, generator=torch.Generator().manual_seed(n))
    expected = x * 2
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, n)
    return x, expected


def spec(kernel: str, n: int, tag: str = "") -> str:
    return f'{{"name": "{kernel}", "n": {n}{tag}}}'


def write_results(use_cache, fake, tmp_path, problems=(100,), foreign=False, which="abc"):
    """Tune A (add), B (accumulate) and routed C (double in place) on `problems` and save their
    entries, each winner with its own recorded specialization; with `foreign`, B also has
    entries of another device, toolchain and source (each with a specialization of its own).
    Returns the file and {kernel letter: [entries]}."""
    use_cache()
    fake(TABLE)
    made = {"a": (make_a(kernels.add_kernel), launch_a),
            "b": (make_b(kernels.accumulate_kernel), launch_b),
            "c": (make_c(kernels.double_in_place_kernel), launch_c)}
    entries: dict[str, list[pb.Entry]] = {}
    for letter in which:
        tuner, launch = made[letter]
        for n in problems:
            launch(tuner, n)
            entry = pb.Entry()
            entry.CopyFrom(tuner.last_entry)
            entry.result.triton_specialization = spec(letter, n)
            entries.setdefault(letter, []).append(entry)
    everything = [e for group in entries.values() for e in group]
    if foreign:
        base = entries["b"][0]
        for tag, change in (("device", lambda k: setattr(k.device, "name", "Other GPU")),
                            ("toolchain", lambda k: setattr(k.toolchain[0], "version", "0.0")),
                            ("source", lambda k: setattr(k, "source_fingerprint", "f" * 64))):
            other = pb.Entry()
            other.CopyFrom(base)
            change(other.key)
            other.result.triton_specialization = spec("b", 100, f', "{tag}": 1')
            everything.append(other)
    path = tmp_path / "r.textproto"
    save_results(path, everything)
    use_cache(load_from=(path,))
    return path, entries


def on_gpu(monkeypatch):
    monkeypatch.setattr(engine, "interpreter_active", lambda: False)


def settle(*tuners) -> None:
    """Let every started compile finish (a preload no worker started yet runs here)."""
    for tuner in tuners:
        for started in (preload.started(tuner) or {}).values():
            preload.wait(started)


def digests(entries) -> list[str]:
    return sorted(CacheKey.from_proto(e.key).digest() for e in entries)


def test_the_first_launch_compiles_every_decorated_kernels_winners(use_cache, fake, tmp_path,
                                                                  monkeypatch):
    """A's first launch starts B's and routed C's matching winners too (not B's entries of
    another device, toolchain or source); B's hit then awaits its compile, never redoes it."""
    _, entries = write_results(use_cache, fake, tmp_path, foreign=True)
    stubs = {k: StubJit(f) for k, f in (("a", kernels.add_kernel),
                                        ("b", kernels.accumulate_kernel),
                                        ("c", kernels.double_in_place_kernel))}
    a, b, c = make_a(stubs["a"]), make_b(stubs["b"]), make_c(stubs["c"])
    assert c.kernel_name == ROUTED_C
    # nothing at import
    assert (preload.started(a), preload.started(b), preload.started(c)) == (None, None, None)
    on_gpu(monkeypatch)
    out, expected = launch_a(a)
    torch.testing.assert_close(out, expected)
    settle(b, c)
    assert stubs["a"].preloaded == [spec("a", 100)]
    assert stubs["b"].preloaded == [spec("b", 100)]
    assert stubs["c"].preloaded == [spec("c", 100)]
    assert sorted(preload.started(b)) == digests(entries["b"])
    assert sorted(preload.started(c)) == digests(entries["c"])
    for kernel, launch in ((b, launch_b), (c, launch_c)):
        out, expected = launch(kernel)
        torch.testing.assert_close(out, expected)
        assert kernel.best_config.kwargs == {"BLOCK_SIZE": 64}
    assert stubs["b"].preloaded == [spec("b", 100)] and stubs["c"].preloaded == [spec("c", 100)]
    assert get_cache().stats.benchmarks == 0


def test_a_kernel_decorated_after_the_start_gets_its_preloads_at_decoration(
        use_cache, fake, tmp_path, monkeypatch):
    write_results(use_cache, fake, tmp_path)
    on_gpu(monkeypatch)
    a = make_a(StubJit(kernels.add_kernel))
    launch_a(a)
    late = StubJit(kernels.double_in_place_kernel)
    c = make_c(late)  # imported after the first launch: routed, so named before its scan
    assert preload.started(c) is not None and len(preload.started(c)) == 1
    settle(c)
    assert late.preloaded == [spec("c", 100)]
    out, expected = launch_c(c)
    torch.testing.assert_close(out, expected)
    assert late.preloaded == [spec("c", 100)]


def test_nothing_starts_before_the_first_launch_or_under_the_interpreter(use_cache, fake,
                                                                         tmp_path):
    write_results(use_cache, fake, tmp_path)
    stub_b = StubJit(kernels.accumulate_kernel)
    a, b = make_a(StubJit(kernels.add_kernel)), make_b(stub_b)
    launch_a(a)  # the interpreter: no preload, no compile-ahead
    assert preload.started(a) == {} and preload.started(b) is None and preload.ahead() is None
    make_c(StubJit(kernels.double_in_place_kernel))
    assert stub_b.preloaded == []


def test_nothing_loaded_nothing_preloaded(use_cache, fake, monkeypatch):
    use_cache()
    fake(TABLE)
    stubs = [StubJit(kernels.add_kernel), StubJit(kernels.accumulate_kernel)]
    a, b = make_a(stubs[0]), make_b(stubs[1])
    on_gpu(monkeypatch)
    out, expected = launch_a(a)  # tuned
    torch.testing.assert_close(out, expected)
    assert preload.started(a) == {} and preload.started(b) is None
    assert stubs[0].preloaded == stubs[1].preloaded == []


def test_one_compile_per_distinct_specialization(use_cache, fake, tmp_path, monkeypatch):
    """Two problems of B record one specialization, and two tuners (other candidate lists)
    drive B's one JIT function: one compile, which every key of both awaits."""
    _, entries = write_results(use_cache, fake, tmp_path, problems=(100, 300), which="ab")
    text = tmp_path.joinpath("r.textproto").read_text()
    tmp_path.joinpath("r.textproto").write_text(text.replace(spec("b", 300).replace('"', '\\"'),
                                                             spec("b", 100).replace('"', '\\"')))
    use_cache(load_from=(tmp_path / "r.textproto",))
    stub_b = StubJit(kernels.accumulate_kernel)
    b1, b2 = make_b(stub_b), make_b(stub_b, blocks=(16, 32, 64))
    a = make_a(StubJit(kernels.add_kernel))
    on_gpu(monkeypatch)
    launch_a(a)
    settle(b1, b2)
    assert stub_b.preloaded == [spec("b", 100)]
    assert sorted(preload.started(b1)) == sorted(preload.started(b2)) == digests(entries["b"])
    assert len({id(p) for p in [*preload.started(b1).values(), *preload.started(b2).values()]}) == 1
    for n in (100, 300):
        out, expected = launch_b(b1, n)
        torch.testing.assert_close(out, expected)
    assert stub_b.preloaded == [spec("b", 100)]


@pytest.mark.parametrize("cap, value", [("AHEAD_MAX", 1), ("AHEAD_SCAN_LIMIT", 1),
                                        ("AHEAD_SCAN_BYTES", 1)])
def test_the_caps_bound_the_work_ahead(use_cache, fake, tmp_path, monkeypatch, cap, value):
    """Over the compile-ahead's totals a kernel is left out (B: 2 entries, C: 1), and scans its
    own entries at its first launch, as before the compile-ahead."""
    write_results(use_cache, fake, tmp_path, problems=(100, 300))
    monkeypatch.setattr(preload, cap, value)
    stub_b, stub_c = StubJit(kernels.accumulate_kernel), StubJit(kernels.double_in_place_kernel)
    a, b, c = make_a(StubJit(kernels.add_kernel)), make_b(stub_b), make_c(stub_c)
    on_gpu(monkeypatch)
    launch_a(a)
    settle(b, c)
    ahead = preload.ahead()
    assert ahead.compiles_left >= 0 and ahead.entries_left >= 0 and ahead.bytes_left >= 0
    if cap == "AHEAD_MAX":  # B's first winner fits, its second and C's do not
        assert stub_b.preloaded == [spec("b", 100)] and stub_c.preloaded == []
        assert preload.started(c) is None
    else:  # nothing fits
        assert stub_b.preloaded == stub_c.preloaded == []
        assert preload.started(b) is None and preload.started(c) is None
    out, expected = launch_c(c)  # C's own scan, at its first launch
    torch.testing.assert_close(out, expected)
    settle(c)
    assert sorted(stub_c.preloaded) == [spec("c", 100), spec("c", 300)]


def test_a_failing_preload_changes_nothing(use_cache, fake, tmp_path, monkeypatch):
    write_results(use_cache, fake, tmp_path, problems=(100, 300))
    stub_b = StubJit(kernels.accumulate_kernel, fail=True)
    a, b = make_a(StubJit(kernels.add_kernel, fail=True)), make_b(stub_b)
    on_gpu(monkeypatch)
    for n in (100, 300):
        out, expected = launch_a(a, n)
        torch.testing.assert_close(out, expected)
        out, expected = launch_b(b, n)
        torch.testing.assert_close(out, expected)
        assert a.best_config.kwargs == b.best_config.kwargs == {"BLOCK_SIZE": 64}
    assert sorted(stub_b.preloaded) == [spec("b", 100), spec("b", 300)]
    assert all(p.result() is False for p in preload.started(b).values())
    assert get_cache().stats.benchmarks == 0


def test_xdist_workers_share_the_compile_threads_and_start_apart(use_cache, fake, tmp_path,
                                                                 monkeypatch):
    write_results(use_cache, fake, tmp_path, problems=(100, 300, 500, 700))
    use_cache(load_from=(tmp_path / "r.textproto",), compile_workers=8)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    order: list[str] = []
    monkeypatch.setattr(preload, "_queue", lambda job: order.append(job.label))
    a = make_a(StubJit(kernels.add_kernel))
    b = make_b(StubJit(kernels.accumulate_kernel))  # noqa: F841 (kept alive: weakly registered)
    on_gpu(monkeypatch)
    launch_a(a)
    assert scheduler.scheduler().cap(Priority.AHEAD) == 4
    own = [spec("a", n) for n in (100, 300, 500, 700)]
    assert sorted(order[:4]) == sorted(own)  # the launching kernel's first, in any order
    assert order[4:] == [spec("b", n) for n in (500, 700, 100, 300)]  # from half-way


def test_real_compiles_ahead_for_sm90_without_a_gpu(tmp_path):
    """Triton's real compiler (a compile-only driver naming sm_90): the first kernel's hit
    compiles the second kernel's loaded winner through JITFunction.preload, under the JIT key
    its own launch then finds, so that launch compiles nothing; each preload builds its kernel's
    launcher too."""
    root = Path(__file__).resolve().parents[2]
    # Nothing of Triton's or ours that another test left in this process's environment
    # (a remote compile cache's variables, say) reaches the child.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "AUTOTUNE_"))}
    env.update(TRITON_CACHE_DIR=str(tmp_path / "tc"), AUTOTUNE_FLAGS="", AUTOTUNE_PROGRESS="0",
               PYTHONPATH=os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")])))
    results = tmp_path / "r.textproto"
    outs = []
    for phase in ("tune", "load"):
        proc = subprocess.run([sys.executable, "-m", "tests.triton.compile_ahead_worker", phase,
                               str(results)], cwd=root, env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr[-4000:]
        outs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert outs[0] == {"specs": [True, True]}
    assert outs[1] == {"acc_preloads": 1, "acc_preload_ok": [True], "compiles_ahead": 1,
                       "compiles_after_hit": 0, "tuned": False, "benchmarks": 0, "pool": True,
                       "launchers_built_ahead": ["accumulate_kernel", "add_kernel"]}


def test_a_dump_run_queues_outdated_warmups_last_and_no_launch_waits_for_them(
        use_cache, tmp_path, monkeypatch):
    """A regen in place (load + dump) also compiles a plain kernel's warm-ups recorded under
    another source or toolchain, into the compile cache only: after the current one, at the
    lowest priority, on a budget of their own, and never awaited by a launch (it would wait for a
    compile that may not fit, then compile again). Another device's are left out: their options
    name that device's architecture, so none could be a hit. A run that only loads takes the
    current one alone."""
    import dataclasses

    from autotune_cache.foundation.key import WARMUP_CONFIGS, Device

    here = Device(name="NVIDIA H200", arch="sm_90", sm_count=132)
    like = CacheKey(kernel="tests.triton.kernels.add_kernel", source_fingerprint="a" * 64,
                    configs_fingerprint=WARMUP_CONFIGS, problem={}, device=here,
                    toolchain=(("triton", "3.6.0"),))
    variants = {"current": {}, "toolchain": {"toolchain": (("triton", "3.5.0"),)},
                "source": {"source_fingerprint": "b" * 64},
                "device": {"device": Device(name="NVIDIA A100", arch="sm_80", sm_count=108)}}
    entries = []
    for tag, change in variants.items():
        key = dataclasses.replace(like, problem={"specialization": tag}, **change)
        entries.append(pb.Entry(key=key.to_proto(), result=pb.Result(
            triton_specialization=json.dumps({"name": "add_kernel", "key": tag}))))
    results = tmp_path / "committed.textproto"
    save_results(results, entries)
    stub = StubJit(kernels.add_kernel)

    use_cache(load_from=(results,))
    with scheduler.scheduler(2).held():  # nothing runs: only what was queued, and how
        assert preload.warm_up(get_cache(), stub, like, compile_cache_only=False) == 1
    assert sorted(json.loads(j.label)["key"] for j in preload.ahead().compiles.values()) == [
        "current"]

    monkeypatch.setattr(process, "_state", process.ProcessState())  # a fresh process
    use_cache(load_from=(results,), dump_to=tmp_path / "regen.textproto")
    with scheduler.scheduler(2).held():
        assert preload.warm_up(get_cache(), stub, like, compile_cache_only=True) == 3
        ahead = preload.ahead()
        queued = {json.loads(j.label)["key"]: j.priority for j in ahead.compiles.values()}
        assert queued == {"current": Priority.AHEAD, "toolchain": Priority.SPECULATIVE,
                          "source": Priority.SPECULATIVE}
        assert ahead.speculative_left == preload.SPECULATIVE_MAX - 2
        assert ahead.compiles_left == preload.AHEAD_MAX - 1
        assert preload.awaiting(stub, "current") is not None
        assert preload.awaiting(stub, "toolchain") is None
        assert preload.awaiting(stub, "source") is None
