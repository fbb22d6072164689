"""Parallel precompilation (real Triton compiler, sm_90 target, no GPU needed) and the sandbox
TRITON_CACHE_DIR default, checked where Triton actually writes its compile cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune_cache.triton.compile import failure_reason
from autotune_cache.triton.sandbox import ensure_triton_cache_dir

ROOT = Path(__file__).resolve().parents[2]


def _compile_worker(env_overrides: dict[str, str | None]) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    for name, value in env_overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    proc = subprocess.run([sys.executable, "-m", "tests.triton.compile_worker"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_candidates_compile_in_parallel_and_bad_ones_are_reported(tmp_path: Path) -> None:
    out = _compile_worker({"TRITON_CACHE_DIR": str(tmp_path / "tc"), "TEST_TMPDIR": None})
    assert list(out["failures"]) == ["24"]
    assert "power of 2" in out["failures"]["24"]
    # 16, 32, 64 ready to launch without compiling again, + 128, 256 from Autotuner.warmup
    assert out["jit_cache_size"] == 5
    assert out["warmed"] == ["CompiledKernel", "CompiledKernel"]
    assert len(out["cubins"]) == 5


@pytest.mark.slow
def test_sandbox_points_triton_cache_into_test_tmpdir(tmp_path: Path) -> None:
    """Inside `bazel test` (TEST_TMPDIR set, HOME unusable) Triton's cache lands in TEST_TMPDIR."""
    test_tmpdir = tmp_path / "test_tmpdir"
    test_tmpdir.mkdir()
    out = _compile_worker({"TRITON_CACHE_DIR": None, "TEST_TMPDIR": str(test_tmpdir),
                           "HOME": str(tmp_path / "no-such-home")})
    assert out["triton_cache_dir"] == str(test_tmpdir / "triton_cache")
    assert len(out["cubins"]) == 5
    assert not (tmp_path / "no-such-home").exists()


def test_sandbox_default_rules(tmp_path: Path) -> None:
    env: dict[str, str] = {"TEST_TMPDIR": str(tmp_path)}
    assert ensure_triton_cache_dir(env) == tmp_path / "triton_cache"
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "triton_cache")
    assert (tmp_path / "triton_cache").is_dir()
    explicit = {"TEST_TMPDIR": "/tmp/t", "TRITON_CACHE_DIR": "/persistent"}
    assert ensure_triton_cache_dir(explicit) is None
    assert explicit["TRITON_CACHE_DIR"] == "/persistent"
    outside_bazel: dict[str, str] = {}
    assert ensure_triton_cache_dir(outside_bazel) is None and outside_bazel == {}


def test_failure_reasons_are_one_line_and_machine_independent() -> None:
    error = RuntimeError("ptxas failed\n  at /home/alice/src/kernels/mm.py:12\n   too many regs")
    assert failure_reason(error) == "RuntimeError: ptxas failed at mm.py:12 too many regs"
    assert len(failure_reason(ValueError("x" * 5000))) == 500


@pytest.mark.slow
def test_example_kernels_compile_for_sm90_through_precompile(tmp_path: Path) -> None:
    """The GPU candidate lists of examples/triton compile for sm_90 (heuristics included)."""
    env = dict(os.environ)
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
               TRITON_CACHE_DIR=str(tmp_path / "tc"), CONFIGS_PER_EXAMPLE="2")
    proc = subprocess.run([sys.executable, "-m", "tests.triton.compile_examples_worker"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(out) == {"vector_add", "fused_softmax", "layer_norm", "matmul"}
    assert all(r["failures"] == {} and r["compiled"] == 2 for r in out.values()), out


@pytest.mark.slow
def test_gpu_tuning_path_without_a_gpu(tmp_path: Path) -> None:
    """Everything the tuner does on a GPU short of launching: precompile, device lock, timing,
    failure recording, toolchain key with the ptxas version."""
    env = dict(os.environ)
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
               TRITON_CACHE_DIR=str(tmp_path / "tc"), AUTOTUNE_BENCH_LOCK_DIR=str(tmp_path),
               AUTOTUNE_FLAGS="--autotune_compile_workers=2")
    proc = subprocess.run([sys.executable, "-m", "tests.triton.gpu_path_worker"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["device"] == "Fake H100" and out["timing_method"] == "user-do_bench"
    assert "power of 2" in out["failures"][0] and out["failures"][1:] == ["", "", ""]
    assert out["bench_calls"] == 3 and out["benchmarks"] == 3  # the broken config never ran
    assert out["compiled"] == 3
    assert out["best"] == {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}  # first timed: fastest
    assert out["toolchain"]["triton"] == "3.6.0" and out["toolchain"]["ptxas"][0].isdigit()
    assert (tmp_path / "bench-fake-gpu.lock").exists()
