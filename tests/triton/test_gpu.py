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
