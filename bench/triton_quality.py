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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--winners", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--rep", type=float, default=25.0)
    args = parser.parse_args()
    winners: dict[str, dict[str, str]] = json.loads(args.winners.read_text())

    fn = w.mm_static_k if w.INTERPRET else w.mm
    out: dict = {"runs": args.runs, "warmup_ms": args.warmup, "rep_ms": args.rep, "shapes": []}
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
        samples: dict[str, list[float]] = {name: [] for name in names}
        for r in range(args.runs):
            start = r * len(names) // args.runs
            for name in names[start:] + names[:start]:
                if w.INTERPRET:
                    started = time.perf_counter()
                    launches[name]()
                    samples[name].append((time.perf_counter() - started) * 1e3)
                else:
                    samples[name].append(triton.testing.do_bench(
                        launches[name], warmup=args.warmup, rep=args.rep, return_mode="median"))
        times.update({name: statistics.median(s) for name, s in samples.items()})
        best_name = min(times, key=times.__getitem__)
        shape = f"{m},{n},{k}"
        row: dict = {"shape": shape, "best": best_name, "best_ms": round(times[best_name], 5),
                     "picks": {}}
        for tuner, picks in winners.items():
            pick = picks.get(shape)
            if pick is None or pick not in times:
                row["picks"][tuner] = {"config": pick, "error": "not a candidate"}
                continue
            row["picks"][tuner] = {"config": pick, "ms": round(times[pick], 5),
                                   "slowdown_pct": round((times[pick] / times[best_name] - 1)
                                                         * 100, 2)}
        configs = {p.get("config") for p in row["picks"].values()}
        row["agree"] = len(configs) == 1
        out["shapes"].append(row)
        print(json.dumps(row), flush=True)
    print("RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
