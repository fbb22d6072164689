"""What the cache costs one test process on a suite-sized results file (issue 24; CPU).

    python bench/process_cost.py OUT_DIR [--entries 500] [--candidates 8] [--reps 15] [--smoke]
    python bench/process_cost.py OUT_DIR --switch-interval [--compiles 8] [--threads 2] [--reps 3]

A test process of a suite that uses the cache imports torch and Triton anyway; what the cache
adds is importing autotune_cache, loading the committed file, the first lookups and the work at
exit (the final dump check and the summary line). Two kinds of fresh `python -c` child, run
alternately `--reps` times each:

  baseline   import torch and triton, exit
  cache      the same, then import autotune_cache, configure it to load the file
             (--load_autotune_results_from=FILE --require_complete_autotune_results),
             look up 10 keys (each the first of its entry), exit

Reported, per cache child, what the cache itself spends, timed inside the child: import,
configure (the load), the first lookup, the nine next, and its work at exit (our atexit handler:
the summary line and the final checks; timed by two handlers of the child's own registered
around it). Their sum, median over the reps, is the per-process cost. The children's wall time
seen from the parent is reported too (median and best of each kind, and the difference of the
medians), with the baseline's spread: a difference of two medians of about 1.7 s children is
only as exact as that spread over the square root of the reps allows (on a 2-core VM, tens of
ms), so it is a cross-check, not the figure. The file is built with cpu_cache_scaling's generator
(the brief's matmul entries, as the library writes them): 500 entries x 8 candidates, about a
suite's worth (a library suite of 50 kernels at 10 shapes).

Writes OUT_DIR/process_cost.json and OUT_DIR/process_cost.md. --smoke: 50 entries, 1 rep.

`--switch-interval`: what the compile pool and a busy main thread cost each other, at Python's
switch interval and at --autotune_switch_interval_us's 200 us (decision 0034). A suite's
conftest.py imports torch and its library (seconds of Python on the main thread) while the pool
compiles the loaded winners ahead (triton/early.py); a compile thread gives up the GIL in every
file write and native call and, with the main thread busy, waits up to one switch interval to
get it back. On Triton's real compiler for sm_90 (no GPU needed: the target is given), each
trial a fresh `python` child with its own empty TRITON_CACHE_DIR, in one of three modes:

  work      the main thread's work alone: module bodies executed, as imports run them
  compile   `--compiles` distinct specializations of a layer-norm kernel on `--threads` threads
  both      the two at once (the compiles started first), at the interval under test

Reported per interval (5000 us, Python's default, and 200 us), medians over `--reps` (default 3
here): the compiles' wall time beside the busy main thread over the compiles alone, the main
thread's work beside the compiles over the work alone, and the wall time of both; the trials
alternate, so a drifting VM shares its drift between them. A last row runs `both` at 200 us
with each compile's back end in a compile process (triton/offload.py, decision 0036: the
thread runs the front end and waits on a pipe, GIL free), against the same compiles alone on
the threads. Writes OUT_DIR/switch_interval.json
and .md; with --smoke, 2 compiles and 1 rep.
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
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cpu_cache_scaling import write_file  # noqa: E402

BASELINE = "import torch, triton"

# argv: FILE, entries, the bench directory. Prints the in-process breakdown as JSON.
CACHE = r"""
import atexit, json, sys, time
import torch, triton
figures = {}
def report():  # registered first, so it runs last: after the library's exit handler
    figures["exit_ms"] = (time.perf_counter() - figures.pop("exit_start")) * 1e3
    print(json.dumps(figures), flush=True)
