"""On a CUDA GPU: an example tunes with parallel compile and GPU-event timing, then a fresh
process loading its dump benchmarks nothing. Skipped, with the reason, on machines without one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from autotune_cache.formats import load_results

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]


def _run_example(name: str, flags: str, outputs: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["AUTOTUNE_FLAGS"] = flags
    env["TEST_UNDECLARED_OUTPUTS_DIR"] = str(outputs)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "triton" / f"{name}_test.py")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((outputs / "autotune_report.json").read_text())


def test_vector_add_tunes_on_gpu_then_reloads_without_benchmarks(tmp_path: Path) -> None:
    dump = tmp_path / "va.autotune.textproto"
    first = _run_example("vector_add", f"--dump_autotune_results_to={dump}", tmp_path / "r1")
    assert first["tuned"] == 2 and first["benchmarks"] > 0
    assert first["deferred"] == 2  # a dump run on a GPU tunes at its end (deferred.py)
    entries = load_results(dump)
    assert len(entries) == 2
    for entry in entries:
        assert entry.key.device.arch.startswith(("sm_", "gfx"))
        assert entry.key.device.sm_count > 0
        assert entry.result.timing_method == "do_bench"
        assert all(t.time_ms > 0 or t.failure for t in entry.result.candidates)
    second = _run_example(
        "vector_add", f"--load_autotune_results_from={dump} --require_complete_autotune_results",
        tmp_path / "r2")
    assert (second["hits"], second["misses"], second["benchmarks"]) == (2, 0, 0)


def _attention_phase(phase: str, tmp_path: Path, flags: str, triton_cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(AUTOTUNE_FLAGS=flags, TRITON_CACHE_DIR=str(triton_cache), AUTOTUNE_PROGRESS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "tests.triton.attention_gpu_worker", phase,
                           str(tmp_path / f"{phase}.pt")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    sys.stderr.write(proc.stderr[-3000:])
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps(report))  # the figures, shown with pytest -s
    return report


def test_tma_fused_attention_tunes_from_scratch_like_triton_autotune(tmp_path: Path) -> None:
    """Triton's fused-attention tutorial pattern (host TensorDescriptors, a per-config pre_hook
    setting block_shape, an early prune) tunes from scratch with parallel compile, to the same
    output as triton.autotune; a fresh process loading the dump benchmarks nothing."""
    dump = tmp_path / "attention.autotune.textproto"
    theirs = _attention_phase("triton", tmp_path, "", tmp_path / "tc-triton")
    ours = _attention_phase("ours", tmp_path, f"--dump_autotune_results_to={dump}",
                            tmp_path / "tc-ours")
    assert ours["timing_method"] == "do_bench" and ours["misses"] == 1
    assert ours["benchmarks"] == ours["timed"] > 0  # only completed benchmarks count
    assert not any("Input shapes" in f for f in ours["failures"]), ours["failures"]
    reloaded = _attention_phase(
        "reload", tmp_path,
        f"--load_autotune_results_from={dump} --require_complete_autotune_results",
        tmp_path / "tc-reload")
    assert (reloaded["hits"], reloaded["misses"], reloaded["benchmarks"]) == (1, 0, 0)
    assert reloaded["best"] == ours["best"]
    outputs = {phase: torch.load(tmp_path / f"{phase}.pt") for phase in ("triton", "ours",
                                                                          "reload")}
    for report in (theirs, ours, reloaded):
        assert report["max_abs_diff_vs_torch"] < 2e-2, report
    torch.testing.assert_close(outputs["ours"], outputs["triton"], atol=2e-2, rtol=0)
    torch.testing.assert_close(outputs["reload"], outputs["ours"], atol=0, rtol=0)


def test_gpu_only_arguments(tmp_path: Path) -> None:
    """warmup/rep and use_cuda_graph (recorded as the timing method), reset_to_zero and
    restore_value through real GPU benchmarking, and an ir_override candidate."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(tmp_path / "tc"), AUTOTUNE_FLAGS="",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "tests.triton.gpu_surface_worker",
                           str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps(out))
    assert out["warmup_rep"] == {"method": "do_bench(warmup=5,rep=20)", "correct": True}
    assert out["cuda_graph"] == {"method": "cuda_graph(rep=20)", "correct": True}
    assert out["reset_to_zero_correct"] and out["restore_value_correct"]
    assert out["ir_override"] == {"best_is_override": True, "correct": True, "failures": []}


