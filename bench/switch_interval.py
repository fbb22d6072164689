"""Compiles on background threads beside a busy main thread, at two thread switch intervals (CPU).

    python bench/switch_interval.py OUT_DIR [--compiles 8] [--threads 2] [--reps 3] [--smoke]

Why: a suite's conftest.py imports torch and its library (seconds of Python on the main thread)
while the compile pool compiles the loaded winners ahead (triton/early.py). A compile thread
gives up the GIL in every file write and native call and, with the main thread busy, waits up to
one switch interval to get it back (decision 0034). This measures what that costs and what a
shorter interval (--autotune_switch_interval_us, 200 us) gives back, on Triton's real compiler
for sm_90 (no GPU needed: the target is given).

Each trial is a fresh `python` child with its own empty TRITON_CACHE_DIR, in one of three modes:

  work      the main thread's work alone: module bodies executed, as imports run them
  compile   `--compiles` distinct specializations of a layer-norm kernel on `--threads` threads
  both      the two at once (the compiles started first), at the interval under test

Reported per interval (5000 us, Python's default, and 200 us), medians over `--reps`: the
compiles' wall time beside the busy main thread, over the compiles alone; the main thread's
work beside the compiles, over the work alone; and the wall time of both. The trials alternate,
so a drifting VM shares its drift between them.

Writes OUT_DIR/switch_interval.json and OUT_DIR/switch_interval.md. --smoke: 2 compiles, 1 rep.
"""

from __future__ import annotations

import argparse
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
INTERVALS_US = (5000, 200)

# The child: the kernel lives in a file of its own (triton.jit reads its source).
KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def layer_norm(X, Y, W, stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * stride + cols, mask=mask, other=0.).to(tl.float32)
    mean = tl.sum(x, 0) / N
    xc = tl.where(mask, x - mean, 0.)
    var = tl.sum(xc * xc, 0) / N
    w = tl.load(W + cols, mask=mask)
    tl.store(Y + row * stride + cols, xc / tl.sqrt(var + eps) * w, mask=mask)
'''

CHILD = r'''
import json, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
mode, interval_us, compiles, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import bench_kernel

SIGNATURE = {"X": "*fp32", "Y": "*fp32", "W": "*fp32", "stride": "i32", "N": "i32",
             "eps": "fp32", "BLOCK": "constexpr"}
TARGET = GPUTarget("cuda", 90, 32)


def compile_one(i):
    source = ASTSource(bench_kernel.layer_norm, SIGNATURE, {"BLOCK": 2 ** (6 + i % 6)})
    triton.compile(source, target=TARGET, options={"num_warps": 2 ** (i // 6 % 4)})


def compile_all():
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(compile_one, range(compiles)))
    return time.perf_counter() - started


# A module body as an import runs it from its .pyc: compiled once, executed many times
# (bytecode, which the interpreter interrupts at the switch interval; one long C call, such as
# compile() itself, it could not).
MODULE = compile("\n".join(
    f"class C{i}:\n    x = {{'a': {i}, 'b': [{i}] * 4}}\n"
    f"    def f(self, a, b=1):\n        return [a + b + k for k in range({i % 7})]\n"
    f"T{i} = tuple(sorted(str(k) for k in range(30)))\n" for i in range(300)), "<module>", "exec")


def work():
    started = time.perf_counter()
    for _ in range(600):
        exec(MODULE, {})
    return time.perf_counter() - started


compile_one(1000)  # Triton's own first-use costs (its key, ptxas's version), outside the timing
sys.setswitchinterval(interval_us / 1e6)
out = {}
if mode == "work":
    out["work"] = work()
elif mode == "compile":
    out["compile"] = compile_all()
else:
    done = {}
    started = time.perf_counter()
    thread = threading.Thread(target=lambda: done.update(compile=compile_all()))
    thread.start()
    out["work"] = work()
    thread.join()
    out["compile"] = done["compile"]
    out["both"] = time.perf_counter() - started
print(json.dumps(out))
'''


def _child(workdir: Path, mode: str, interval_us: int, compiles: int, threads: int) -> dict:
    cache = tempfile.mkdtemp(prefix="tc-", dir=workdir)
    env = {**os.environ, "TRITON_CACHE_DIR": cache, "PYTHONPATH": str(workdir)}
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(interval_us), str(compiles),
                           str(threads)], env=env, capture_output=True, text=True, timeout=900,
                          check=False)
    if proc.returncode != 0:
        raise SystemExit(f"switch_interval: a {mode} child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(compiles: int, threads: int, reps: int) -> dict:
    runs: dict[str, list[dict]] = {"work": [], "compile": [],
                                   **{f"both@{us}": [] for us in INTERVALS_US}}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "bench_kernel.py").write_text(KERNEL)
        for _ in range(reps):
            runs["work"].append(_child(workdir, "work", 5000, compiles, threads))
            runs["compile"].append(_child(workdir, "compile", 5000, compiles, threads))
            for us in INTERVALS_US:
                runs[f"both@{us}"].append(_child(workdir, "both", us, compiles, threads))
    med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
           for name, rs in runs.items()}
    rows = {}
    for us in INTERVALS_US:
        both = med[f"both@{us}"]
        rows[us] = {"compile_s": both["compile"], "work_s": both["work"], "both_s": both["both"],
                    "compile_vs_alone": both["compile"] / med["compile"]["compile"],
                    "work_vs_alone": both["work"] / med["work"]["work"]}
    return {"compiles": compiles, "threads": threads, "reps": reps,
            "alone": {"compile_s": med["compile"]["compile"], "work_s": med["work"]["work"]},
            "intervals": rows, "runs": runs}


def report(result: dict) -> str:
    alone = result["alone"]
    lines = [
        "# switch_interval: compiles beside a busy main thread", "",
        f"{result['compiles']} compiles on {result['threads']} threads, median of "
        f"{result['reps']} reps; {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
        f"Alone: compiles {alone['compile_s']:.2f} s, main-thread work {alone['work_s']:.2f} s.",
        "", "| switch interval | compiles s (vs alone) | main-thread work s (vs alone) | both s |",
        "| --- | --- | --- | --- |"]
    for us, row in result["intervals"].items():
        lines.append(f"| {us} us | {row['compile_s']:.2f} ({row['compile_vs_alone']:.2f}x) | "
                     f"{row['work_s']:.2f} ({row['work_vs_alone']:.2f}x) | {row['both_s']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--compiles", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    compiles, reps = (2, 1) if args.smoke else (args.compiles, args.reps)
    result = measure(compiles, args.threads, reps)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "switch_interval.json").write_text(json.dumps(result, indent=1) + "\n")
    text = report(result)
    (args.out / "switch_interval.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
