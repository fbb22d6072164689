"""How often does a fresh tuning of one shape pick a winner more than 3 % off? (scenario D)

    python3 bench/tuning_repeatability.py OUT_DIR [--tunings 6] [--shape 4096,4096,4096]

Scenario D (bench/gpu_perf.py) tunes each workload shape once per tuner and re-times every
candidate afterwards, so one run says little about how often a tuner's pick is off. Here, in
one process on one GPU, the brief's 48-config matmul is tuned `--tunings` times for one shape
by each of `--tuners`: ours (a fresh cache each time, tuned at the launch), ours in a dump run
(the key deferred and tuned on its snapshot by tune_deferred(), as a regen does), and
triton.autotune (a fresh decorator each time, so nothing is remembered); the compiles are
shared, so this is benchmark noise only. Then every distinct winner, plus the best two of a
first careful pass over all candidates, is re-timed carefully, interleaved: `--rounds` rounds,
each timing every one of them once with do_bench (warmup 10 ms, rep 25 ms, median), in a
rotated order; a config's time is its median over the rounds. Each tuning's pick is then
reported as its slowdown against the fastest. Writes OUT_DIR/tuning_repeatability.{json,md};
only meaningful on a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import triton_matmul_workload as w  # noqa: E402, I001  (first: it picks the interpreter)

from autotune_cache import configure, parse_flags  # noqa: E402
from autotune_cache.triton import tune_deferred  # noqa: E402

triton = w.triton


def _name(config) -> str:
    return str(config)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--tunings", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--shape", default="4096,4096,4096")
    parser.add_argument("--tuners", default="ours,triton",
                        help="comma-separated, of: ours (tuned at the launch), ours-deferred (a "
                             "dump run: tuned at tune_deferred() on its snapshot), triton")
    parser.add_argument("--regimes", type=float, default=0.0, metavar="GAP_S",
                        help="also time the first pass's best three with the tuner's own final "
                             "benchmark (25/100 ms) in rounds, back to back and each after GAP_S "
                             "seconds idle")
    args = parser.parse_args()
    tuners = [t for t in args.tuners.split(",") if t]
    if w.INTERPRET:
        print("tuning_repeatability: no CUDA GPU; nothing to measure", file=sys.stderr)
        return 0
    import torch

    m, n, k = (int(x) for x in args.shape.split(","))
    grid, call_args = w.operands(m, n, k, seed=m + n + k)  # triton_quality's operands
    picks: dict[str, list[str]] = {t: [] for t in tuners}
    seconds: dict[str, list[float]] = {t: [] for t in tuners}
    scratch = Path(tempfile.mkdtemp(prefix="tuning_repeatability-"))
    for i, tuner in enumerate(tuners * args.tunings):
        if tuner == "ours":
            configure(parse_flags("", env={}))  # a fresh cache: nothing remembered
        elif tuner == "ours-deferred":
            configure(parse_flags(f"--dump_autotune_results_to={scratch}/{i}.textproto", env={}))
        kernel = w.build("triton" if tuner == "triton" else "ours")
        torch.cuda.synchronize()
        started = time.perf_counter()
        kernel[grid](*call_args)
        if tuner == "ours-deferred":
            tune_deferred()
        torch.cuda.synchronize()
        seconds[tuner].append(round(time.perf_counter() - started, 3))
        picks[tuner].append(_name(kernel.best_config))
        print(f"{tuner}: {picks[tuner][-1]} ({seconds[tuner][-1]} s)", flush=True)

    def launch_of(config):
        def launch() -> None:
            w.mm[grid](*call_args, **config.all_kwargs())
        return launch

    by_name = {_name(cfg): cfg for cfg in w.CONFIGS}
    first_pass = {}
    for name, cfg in by_name.items():
        try:
            first_pass[name] = triton.testing.do_bench(launch_of(cfg), warmup=10, rep=25,
                                                       return_mode="median")
        except Exception:  # out of resources: not a candidate here
            continue
    leaders = sorted(first_pass, key=first_pass.__getitem__)[:2]
    timed = sorted(set(leaders) | {p for ps in picks.values() for p in ps})
    samples: dict[str, list[float]] = {name: [] for name in timed}
    for r in range(args.rounds):
        order = timed[r % len(timed):] + timed[:r % len(timed)]
        for name in order:
            samples[name].append(triton.testing.do_bench(launch_of(by_name[name]), warmup=10,
                                                         rep=25, return_mode="median"))
    careful = {name: statistics.median(s) for name, s in samples.items()}
    best = min(careful, key=careful.__getitem__)

    def slowdown(name: str) -> float:
        return round((careful[name] / careful[best] - 1) * 100, 2)

    regimes: dict[str, dict[str, float]] = {}
    if args.regimes > 0:
        from autotune_cache.triton.bench import GpuBenchmark

        final = GpuBenchmark()
        three = sorted(first_pass, key=first_pass.__getitem__)[:3]
        runs: dict[str, dict[str, list[float]]] = {
            regime: {name: [] for name in three} for regime in ("back_to_back", "after_idle")}
        for r in range(args.rounds):
            order = three[r % 3:] + three[:r % 3]
            for name in order:
                runs["back_to_back"][name].append(final(launch_of(by_name[name]), None, {})[0])
            for name in order:
                torch.cuda.synchronize()
                time.sleep(args.regimes)
                runs["after_idle"][name].append(final(launch_of(by_name[name]), None, {})[0])
        regimes = {regime: {name: round(statistics.median(v), 5) for name, v in by.items()}
                   for regime, by in runs.items()}
        regimes["first_pass"] = {name: round(first_pass[name], 5) for name in three}
    result = {
        "device": torch.cuda.get_device_name(), "triton": triton.__version__,
        "shape": args.shape, "tunings": args.tunings, "rounds": args.rounds,
        "careful_ms": {name: round(t, 5) for name, t in careful.items()}, "best": best,
        "first_pass_ms": {name: round(t, 5) for name, t in first_pass.items()},
        "picks": {t: [{"config": p, "slowdown_pct": slowdown(p)} for p in ps]
                  for t, ps in picks.items()},
        "tuning_seconds": seconds,
        "regimes": regimes,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tuning_repeatability.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"# tuning_repeatability: {result['device']}, Triton {triton.__version__}, shape "
             f"{args.shape}, {args.tunings} tunings each, {args.rounds} interleaved rounds", "",
             "| config | first pass ms | careful ms | slowdown | "
             + " | ".join(f"picked by {t}" for t in tuners) + " |",
             "| --- | --- | --- | --- |" + " --- |" * len(tuners)]
    for name in sorted(careful, key=careful.__getitem__):
        lines.append(f"| {name} | {first_pass[name]:.5f} | {careful[name]:.5f} | "
                     f"{slowdown(name)} % | "
                     + " | ".join(str(picks[t].count(name)) for t in tuners) + " |")
    for tuner, ps in picks.items():
        off = sum(1 for p in ps if slowdown(p) > 3)
        lines.append(f"\n{tuner}: {off} of {len(ps)} picks more than 3 % off; worst "
                     f"{max(slowdown(p) for p in ps)} %; tuning s {seconds[tuner]}")
    if regimes:
        lines += ["", f"Regimes (median ms; after_idle: {args.regimes} s idle before each):", "",
                  "| config | " + " | ".join(regimes) + " |", "| --- |" + " --- |" * len(regimes)]
        for name in regimes["first_pass"]:
            lines.append(f"| {name} | " + " | ".join(f"{regimes[r][name]:.5f}" for r in regimes)
                         + " |")
    (args.out / "tuning_repeatability.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