# A user's test module, written the way public projects write their kernels: a plain
# triton.autotune, routed by the plugin's --autotune-all-kernels. Four tests over two keys, so
# that under `pytest -n 2` both workers launch (and defer) the same keys.
_XDIST_SUITE = '''
import pytest
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w)
                          for b in (256, 512, 1024, 2048) for w in (2, 4)], key=["n"])
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3.0, mask=mask)


@pytest.mark.parametrize("n", [1 << 16, 1 << 20, 1 << 16, 1 << 20])
def test_scale(n):
    x = torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    torch.testing.assert_close(out, x * 3.0)
'''


def _pytest_suite(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRITON_INTERPRET", "AUTOTUNE_FLAGS")}
    env.update(TRITON_CACHE_DIR=str(tmp_path / "tc"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "autotune_cache.pytest_plugin", "--autotune-all-kernels",
                           *args, "test_user_suite.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)


def test_an_xdist_dump_run_defers_in_each_worker_and_reloads_complete(tmp_path: Path) -> None:
    """`pytest -n 2 --autotune-dump` on a GPU: both workers launch the same two keys, defer them,
    and tune them at their session ends through the shared cache directory, so the controller
    merges one entry per key (real timings differ between workers: two tunings of a key would be
    refused); a second run loads the merged dump with --autotune-require-complete and times
    nothing."""
    pytest.importorskip("xdist", reason="needs pytest-xdist")
    (tmp_path / "test_user_suite.py").write_text(_XDIST_SUITE)
    dump = tmp_path / "suite.autotune.textproto"
    first = _pytest_suite(tmp_path, "-n", "2", f"--autotune-dump={dump}")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "4 passed" in first.stdout
    entries = load_results(dump)
    assert len(entries) == 2, [e.key.problem for e in entries]
    assert {e.key.kernel for e in entries} == {"test_user_suite.scale_kernel"}
    assert len({e.key.problem for e in entries}) == 2
    assert all(e.result.timing_method == "do_bench" for e in entries)
    assert "at the end of the run" in first.stdout, first.stdout[-2000:]
    second = _pytest_suite(tmp_path, "-n", "2", f"--autotune-load={dump}",
                           "--autotune-require-complete")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "4 passed" in second.stdout
    assert "0 misses" in second.stdout and "0 benchmarks" in second.stdout, second.stdout[-2000:]


def test_a_compile_helper_fills_the_compile_cache_a_loaded_run_then_only_reads(
        tmp_path: Path) -> None:
    """On the GPU, the real helper (autotune_cache/triton/compile_helper.py) compiles a dump's
    winners of a routed kernel into an empty TRITON_CACHE_DIR; a loaded run on that cache,
    compiles no new binary and benchmarks nothing."""
    from autotune_cache.foundation.compile_helpers import JOB_FILE
    from autotune_cache.triton.compile_helper import work

    (tmp_path / "test_user_suite.py").write_text(_XDIST_SUITE)
    dump = tmp_path / "suite.autotune.textproto"
    first = _pytest_suite(tmp_path, f"--autotune-dump={dump}")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    cache = tmp_path / "tc"
    shutil.rmtree(cache)
    job = tmp_path / "helpers"
    job.mkdir()
    (job / JOB_FILE).write_text(json.dumps({"files": [str(dump)], "of": 1,
                                            "sys_path": [str(tmp_path), str(ROOT)],
                                            "parent": os.getpid()}))
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "AUTOTUNE_FLAGS")}
    env.update(TRITON_CACHE_DIR=str(cache))
    winners = len(work([str(dump)]))  # the two keys' winners, once per specialization
    log = tmp_path / "helper.log"
    with open(log, "wb") as err:
        # A helper done with its work waits for its parent (this test) to end: stopped here.
        helper = subprocess.Popen([sys.executable, "-m", "autotune_cache.triton.compile_helper",
                                   str(job), "0"], cwd=tmp_path, env=env, stderr=err)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and helper.poll() is None and len(
                [p for p in job.iterdir() if len(p.name) == 32]) < winners:
            time.sleep(0.1)
        markers = [p for p in job.iterdir() if len(p.name) == 32]
        assert winners and len(markers) == winners, log.read_text()[-3000:]
        assert all(p.read_text() == "" for p in markers), log.read_text()[-3000:]
        assert helper.poll() is None  # alive, waiting for this process
    finally:
        helper.terminate()
        helper.wait()
    cubins = sorted(p.parent.name for p in cache.rglob("*.cubin"))
    assert len(cubins) == winners
    second = _pytest_suite(tmp_path, f"--autotune-load={dump}", "--autotune-require-complete")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "0 benchmarks" in second.stdout, second.stdout[-2000:]
    assert sorted(p.parent.name for p in cache.rglob("*.cubin")) == cubins
