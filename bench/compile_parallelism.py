"""Where a cold tuning's compile time goes, and whether threads can spread it (issue 24; the
S-cold profile).

    python bench/compile_parallelism.py OUT_DIR [--configs 48] [--workers 16] [--smoke]

A cold tuning compiles every candidate before it benchmarks them, on `--autotune_compile_workers`
threads (autotune_cache/triton/compile.py). On the H200 the candidate compiles of a real suite
summed to about 2.3x their serial time on 16 threads (bench/suite_perf.py's profile, issue 24),
so the threads contend. This bench compiles the brief's matmul kernel
(`bench/triton_matmul_workload.py`'s `mm`, its GPU candidate list: 48 configs) for sm_90 with
Triton's real compiler (MLIR, LLVM, ptxas), no GPU needed (a compile-only target, as
tests/triton/compile_worker.py does), in three ways, each in a fresh child with its own empty
TRITON_CACHE_DIR:

  serial     one thread; Triton's compile listener splits each compile into its stages
             (ir_initialization: the Python front end from the AST to TTIR, then the lowering
             stages ttir, ttgir, llir, ptx, cubin)
  threads    --workers threads, as our tuner compiles today
  processes  --workers processes (spawned); the pool's start (each worker imports torch and
             Triton) is reported apart from the compile wall time

Reported: wall time of each, speed-up over serial, and the serial stage split (sum over configs
and share). Writes OUT_DIR/compile_parallelism.json and .md. --smoke: 2 configs, 2 workers.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The child: compile the first n candidates in one way (`mode`), print one JSON line.
CHILD = r"""
import json, os, sys, time
os.environ["TRITON_INTERPRET"] = "0"
mode, workers, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sys.path.insert(0, sys.argv[4])
import torch, triton
from triton import knobs
import compile_parallelism as cp

stages = {}
def listener(*, src, metadata, metadata_group, times, cache_hit):
    stages.setdefault("ir_initialization", []).append(times.ir_initialization / 1e6)
    for name, us in times.lowering_stages:
        stages.setdefault(name, []).append(us / 1e6)

started = time.perf_counter()
if mode == "serial":
    knobs.compilation.listener = listener
    results = [cp.compile_config(i) for i in range(n)]
    pool_start = 0.0
elif mode == "threads":
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(cp.compile_config, range(n)))
    pool_start = 0.0
else:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=cp.worker_init) as pool:
        list(pool.map(cp.ready, range(workers)))  # every worker has imported torch and Triton
        pool_start = time.perf_counter() - started
        started = time.perf_counter()
        results = list(pool.map(cp.compile_config, range(n)))
wall = time.perf_counter() - started
print(json.dumps({"mode": mode, "workers": workers, "wall_s": wall, "pool_start_s": pool_start,
                  "per_compile_s": [r[0] for r in results],
                  "failures": sum(1 for r in results if r[1]),
                  "stages_s": {k: sum(v) for k, v in stages.items()}}))
"""

SIGNATURE = {"a": "*fp16", "b": "*fp16", "c": "*fp16", "M": "i32", "N": "i32", "K": "i32",
             "sam": "i32", "sak": "i32", "sbk": "i32", "sbn": "i32", "scm": "i32", "scn": "i32",
             "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}


def kernel():
    """The workload's plain `mm` kernel, imported as on the GPU (not on the interpreter)."""
    os.environ["TRITON_INTERPRET"] = "0"
    if str(ROOT / "bench") not in sys.path:
        sys.path.insert(0, str(ROOT / "bench"))
    import triton_matmul_workload

    return triton_matmul_workload.mm


@functools.cache
def candidates() -> list:
    """The workload's GPU candidate list (48 configs), whatever machine this runs on."""
    import triton

    return [triton.Config({"BM": bm, "BN": bn, "BK": bk}, num_warps=w, num_stages=s)
            for bm in (64, 128) for bn in (64, 128, 256) for bk in (32, 64) for w in (4, 8)
            for s in (3, 4)]


def compile_config(i: int) -> tuple[float, str | None]:
    """Compile candidate `i` for sm_90: (seconds, the exception's type name or None). Every way
    of the bench runs this, in the child, on its threads or in its pool's processes. A failing
    candidate (out of resources) is part of a real tuning too."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    cfg = candidates()[i]
    started = time.perf_counter()
    src = ASTSource(fn=kernel(), signature=SIGNATURE, constexprs=dict(cfg.kwargs))
    try:
        triton.compile(src, target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages})
    except Exception as e:
        return time.perf_counter() - started, type(e).__name__
    return time.perf_counter() - started, None


def worker_init() -> None:
    """A pool worker imports torch and Triton before the pool counts as started (spawned
    workers inherit the child's environment and sys.path)."""
    import torch  # noqa: F401
    import triton  # noqa: F401


def ready(_: int) -> bool:
    return True


def run(mode: str, workers: int, n: int) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TRITON_CACHE_DIR": cache, "TRITON_INTERPRET": "0",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                           os.environ.get("PYTHONPATH")]))}
        proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(workers), str(n),
                               str(ROOT / "bench")], env=env, capture_output=True, text=True,
                              check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{mode} child failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def markdown(result: dict) -> str:
    serial = result["runs"]["serial"]
    lines = [f"# Compiling {result['configs']} matmul candidates for sm_90: serial, threads, "
             "processes", "",
             f"`{result['command']}` on {result['machine']}.", "",
             "| way | workers | compile wall | speed-up over serial | pool start | failed "
             "candidates |", "| --- | --- | --- | --- | --- | --- |"]
    for mode, run_ in result["runs"].items():
        speedup = serial["wall_s"] / run_["wall_s"]
        lines.append(f"| {mode} | {run_['workers']} | {run_['wall_s']:.2f} s | {speedup:.2f}x | "
                     f"{run_['pool_start_s']:.2f} s | {run_['failures']} |")
    total = sum(serial["stages_s"].values()) or 1.0
    lines += ["", "Serial compile time by stage (sum over the candidates):", "",
              "| stage | time | share |", "| --- | --- | --- |"]
    for name, seconds in serial["stages_s"].items():
        lines.append(f"| {name} | {seconds:.2f} s | {seconds / total:.0%} |")
    per = serial["per_compile_s"]
    lines += ["", f"One compile, serial: median {statistics.median(per):.3f} s. "
              "ir_initialization is Triton's Python front end (AST to TTIR); the lowering stages "
              "run MLIR and LLVM passes and ptxas (a subprocess for cubin)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--configs", type=int, default=48)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.configs, args.workers = 2, 2
    args.out.mkdir(parents=True, exist_ok=True)
    runs = {"serial": run("serial", 1, args.configs),
            "threads": run("threads", args.workers, args.configs),
            "processes": run("processes", args.workers, args.configs)}
    result = {"command": "python bench/compile_parallelism.py " + " ".join(sys.argv[1:]),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
                         f"{platform.python_version()}",
              "configs": args.configs, "runs": runs}
    (args.out / "compile_parallelism.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "compile_parallelism.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
