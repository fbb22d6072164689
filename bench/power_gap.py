"""How long the GPU must idle after a benchmark before a short burst reads as rested.

    python3 bench/power_gap.py OUT_DIR [--reps 7] [--gaps 0,0.01,0.025,0.05,0.1,0.2,0.5]
                               [--heat sustained|burst] [--smoke]

The decision among tied leaders (autotune_cache/triton/bench.py, SHORT_GAP_S) times each burst
after an idle gap, so that it runs below the power cap as a test's launches do, not in the heat
of the configured 100 ms benchmarks that precede it. This measures what the gap must be: the
4096^3 workload's two leading configs (BM 128, BN 256, BK 64, 8 warps, 3 and 4 stages;
bench/triton_matmul_workload.py), each rep heating the GPU with one sustained benchmark (warmup
25 ms, rep 100 ms), idling `gap` seconds, then timing one burst (warmup 10 ms, rep 25 ms); the
gaps in a rotated order, the two configs alternating which goes first; the median per gap.
`--heat burst` heats with one burst instead: what precedes every burst of the decision but its
first. Writes OUT_DIR/power_gap.json and .md. `--smoke`: the interpreter, a tiny shape, host wall
clock, two gaps (CI checks that the script runs, never its numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

if "--smoke" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parent))

import triton_matmul_workload as w  # noqa: E402

# What heats the GPU before the gap: (warmup ms, rep ms).
HEATS = {"sustained": (25, 100), "burst": (10, 25)}
LEADERS = {"3 stages": {"BM": 128, "BN": 256, "BK": 64, "num_warps": 8, "num_stages": 3},
           "4 stages": {"BM": 128, "BN": 256, "BK": 64, "num_warps": 8, "num_stages": 4}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--gaps", default="0,0.01,0.025,0.05,0.1,0.2,0.5")
    parser.add_argument("--heat", choices=sorted(HEATS), default="sustained",
                        help="the benchmark before the gap: the configured one, or a burst")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    heat = HEATS[args.heat]
    gaps = [0.0, 0.01] if args.smoke else [float(g) for g in args.gaps.split(",")]
    reps = 1 if args.smoke else args.reps
    if w.INTERPRET:
        shape, leaders = (32, 32, 32), {"small": {"BM": 16, "BN": 16, "BK": 16, "num_warps": 4,
                                                  "num_stages": 2}}
        fn = w.mm_static_k
    else:
        shape, leaders, fn = (4096, 4096, 4096), LEADERS, w.mm
    grid, call_args = w.operands(*shape, seed=sum(shape))
    launches = {name: (lambda kw=kw: fn[grid](*call_args, **kw)) for name, kw in leaders.items()}

    for launch in launches.values():
        launch()
    samples = {name: {g: [] for g in gaps} for name in launches}
    for rep in range(reps):
        for i in range(len(gaps)):
            gap = gaps[(i + rep) % len(gaps)]
            order = list(launches) if rep % 2 == 0 else list(launches)[::-1]
            for name in order:
                w.time_ms(launches[name], *heat)  # the heat the benchmark before leaves
                time.sleep(gap)
                samples[name][gap].append(w.time_ms(launches[name], 10, 25))
    medians = {name: {str(g): round(statistics.median(v), 5) for g, v in by_gap.items()}
               for name, by_gap in samples.items()}
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"shape": list(shape), "reps": reps, "interpret": w.INTERPRET, "heat": args.heat,
              "heat_ms": list(heat), "medians_ms": medians}
    (args.out / "power_gap.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["| gap s | " + " | ".join(medians) + " |", "| --- |" + " --- |" * len(medians)]
    rested = {name: by_gap[str(gaps[-1])] for name, by_gap in medians.items()}
    for g in gaps:
        lines.append(f"| {g:g} | " + " | ".join(
            f"{medians[n][str(g)]:.5f} ({(medians[n][str(g)] / rested[n] - 1) * 100:+.1f} %)"
            for n in medians) + " |")
    (args.out / "power_gap.md").write_text("\n".join(lines) + "\n")
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