atexit.register(report)
t0 = time.perf_counter()
import autotune_cache
from autotune_cache import configure, parse_flags
t1 = time.perf_counter()
sys.path.insert(0, sys.argv[3])
from cpu_cache_scaling import key_of
path, n = sys.argv[1], int(sys.argv[2])
flags = f"--load_autotune_results_from={path} --require_complete_autotune_results"
cache = configure(parse_flags(flags, env={}))
t2 = time.perf_counter()
assert cache.lookup(key_of(0)) is not None
t3 = time.perf_counter()
for i in range(1, 10):
    assert cache.lookup(key_of(i * (n // 10))) is not None
t4 = time.perf_counter()
figures.update({"import_ms": (t1 - t0) * 1e3, "configure_load_ms": (t2 - t1) * 1e3,
                "first_lookup_ms": (t3 - t2) * 1e3, "next_9_lookups_ms": (t4 - t3) * 1e3})
# registered after configure() registered the library's handler, so it runs before it
atexit.register(lambda: figures.update(exit_start=time.perf_counter()))
"""


def run_child(code: str, args: list[str], pycache: str) -> tuple[float, dict]:
    """(wall seconds seen by the parent, the child's JSON line or {}). Our modules' bytecode is
    kept under `pycache`, as an installed package's is (pip compiles it at install): with
    PYTHONDONTWRITEBYTECODE set, as on some CI machines, every child would compile our sources
    again (about 27 ms), a cost no installed user pays."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])), "AUTOTUNE_FLAGS": "",
        "PYTHONPYCACHEPREFIX": pycache}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *args], env=environment,
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"child failed:\n{proc.stderr[-3000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return wall, (json.loads(lines[-1]) if lines else {})


def measure(path: Path, n: int, reps: int) -> dict:
    args = [str(path), str(n), str(ROOT / "bench")]
    pycache = str(path.parent / "pycache")
    base, ours, inside = [], [], []
    run_child(BASELINE, [], pycache)  # warm the page cache for both kinds, and the bytecode
    run_child(CACHE, args, pycache)
    for _ in range(reps):
        base.append(run_child(BASELINE, [], pycache)[0])
        wall, figures = run_child(CACHE, args, pycache)
        ours.append(wall)
        inside.append(figures)
    med = {name: round(statistics.median(r[name] for r in inside), 2) for name in inside[0]}
    totals = [sum(r.values()) for r in inside]
    return {
        "baseline_s": {"median": round(statistics.median(base), 4), "best": round(min(base), 4)},
        "cache_s": {"median": round(statistics.median(ours), 4), "best": round(min(ours), 4)},
        "cost_ms": {"inside_median": round(statistics.median(totals), 1),
                    "inside_best": round(min(totals), 1),
                    "median_difference": round((statistics.median(ours)
                                                - statistics.median(base)) * 1e3, 1),
                    "best_difference": round((min(ours) - min(base)) * 1e3, 1),
                    "baseline_stdev": round(statistics.stdev(base) * 1e3, 1)
                    if len(base) > 1 else None},
        "inside_ms_median": med,
        "runs": {"baseline_s": base, "cache_s": ours, "inside_ms": inside},
    }


def markdown(result: dict) -> str:
    m = result["measurement"]
    inside = m["inside_ms_median"]
    cost = m["cost_ms"]
    spread = (f"; the baseline's own spread (stdev) is {cost['baseline_stdev']:.0f} ms"
              if cost["baseline_stdev"] is not None else "")
    lines = [
        f"# The cache's cost per test process ({result['file']['entries']} entries x "
        f"{result['file']['candidates']} candidates, {result['file']['bytes'] / 1e6:.1f} MB text)",
        "",
        f"`{result['command']}` on {result['machine']}, {result['reps']} reps of each child.",
        "",
        f"**The cache's cost, timed inside the child: {cost['inside_median']:.1f} ms median** "
        f"(best {cost['inside_best']:.1f} ms): "
        + ", ".join(f"{k.removesuffix('_ms').replace('_', ' ')} {v:.1f} ms"
                    for k, v in inside.items()) + " (medians).",
        "",
        "Cross-check from the parent (whole children, wall time):",
        "",
        "| child | median wall | best wall |",
        "| --- | --- | --- |",
        f"| baseline: import torch, triton | {m['baseline_s']['median']:.3f} s | "
        f"{m['baseline_s']['best']:.3f} s |",
        f"| + autotune_cache: import, load, 10 lookups, exit | {m['cache_s']['median']:.3f} s | "
        f"{m['cache_s']['best']:.3f} s |",
        f"| difference | {cost['median_difference']:.0f} ms | {cost['best_difference']:.0f} ms |",
        "",
        f"The difference of the medians includes the interpreter's teardown of the library's "
        f"modules{spread}.",
    ]
    return "\n".join(lines) + "\n"


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
mode, interval_us = sys.argv[1], int(sys.argv[2])
compiles, threads, split = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:] == ["split"]
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import bench_kernel

SIGNATURE = {"X": "*fp32", "Y": "*fp32", "W": "*fp32", "stride": "i32", "N": "i32",
             "eps": "fp32", "BLOCK": "constexpr"}
TARGET = GPUTarget("cuda", 90, 32)


def compile_one(i):
    source = ASTSource(bench_kernel.layer_norm, SIGNATURE, {"BLOCK": 2 ** (6 + i % 6)})
    options = {"num_warps": 2 ** (i // 6 % 4)}
    if split:  # the back end in a compile process; the compile below is then a cache hit
        from autotune_cache.triton import offload

        assert offload.fill(source, TARGET, options)
    triton.compile(source, target=TARGET, options=options)


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


def _compile_child(workdir: Path, mode: str, interval_us: int, compiles: int, threads: int,
                   split: bool = False) -> dict:
    cache = tempfile.mkdtemp(prefix="tc-", dir=workdir)
    env = {**os.environ, "TRITON_CACHE_DIR": cache,
           "PYTHONPATH": os.pathsep.join([str(workdir), str(ROOT)])}
    env.pop("TRITON_INTERPRET", None)
    env.pop("AUTOTUNE_FLAGS", None)
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(interval_us), str(compiles),
                           str(threads), *(["split"] if split else [])], env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"process_cost --switch-interval: a {mode} child failed:\n"
                         f"{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure_switching(compiles: int, threads: int, reps: int) -> dict:
    runs: dict[str, list[dict]] = {"work": [], "compile": [],
                                   **{f"both@{us}": [] for us in INTERVALS_US},
                                   "both@200+processes": []}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "bench_kernel.py").write_text(KERNEL)
        for _ in range(reps):
            runs["work"].append(_compile_child(workdir, "work", 5000, compiles, threads))
            runs["compile"].append(_compile_child(workdir, "compile", 5000, compiles, threads))
            for us in INTERVALS_US:
                runs[f"both@{us}"].append(_compile_child(workdir, "both", us, compiles, threads))
            runs["both@200+processes"].append(
                _compile_child(workdir, "both", 200, compiles, threads, split=True))
    med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
           for name, rs in runs.items()}
    rows = {}
    for row in (*INTERVALS_US, "200+processes"):
        both = med[f"both@{row}"]
        rows[row] = {"compile_s": both["compile"], "work_s": both["work"], "both_s": both["both"],
                    "compile_vs_alone": both["compile"] / med["compile"]["compile"],
                    "work_vs_alone": both["work"] / med["work"]["work"]}
    return {"compiles": compiles, "threads": threads, "reps": reps,
            "alone": {"compile_s": med["compile"]["compile"], "work_s": med["work"]["work"]},
            "intervals": rows, "runs": runs}


