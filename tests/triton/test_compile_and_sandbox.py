"""Parallel precompilation (real Triton compiler, sm_90 target, no GPU needed) and the sandbox
TRITON_CACHE_DIR default, checked where Triton actually writes its compile cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import triton

from autotune_cache.triton.compile import compile_cost, failure_reason
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
    long = failure_reason(ValueError("x" * 5000 + " the end"))
    assert len(long) == 500 and long.startswith("ValueError: xxx") and long.endswith("the end")


def _compilation_error(src: str, line: int, col: int, message: str | None) -> Exception:
    import ast

    from triton.compiler.errors import CompilationError

    node = ast.parse("x").body[0]
    node.lineno, node.col_offset = line, col
    return CompilationError(src, node, message)


def test_failure_reason_follows_the_cause_into_called_jit_functions() -> None:
    """Triton wraps an error inside a called @jit function in one CompilationError per call
    level, each only a source excerpt ending in '^'; the reason is the innermost error, with
    the innermost location."""
    outer_src = "def attn_fwd(q, k):\n    acc = _attn_fwd_inner(q, k)"
    inner_src = "def _attn_fwd_inner(q, k):\n    qk = tl.dot(q, k)"
    try:
        try:
            try:
                raise AssertionError("Input shapes should have M >= 1, N >= 1 and K >= 16")
            except AssertionError as e:
                raise _compilation_error(inner_src, 5, 13, None) from e
        except Exception as e:
            raise _compilation_error(outer_src, 12, 20, None) from e
    except Exception as e:
        error = e
    assert str(error).splitlines()[-1].strip() == "^"  # what used to be recorded
    assert failure_reason(error) == ("AssertionError: Input shapes should have M >= 1, N >= 1 "
                                     "and K >= 16 [at 5:13 in _attn_fwd_inner]")


def test_failure_reason_keeps_a_compile_error_with_its_own_message() -> None:
    error = _compilation_error("def k(x):\n    tl.static_assert(False)", 2, 4,
                               "static_assert failed: BLOCK too large")
    assert failure_reason(error) == "CompilationError: static_assert failed: BLOCK too large" \
        " [at 2:4 in k]"


def test_failure_reason_context_only_when_the_error_says_nothing() -> None:
    try:
        try:
            raise KeyError("BLOCK_M")
        except KeyError:
            raise RuntimeError("out of resource: shared memory") from None
    except RuntimeError as e:
        suppressed = e
    assert failure_reason(suppressed) == "RuntimeError: out of resource: shared memory"
    try:
        try:
            {}["BLOCK_M"]
        except KeyError:
            raise RuntimeError("launch failed for this config")  # noqa: B904
    except RuntimeError as e:
        described = e
    assert failure_reason(described) == "RuntimeError: launch failed for this config"
    try:
        try:
            raise OSError("libcuda.so: cannot open shared object file")
        except OSError:
            raise RuntimeError()  # noqa: B904
    except RuntimeError as e:
        silent = e
    assert failure_reason(silent) == "OSError: libcuda.so: cannot open shared object file"


def _attention_worker(tmp_path: Path, workers: int) -> dict:
    env = dict(os.environ)
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
               TRITON_CACHE_DIR=str(tmp_path / "tc"), AUTOTUNE_BENCH_LOCK_DIR=str(tmp_path),
               AUTOTUNE_FLAGS=f"--autotune_compile_workers={workers}", AUTOTUNE_PROGRESS="0")
    proc = subprocess.run([sys.executable, "-m", "tests.triton.attention_compile_worker",
                           str(workers)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("workers", [2, 1])
def test_tma_attention_pre_hooks_run_before_each_candidate_compiles(tmp_path: Path,
                                                                     workers: int) -> None:
    """Triton's fused-attention (TMA) pattern on the GPU tuning path (sm_90 compile, no GPU):
    every candidate is specialised with the block shapes its own pre_hook sets, whether the
    compile is parallel or not, and each benchmark launch sees its own hook's state."""
    out = _attention_worker(tmp_path, workers)
    # The first candidate's hook leaves the dummy [1, 1] blocks: it fails, with the real error.
    assert out["failures"][0] == ("AssertionError: Input shapes should have M >= 1, N >= 1 "
                                  "and K >= 16 [at 5:13 in _attn_fwd_inner]")
    assert out["failures"][1:] == ["", "", "", ""]
    desc = "tensordesc<fp16[{}, 64]>"
    assert out["compiled"] == sorted([[desc.format(m), desc.format(n), desc.format(n),
                                       desc.format(m)] for m in (64, 128) for n in (32, 64)])
    benchmarked = out["launches"][:4]
    assert [launch["config"] for launch in benchmarked] == [[64, 32], [64, 64], [128, 32],
                                                             [128, 64]]
    for launch in benchmarked:
        m, n = launch["config"]
        assert launch["blocks"] == {"desc_q": [m, 64], "desc_k": [n, 64], "desc_v": [n, 64],
                                    "desc_o": [m, 64]}
    assert out["best"] == {"BLOCK_M": 64, "BLOCK_N": 32}  # the first one timed: fastest
    assert out["launches"][4]["config"] == [64, 32]  # the real launch, with its blocks
    assert out["launches"][4]["blocks"]["desc_k"] == [32, 64]
    assert out["benchmarks"] == 4  # the failed candidate is not a benchmark


