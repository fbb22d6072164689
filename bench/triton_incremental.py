"""Incremental re-tune after a candidate-list edit: ours against triton.autotune, same run.

    python bench/triton_incremental.py OUT_DIR

A kernel author adds candidates to a tuned kernel (bench/triton_matmul_workload.py's
EXTRA_CONFIGS appended to the brief's matmul list). Triton re-tunes every candidate from scratch
(triton-lang/triton#9822); ours loads the results of the original list, benchmarks only the new
candidates and compares them with the recorded timings (same device and toolchain). Three fresh
processes, each with an empty Triton compile cache:

  1. ours, original list, dumping OUT_DIR/original.autotune.textproto (the committed cache);
  2. ours, extended list, loading that file (the incremental re-tune);
  3. triton.autotune, extended list (its re-tune; fails under the interpreter: "0 active drivers").

Prints a table and `RESULT {json}`; the figure is run 2's wall time against run 3's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "bench" / "triton_matmul_workload.py"


def run(name: str, tuner: str, out_dir: Path, flags: str = "", extra: bool = False) -> dict:
    """One workload process with its own empty compile cache; returns its RESULT and wall time."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AUTOTUNE_FLAGS": flags,
           "TRITON_CACHE_DIR": tempfile.mkdtemp(prefix=f"triton-{name}-", dir=out_dir)}
    cmd = [sys.executable, str(WORKLOAD), "--tuner", tuner] + (["--extra-configs"] if extra else [])
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    (out_dir / f"{name}.log").write_text(proc.stdout + proc.stderr)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    result = json.loads(line[len("RESULT "):]) if line else {"error": f"rc={proc.returncode}"}
    result["wall_s"] = round(wall, 2)
    return result


def main() -> int:
    out_dir = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="incr-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    cache = out_dir / "original.autotune.textproto"
    runs = {
        "ours-original": run("ours-original", "ours", out_dir,
                             f"--dump_autotune_results_to={cache}"),
        "ours-incremental": run("ours-incremental", "ours", out_dir,
                                f"--load_autotune_results_from={cache}", extra=True),
        "triton-retune": run("triton-retune", "triton", out_dir, extra=True),
    }
    print(f"{'run':18} {'configs':>7} {'wall s':>7} {'workload s':>10} {'benchmarks':>10}  notes")
    for name, r in runs.items():
        stats = r.get("stats", {})
        print(f"{name:18} {r.get('configs', '-'):>7} {r['wall_s']:>7} "
              f"{r.get('workload_s', '-'):>10} {stats.get('benchmarks', '-'):>10}  "
              f"{r.get('error', '')}")
    ours, triton = runs["ours-incremental"], runs["triton-retune"]
    summary = {"runs": runs}
    if "error" not in triton and "error" not in ours:
        summary["ratio_wall"] = round(ours["wall_s"] / triton["wall_s"], 3)
        summary["ratio_workload"] = round(ours["workload_s"] / triton["workload_s"], 3)
        print(f"ratio ours-incremental / triton-retune: wall {summary['ratio_wall']}, "
              f"workload {summary['ratio_workload']}")
    (out_dir / "incremental.json").write_text(json.dumps(summary, indent=2) + "\n")
    print("RESULT " + json.dumps(summary))
    return 0 if "error" not in ours else 1


if __name__ == "__main__":
    sys.exit(main())