def switching_markdown(result: dict) -> str:
    alone = result["alone"]
    lines = [
        "# process_cost --switch-interval: compiles beside a busy main thread", "",
        f"{result['compiles']} compiles on {result['threads']} threads, median of "
        f"{result['reps']} reps; {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
        f"Alone: compiles {alone['compile_s']:.2f} s, main-thread work {alone['work_s']:.2f} s.",
        "", "| switch interval | compiles s (vs alone) | main-thread work s (vs alone) | both s |",
        "| --- | --- | --- | --- |"]
    for us, row in result["intervals"].items():
        name = f"{us} us".replace("+processes us", " us, back end in processes")
        lines.append(f"| {name} | {row['compile_s']:.2f} ({row['compile_vs_alone']:.2f}x) | "
                     f"{row['work_s']:.2f} ({row['work_vs_alone']:.2f}x) | {row['both_s']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--entries", type=int, default=500)
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--switch-interval", action="store_true")
    parser.add_argument("--compiles", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.switch_interval:
        compiles, reps = (2, 1) if args.smoke else (args.compiles, args.reps or 3)
        switching = measure_switching(compiles, args.threads, reps)
        (args.out / "switch_interval.json").write_text(json.dumps(switching, indent=1) + "\n")
        (args.out / "switch_interval.md").write_text(switching_markdown(switching))
        print(switching_markdown(switching))
        return
    args.reps = args.reps or 15
    if args.smoke:
        args.entries, args.reps = 50, 1
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "suite.autotune.textproto"
        size = write_file(path, args.entries, args.candidates)
        result = {
            "command": "python bench/process_cost.py " + " ".join(sys.argv[1:]),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
                       f"{platform.python_version()}",
            "reps": args.reps,
            "file": {"entries": args.entries, "candidates": args.candidates, "bytes": size},
            "measurement": measure(path, args.entries, args.reps),
        }
    (args.out / "process_cost.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "process_cost.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
