"""Cold vs cached tuning of the brief's matmul workload, measured in one run, as ratios.

    python bench/triton_cold_vs_cached.py [--reps 1] [--out results.json]

Every measurement is a fresh process (bench/triton_matmul_workload.py) with an empty Triton
compile cache:

  triton      triton.autotune, cold (under TRITON_INTERPRET=1 it fails: "0 active drivers")
  ours-cold   autotune_cache.triton.autotune with no results, dumping them to a file
  ours-cached the same, loading that file with --require_complete_autotune_results

Wall time is the whole process (import included); `workload` is the in-process time of the
three shapes' first and second calls. Ratios compare medians of the same run only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "bench" / "triton_matmul_workload.py"
CHILD_TIMEOUT_S = 300


def run_workload(tuner: str, flags: str, triton_cache: Path, log: Path,
                 extra_env: dict[str, str] | None = None) -> dict:
    """One fresh workload process; returns its RESULT plus wall time and exit status."""
    env = {k: v for k, v in os.environ.items() if k not in ("AUTOTUNE_FLAGS", "TRITON_CACHE_DIR")}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
               TRITON_CACHE_DIR=str(triton_cache), AUTOTUNE_FLAGS=flags, PYTHONUNBUFFERED="1")
    env.update(extra_env or {})
    cmd = [sys.executable, str(WORKLOAD), "--tuner", tuner]
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=CHILD_TIMEOUT_S)
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as e:
        rc, stdout = 124, str(e.stdout or "")
        stderr = str(e.stderr or "") + f"\n[timed out after {CHILD_TIMEOUT_S} s]"
    wall = time.perf_counter() - started
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"$ {' '.join(cmd)}\nAUTOTUNE_FLAGS={flags}\nTRITON_CACHE_DIR={triton_cache}\n"
                   f"rc={rc} wall={wall:.1f}s\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n")
    result: dict = {"rc": rc, "wall_s": round(wall, 2), "log": str(log)}
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            result.update(json.loads(line[len("RESULT "):]))
    if rc != 0 and "error" not in result:
        result["error"] = (stderr.strip().splitlines() or [f"exit {rc}"])[-1]
    return result


def measure_three_ways(work: Path, reps: int = 1, results_file: Path | None = None,
                       extra_env: dict[str, str] | None = None) -> dict:
    """triton.autotune cold, ours cold (dumping `results_file`), ours loading it; each `reps`
    times, every process with a fresh, empty TRITON_CACHE_DIR."""
    results_file = results_file or work / "matmul_workload.autotune.textproto"
    runs: dict[str, list[dict]] = {"triton": [], "ours-cold": [], "ours-cached": []}
    for rep in range(reps):
        for label in runs:
            if label == "ours-cached" and not results_file.exists():
                continue
            tuner = "triton" if label == "triton" else "ours"
            if label == "ours-cold":
                results_file.unlink(missing_ok=True)
                flags = f"--dump_autotune_results_to={results_file}"
            elif label == "ours-cached":
                flags = (f"--load_autotune_results_from={results_file} "
                         "--require_complete_autotune_results")
            else:
                flags = ""
            cache = Path(tempfile.mkdtemp(prefix=f"tc-{label}-{rep}-", dir=work))
            result = run_workload(tuner, flags, cache, work / "logs" / f"{label}-{rep}.log",
                                  extra_env)
            runs[label].append(result)
            status = result.get("error") or "ok"
            print(f"  {label:<12} rep {rep}: wall {result['wall_s']:.1f} s, workload "
                  f"{result.get('workload_s', float('nan')):.1f} s ({status})", flush=True)
    summary: dict = {"runs": runs, "median_wall_s": {}, "median_workload_s": {}}
    for label, results in runs.items():
        ok = [r for r in results if "error" not in r]
        if ok:
            summary["median_wall_s"][label] = statistics.median(r["wall_s"] for r in ok)
            summary["median_workload_s"][label] = statistics.median(r["workload_s"] for r in ok)
    walls = summary["median_wall_s"]
    ratios = {}
    if "triton" in walls and "ours-cold" in walls:
        ratios["ours-cold / triton (wall)"] = round(walls["ours-cold"] / walls["triton"], 3)
    if "ours-cold" in walls and "ours-cached" in walls:
        ratios["ours-cached / ours-cold (wall)"] = round(walls["ours-cached"] / walls["ours-cold"],
                                                         3)
    if "triton" in walls and "ours-cached" in walls:
        ratios["ours-cached / triton (wall)"] = round(walls["ours-cached"] / walls["triton"], 3)
    summary["ratios"] = ratios
    return summary


def format_summary(summary: dict) -> str:
    """Human-readable table of the medians and ratios."""
    lines = [f"{'':<12} {'wall s':>8} {'workload s':>11}  notes"]
    for label, results in summary["runs"].items():
        if not results:
            continue
        notes = "; ".join(sorted({r["error"] for r in results if "error" in r})) or ""
        stats = results[-1].get("stats")
        if stats:
            notes = (f"{stats['hits']} hits, {stats['misses']} misses, "
                     f"{stats['benchmarks']} benchmarks") + (f"; {notes}" if notes else "")
        wall = summary["median_wall_s"].get(label)
        work = summary["median_workload_s"].get(label)
        lines.append(f"{label:<12} {wall if wall is not None else float('nan'):>8.1f} "
                     f"{work if work is not None else float('nan'):>11.1f}  {notes}")
    for name, value in summary["ratios"].items():
        lines.append(f"ratio {name}: {value}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--out", type=Path, help="write the full results as JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="triton-bench-") as tmp:
        summary = measure_three_ways(Path(tmp), reps=args.reps)
        print(format_summary(summary))
        if args.out:
            args.out.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return 0 if "ours-cached" in summary["median_wall_s"] else 1


if __name__ == "__main__":
    sys.exit(main())
