"""On a CUDA GPU: an example tunes with parallel compile and GPU-event timing, then a fresh
process loading its dump benchmarks nothing. Skipped, with the reason, on machines without one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