@pytest.mark.slow
def test_example_kernels_compile_for_sm90_through_compile_candidates(tmp_path: Path) -> None:
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
    """Everything the tuner does on a GPU short of launching: the parallel compile, device
    lock, timing, failure recording, toolchain key with the ptxas version."""
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
    assert out["toolchain"]["triton"] == triton.__version__
    assert out["toolchain"]["ptxas"][0].isdigit()
    assert (tmp_path / "bench-fake-gpu.lock").exists()


def test_importing_changes_nothing_decorating_applies_the_sandbox_default(tmp_path: Path) -> None:
    """No import-time side effect: TRITON_CACHE_DIR is set when a kernel is decorated (before
    its first compile), not when the package is imported."""
    code = ("import os, triton, autotune_cache.triton as t\n"
            "before = os.environ.get('TRITON_CACHE_DIR')\n"
            "from tests.triton import kernels\n"
            "kernels.tuned_add()\n"
            "print(before, os.environ.get('TRITON_CACHE_DIR'))")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_CACHE_DIR"}
    env.update(TEST_TMPDIR=str(tmp_path), TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["None", str(tmp_path / "triton_cache")]


@pytest.mark.slow
def test_costliest_candidate_compiles_first_and_progress_names_it(tmp_path: Path) -> None:
    """Down the GPU path (sm_90 compile, no GPU), with a screening stage: the costliest
    candidate is specialised first, every benchmark starts once all candidates are compiled,
    timings stay in config order, and the progress line names the slowest compile."""
    env = dict(os.environ)
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
               TRITON_CACHE_DIR=str(tmp_path / "tc"), AUTOTUNE_BENCH_LOCK_DIR=str(tmp_path),
               AUTOTUNE_FLAGS="--autotune_compile_workers=2", AUTOTUNE_PROGRESS="1")
    proc = subprocess.run([sys.executable, "-m", "tests.triton.costly_first_worker"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["specialised"] == [256, 128, 64, 32, 16]  # 256 elements on one warp: costliest
    events = out["events"]
    assert [e[1] for e in events if e[0] == "screen"] == [16, 32, 64, 128, 256]  # config order
    assert [e[0] for e in events] == ["screen"] * 5 + ["final"] * 3
    assert all(count == 5 for _, _, count in events)  # every candidate compiled before any
    assert sorted(e[1] for e in events if e[0] == "final") == [64, 128, 256]  # best 3
    assert out["best"] == {"BLOCK_SIZE": 64}
    assert out["times"] == [0.9, 0.8, 4.0, 7.0, 5.0]
    assert out["benchmarks"] == 5
    assert "compiled 5 configs in" in proc.stderr, proc.stderr[-2000:]
    assert "; slowest BLOCK_SIZE=" in proc.stderr, proc.stderr[-2000:]


def test_compile_cost_orders_by_work_per_thread() -> None:
    """The costliest compile starts first: more elements per thread, more pipeline stages."""
    import triton

    configs = [triton.Config({"B": 512}, num_warps=32), triton.Config({"B": 8192}, num_warps=1),
               triton.Config({"B": 8192}, num_warps=8),
               triton.Config({"BM": 128, "BN": 128, "BK": 64, "EVEN": True}, num_warps=8,
                             num_stages=4),
               triton.Config({"BM": 128, "BN": 128, "BK": 64}, num_warps=8, num_stages=3)]
    order = sorted(range(len(configs)), key=lambda i: -compile_cost(configs[i]))
    assert order == [3, 4, 1, 2, 0]
    assert compile_cost(triton.Config({}, num_warps=4)) == compile_cost(triton.Config({"F": 1.5}))
