"""Quality of tuned winners (target D of issue 13): re-benchmark every candidate carefully.

    python bench/triton_quality.py --winners WINNERS.json [--runs 5] [--warmup 10] [--rep 25]

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

Two regimes (issue 38): `--warmup`/`--rep` (25 ms by default: short bursts, below the GPU's
power cap, as a test suite runs kernels) over every candidate, then `--sustained-warmup`/
`--sustained-rep` (100 ms: at the cap, as training runs them) over the best `--sustained-top`
of the first regime plus every tuner's pick, the same way. A pick's D is its worse slowdown of
the two.

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

triton = w.triton


def interleaved(launches: dict, names: list[str], runs: int, warmup: float, rep: float
                ) -> dict[str, float]:
    """Each of `names` timed `runs` times, in interleaved rounds: each round times every config
    once, from a rotated start, so a drift of the device over the sweep (clocks, power) is
    spread over all configs instead of favouring those timed in its fast stretch. The median."""
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(runs):
        start = r * len(names) // runs
        for name in names[start:] + names[:start]:
            if w.INTERPRET:
                started = time.perf_counter()
                launches[name]()
                samples[name].append((time.perf_counter() - started) * 1e3)
            else:
                samples[name].append(triton.testing.do_bench(
                    launches[name], warmup=warmup, rep=rep, return_mode="median"))
    return {name: statistics.median(s) for name, s in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--winners", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--rep", type=float, default=25.0)
    parser.add_argument("--sustained-warmup", type=float, default=25.0)
    parser.add_argument("--sustained-rep", type=float, default=100.0)
    parser.add_argument("--sustained-top", type=int, default=6)
    args = parser.parse_args()
    winners: dict[str, dict[str, str]] = json.loads(args.winners.read_text())

    fn = w.mm_static_k if w.INTERPRET else w.mm
    out: dict = {"runs": args.runs, "warmup_ms": args.warmup, "rep_ms": args.rep,
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
        # Interleaved: each round times every config once, from a rotated start, so a drift of
        # the device over the sweep (clocks, power) is spread over all configs instead of
        # favouring those timed in its fast stretch.
        names = list(launches)
        times.update(interleaved(launches, names, args.runs, args.warmup, args.rep))
        best_name = min(times, key=times.__getitem__)
        shape = f"{m},{n},{k}"
        picked = {p for p in (picks.get(shape) for picks in winners.values()) if p in launches}
        top = sorted(names, key=times.__getitem__)[:args.sustained_top]
        chosen = [name for name in names if name in picked or name in top]
        sustained = interleaved(launches, chosen, args.runs, args.sustained_warmup,
                                args.sustained_rep)
        best_sustained = min(sustained, key=sustained.__getitem__)
        row: dict = {"shape": shape, "best": best_name, "best_ms": round(times[best_name], 5),
                     "best_sustained": best_sustained,
                     "best_sustained_ms": round(sustained[best_sustained], 5), "picks": {}}
        for tuner, picks in winners.items():
            pick = picks.get(shape)
            if pick is None or pick not in times:
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
