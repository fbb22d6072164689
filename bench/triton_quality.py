"""Quality of tuned winners (target D of issue 13): re-benchmark every candidate carefully.

    python bench/triton_quality.py --winners WINNERS.json [--runs 5] [--warmup 10] [--rep 25]
                                   [--gap 0.1] [--burst-top 8] [--burst-margin 0.15]

WINNERS.json maps a tuner's name to {"M,N,K": "<str(config)>"} (what
bench/triton_matmul_workload.py reports as `best`). For each of the workload's shapes every
candidate config is timed `--runs` times with triton.testing.do_bench (median mode, `--warmup`
and `--rep` ms each), its time being the median of those runs; then each tuner's pick is
compared with the fastest: its slowdown in percent, and whether the tuners agree. Run it with
the compile cache the tuning runs left, so nothing here compiles twice.

The runs are interleaved: each round times every config once, from a rotated start. Until the
seventh session of issue 24 each config's runs were timed back to back, which let the device's
drift over the sweep decide between configs 1-2 % apart: one H200 run read the 4096^3 shape's
two leaders 7.5 % apart, where bench/tuning_repeatability.py, timing them interleaved, put them
0.7-1.6 % apart.

Two regimes (issue 38). **Bursts** (`--warmup`/`--rep`, 10/25 ms): short launches below the
GPU's power cap, as a test suite runs kernels. Every candidate is first screened once, back to
back; then the best `--burst-top` of the screen, every candidate within `--burst-margin` of its
best and every tuner's pick are timed in `--runs` interleaved rounds, **each burst after
`--gap` seconds idle**. **Sustained** (`--sustained-warmup`/`--sustained-rep`, 25/100 ms: at the
cap, as training runs them): the best `--sustained-top` of the bursts plus every pick, in
interleaved rounds, back to back. A pick's D is its worse slowdown of the two; the best of each
regime is the fastest that regime timed.

Why the idle gap (H200 run 13, `bench/results/gpu_perf_h200_run13_decide_logs.txt`): timed back
to back over all 48 candidates, the bursts run at whatever clocks the previous candidate left,
and each candidate always follows the same neighbour (a rotated start changes only who goes
first). That run read BK 64 with 4 stages at 0.2114 ms, 9 % behind BK 64 with 3 stages at
0.1939 ms, where the tuner, timing each burst after 0.1 s idle, had just read them at 0.1930 and
0.1912 ms: the 4-stage config's back-to-back bursts ran in its neighbour's heat, above the cap
the regime is defined as staying below. The back-to-back screen is kept in the output
(`screen_ms`) and decides only which candidates are timed again.

Prints `RESULT {json}`. Under TRITON_INTERPRET=1 the times are host wall clock of one launch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import triton_matmul_workload as w  # noqa: E402, I001  (first: it picks the interpreter)


def interleaved(launches: dict, names: list[str], runs: int, warmup: float, rep: float,
                gap: float = 0.0) -> dict[str, float]:
    """Each of `names` timed `runs` times, in interleaved rounds: each round times every config
    once, from a rotated start, so a drift of the device over the sweep (clocks, power) is
    spread over all configs instead of favouring those timed in its fast stretch. With `gap`,
    each timing starts after that many seconds idle. The median."""
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(runs):
        start = r * len(names) // runs
        for name in names[start:] + names[:start]:
            if gap:
                time.sleep(gap)
            samples[name].append(w.time_ms(launches[name], warmup, rep))
    return {name: statistics.median(s) for name, s in samples.items()}


def burst_finalists(screen: dict[str, float], picked: set[str], top: int, margin: float
                    ) -> list[str]:
    """The candidates the burst regime times after idle: the best `top` of the back-to-back
    `screen`, every one within `margin` of its best, and the picks; in the screen's order."""
    ranked = sorted(screen, key=screen.__getitem__)
    best = screen[ranked[0]]
    keep = set(ranked[:top]) | {n for n in ranked if screen[n] <= best * (1 + margin)} | picked
    return [name for name in screen if name in keep]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--winners", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--rep", type=float, default=25.0)
    parser.add_argument("--gap", type=float, default=0.1,
                        help="seconds idle before each burst (0: back to back)")
    parser.add_argument("--burst-top", type=int, default=8)
    parser.add_argument("--burst-margin", type=float, default=0.15)
    parser.add_argument("--sustained-warmup", type=float, default=25.0)
    parser.add_argument("--sustained-rep", type=float, default=100.0)
    parser.add_argument("--sustained-top", type=int, default=6)
    args = parser.parse_args()
    winners: dict[str, dict[str, str]] = json.loads(args.winners.read_text())

    fn = w.mm_static_k if w.INTERPRET else w.mm
    out: dict = {"runs": args.runs, "warmup_ms": args.warmup, "rep_ms": args.rep,
                 "gap_s": args.gap, "burst_top": args.burst_top,
                 "burst_margin": args.burst_margin,
                 "sustained_warmup_ms": args.sustained_warmup,
                 "sustained_rep_ms": args.sustained_rep, "shapes": []}
    for m, n, k in w.SHAPES:
        grid, call_args = w.operands(m, n, k, seed=m + n + k)
        times: dict[str, float] = {}
        launches = {}
        for config in w.CONFIGS:
            def launch(config=config, grid=grid, call_args=call_args) -> None:
                fn[grid](*call_args, **config.all_kwargs())
            try:
                launch()
                launches[str(config)] = launch
            except Exception as e:  # out of resources: not a candidate on this GPU
                times[str(config)] = float("inf")
                print(f"{config}: {type(e).__name__}: {str(e)[-300:]}", file=sys.stderr)
        names = list(launches)
        shape = f"{m},{n},{k}"
        picked = {p for p in (picks.get(shape) for picks in winners.values()) if p in launches}
        screen = interleaved(launches, names, 1, args.warmup, args.rep)
        finalists = burst_finalists(screen, picked, args.burst_top, args.burst_margin)
        times.update(interleaved(launches, finalists, args.runs, args.warmup, args.rep,
                                 gap=args.gap))
        best_name = min(times, key=times.__getitem__)
        top = sorted(finalists, key=times.__getitem__)[:args.sustained_top]
        chosen = [name for name in finalists if name in picked or name in top]
        sustained = interleaved(launches, chosen, args.runs, args.sustained_warmup,
                                args.sustained_rep)
        best_sustained = min(sustained, key=sustained.__getitem__)
        row: dict = {"shape": shape, "best": best_name, "best_ms": round(times[best_name], 5),
                     "screen_ms": {name: round(t, 5) for name, t in screen.items()},
                     "bursts_ms": {name: round(times[name], 5) for name in finalists},
                     "best_sustained": best_sustained,
                     "best_sustained_ms": round(sustained[best_sustained], 5), "picks": {}}
        for tuner, picks in winners.items():
            pick = picks.get(shape)
            if pick is None or pick not in launches:
                row["picks"][tuner] = {"config": pick, "error": "not a candidate"}
                continue
            short_pct = (times[pick] / times[best_name] - 1) * 100
            long_pct = (sustained[pick] / sustained[best_sustained] - 1) * 100
            row["picks"][tuner] = {"config": pick, "ms": round(times[pick], 5),
                                   "slowdown_pct": round(short_pct, 2),
                                   "sustained_ms": round(sustained[pick], 5),
                                   "slowdown_sustained_pct": round(long_pct, 2),
                                   "worst_pct": round(max(short_pct, long_pct), 2)}
        configs = {p.get("config") for p in row["picks"].values()}
        row["agree"] = len(configs) == 1
        out["shapes"].append(row)
        print(json.dumps(row), flush=True)
    print("RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
