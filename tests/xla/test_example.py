"""examples/jax/matmul_chain_test.py on the CPU backend with the GPU autotune flags set.

XLA accepts the xla_gpu_* autotune flags on CPU and ignores them, so the example's load test
(--xla_gpu_load_autotune_results_from + --xla_gpu_require_complete_aot_autotune_results) must
pass on a machine without a GPU. Skipped, with the reason, when jax is not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax", reason="jax is not installed (pip install 'autotune_cache[jax]')")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "jax" / "matmul_chain_test.py"
FIXTURE = ROOT / "tests" / "fixtures" / "xla_h200_jax0.11.2" / "res.textproto"


def run_example(xla_flags: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    env.update(XLA_FLAGS=xla_flags, JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
               **extra)
    return subprocess.run([sys.executable, str(EXAMPLE)], env=env, capture_output=True,
                          text=True, timeout=300)


def test_load_with_require_complete_passes_on_cpu():
    committed = EXAMPLE.with_name("matmul_chain_test.autotune.textproto")
    cache = committed if committed.exists() else FIXTURE
    proc = run_example(f"--xla_gpu_load_autotune_results_from={cache} "
                       "--xla_gpu_require_complete_aot_autotune_results")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "OK" in proc.stderr


def test_dump_mode_creates_the_outputs_dir_on_cpu(tmp_path):
    outputs = tmp_path / "outputs" / "not_yet"
    proc = run_example("--xla_gpu_dump_autotune_results_to="
                       "TEST_UNDECLARED_OUTPUTS_DIR/autotune_cache.textproto",
                       TEST_UNDECLARED_OUTPUTS_DIR=str(outputs))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert outputs.is_dir()  # the CPU backend writes no dump; the directory is ours


def test_missing_cache_file_fails_with_the_regen_hint(tmp_path):
    proc = run_example(f"--xla_gpu_load_autotune_results_from={tmp_path}/gone.textproto",
                       AUTOTUNE_REGEN_HINT="bazel run //examples/jax:matmul_chain_test.regen")
    assert proc.returncode != 0
    assert "gone.textproto: no such file" in proc.stderr
    assert "bazel run //examples/jax:matmul_chain_test.regen" in proc.stderr
