"""What the cache costs one test process on a suite-sized results file (issue 24; CPU).

    python bench/process_cost.py OUT_DIR [--entries 500] [--candidates 8] [--reps 15] [--smoke]

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--entries", type=int, default=500)
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.entries, args.reps = 50, 1
    args.out.mkdir(parents=True, exist_ok=True)
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
