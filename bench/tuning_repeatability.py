"""R: how often do fresh tunings of one shape pick the same config, and how far off? (issue 38)

    python3 bench/tuning_repeatability.py OUT_DIR [--tunings 6] [--shape 4096,4096,4096 | all]

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
reported as its slowdown against the fastest. R (issue 38) is each tuner's agreement: how many
of its tunings picked its most frequent pick (target for ours: 5 of 6, on every shape).

`--shape all` measures every shape of the workload, one after the other (bench/gpu_perf.py's
scenario R). Writes OUT_DIR/tuning_repeatability.{json,md} and prints `RESULT {json}` (per
shape: each tuner's agreement and worst slowdown). Only meaningful on a GPU; under the
interpreter (CI's smoke run of gpu_perf) the tunings run on the trimmed workload with the
interpreter's timing, triton.autotune's are reported as failed (it needs a driver), and nothing
is re-timed (no CUDA events): picks and agreement only.
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


def _launch_of(grid, call_args, config):
    def launch() -> None:
        w.mm[grid](*call_args, **config.all_kwargs())
    return launch


def tune_repeatedly(shape: tuple[int, int, int], launch: tuple, tuners: list[str],
                    tunings: int, scratch: Path
                    ) -> tuple[dict[str, list[str]], dict[str, list[float]], dict[str, str]]:
    """Each tuner's picks over `tunings` fresh tunings of `shape`, their seconds, and the
    error of a tuner that cannot tune here (triton.autotune under the interpreter)."""
    grid, call_args = launch
    picks: dict[str, list[str]] = {t: [] for t in tuners}
    seconds: dict[str, list[float]] = {t: [] for t in tuners}
    errors: dict[str, str] = {}
    for i, tuner in enumerate(tuners * tunings):
        if tuner in errors:
            continue
        if tuner == "ours":
            configure(parse_flags("", env={}))  # a fresh cache: nothing remembered
        elif tuner == "ours-deferred":
            configure(parse_flags(f"--dump_autotune_results_to={scratch}/{i}.textproto", env={}))
        kernel = w.build("triton" if tuner == "triton" else "ours")
        w.sync()
        started = time.perf_counter()
        try:
            kernel[grid](*call_args)
            if tuner == "ours-deferred":
                tune_deferred()
        except Exception as e:  # noqa: BLE001 - reported, e.g. Triton's tuner without a driver
            errors[tuner] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            continue
        w.sync()
        seconds[tuner].append(round(time.perf_counter() - started, 3))
        picks[tuner].append(_name(kernel.best_config))
        print(f"{shape} {tuner}: {picks[tuner][-1]} ({seconds[tuner][-1]} s)", flush=True)
    return picks, seconds, errors


def retime(launch: tuple, picks: dict[str, list[str]], rounds: int,
           regimes_gap: float) -> dict:
    """Every distinct pick and the best two of a first pass over all candidates, re-timed in
    `rounds` interleaved rounds with a rotated order (and, with `regimes_gap`, the best three
    with the tuner's own final benchmark, back to back and after that idle); GPU only."""
    import torch

    grid, call_args = launch
    by_name = {_name(cfg): cfg for cfg in w.CONFIGS}
    first_pass = {}
    for name, cfg in by_name.items():
        try:
            first_pass[name] = triton.testing.do_bench(_launch_of(grid, call_args, cfg),
                                                       warmup=10, rep=25, return_mode="median")
        except Exception:  # noqa: BLE001 - out of resources: not a candidate here
            continue
    leaders = sorted(first_pass, key=first_pass.__getitem__)[:2]
    timed = sorted(set(leaders) | {p for ps in picks.values() for p in ps})
    samples: dict[str, list[float]] = {name: [] for name in timed}
    for r in range(rounds):
        order = timed[r % len(timed):] + timed[:r % len(timed)]
        for name in order:
            samples[name].append(triton.testing.do_bench(
                _launch_of(grid, call_args, by_name[name]), warmup=10, rep=25,
                return_mode="median"))
    careful = {name: statistics.median(s) for name, s in samples.items()}
    regimes: dict[str, dict[str, float]] = {}
    if regimes_gap > 0:
        from autotune_cache.triton.bench import GpuBenchmark

        final = GpuBenchmark()
        three = sorted(first_pass, key=first_pass.__getitem__)[:3]
        runs: dict[str, dict[str, list[float]]] = {
            regime: {name: [] for name in three} for regime in ("back_to_back", "after_idle")}
        for r in range(rounds):
            order = three[r % 3:] + three[:r % 3]
            for name in order:
                runs["back_to_back"][name].append(
                    final(_launch_of(grid, call_args, by_name[name]), None, {})[0])
            for name in order:
                torch.cuda.synchronize()
                time.sleep(regimes_gap)
                runs["after_idle"][name].append(
                    final(_launch_of(grid, call_args, by_name[name]), None, {})[0])
        regimes = {regime: {name: round(statistics.median(v), 5) for name, v in by.items()}
                   for regime, by in runs.items()}
        regimes["first_pass"] = {name: round(first_pass[name], 5) for name in three}
    return {"careful_ms": {name: round(t, 5) for name, t in careful.items()},
            "first_pass_ms": {name: round(t, 5) for name, t in first_pass.items()},
            "regimes": regimes}


def agreement(picks: list[str]) -> int:
    """How many of the tunings picked the most frequent pick (R)."""
    return max((picks.count(p) for p in set(picks)), default=0)


def measure(shape: tuple[int, int, int], args: argparse.Namespace, tuners: list[str],
            scratch: Path) -> dict:
    launch = w.operands(*shape, seed=sum(shape))  # (grid, arguments): --quality's operands
    picks, seconds, errors = tune_repeatedly(shape, launch, tuners, args.tunings, scratch)
    timed = {} if w.INTERPRET else retime(launch, picks, args.rounds, args.regimes)
    careful = timed.get("careful_ms", {})
    best = min(careful, key=careful.__getitem__) if careful else None

    def slowdown(name: str) -> float | None:
        return round((careful[name] / careful[best] - 1) * 100, 2) if best else None

    return {
        "shape": list(shape), "best": best, **timed,
        "picks": {t: [{"config": p, "slowdown_pct": slowdown(p)} for p in ps]
                  for t, ps in picks.items()},
        "agreement": {t: agreement(ps) for t, ps in picks.items() if t not in errors},
        "worst_pct": {t: max((slowdown(p) or 0.0 for p in ps), default=None)
                      for t, ps in picks.items() if t not in errors and best},
        "tuning_seconds": seconds, "errors": errors,
    }


def markdown(result: dict, tuners: list[str]) -> str:
    lines = [f"# tuning_repeatability: {result['device']}, Triton {result['triton']}, "
             f"{result['tunings']} tunings each, {result['rounds']} interleaved rounds"]
    for one in result["shapes"]:
        careful, first = one.get("careful_ms", {}), one.get("first_pass_ms", {})
        lines += ["", f"## shape {','.join(map(str, one['shape']))}", ""]
        counts = {t: [p["config"] for p in one["picks"][t]] for t in tuners}
        names = sorted(careful, key=careful.__getitem__) if careful else \
            sorted({p for ps in counts.values() for p in ps})
        lines += ["| config | first pass ms | careful ms | slowdown | "
                  + " | ".join(f"picked by {t}" for t in tuners) + " |",
                  "| --- | --- | --- | --- |" + " --- |" * len(tuners)]
        slow = {p["config"]: p["slowdown_pct"] for ps in one["picks"].values() for p in ps}
        for name in names:
            ms = (f"{first[name]:.5f} | {careful[name]:.5f}" if name in careful
                  else "— | —")
            pct = slow.get(name)
            if pct is None and one.get("best") and name in careful:
                pct = round((careful[name] / careful[one["best"]] - 1) * 100, 2)
            lines.append(f"| {name} | {ms} | {'—' if pct is None else f'{pct} %'} | "
                         + " | ".join(str(counts[t].count(name)) for t in tuners) + " |")
        for tuner in tuners:
            if tuner in one["errors"]:
                lines.append(f"\n{tuner}: could not tune here: {one['errors'][tuner]}")
                continue
            worst = one["worst_pct"].get(tuner)
            lines.append(f"\n{tuner}: the same pick {one['agreement'][tuner]} of "
                         f"{len(counts[tuner])} times (R); worst pick "
                         f"{'not re-timed' if worst is None else f'{worst} %'} off; tuning s "
                         f"{one['tuning_seconds'][tuner]}")
        regimes = one.get("regimes") or {}
        if regimes:
            lines += ["", f"Regimes (median ms; after_idle: {result['regimes_gap']} s idle "
                      "before each):", "", "| config | " + " | ".join(regimes) + " |",
                      "| --- |" + " --- |" * len(regimes)]
            for name in regimes["first_pass"]:
                lines.append(f"| {name} | " + " | ".join(f"{regimes[r][name]:.5f}"
                                                          for r in regimes) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--tunings", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--shape", default="4096,4096,4096",
                        help="M,N,K, or `all`: every shape of the workload")
    parser.add_argument("--tuners", default="ours,triton",
                        help="comma-separated, of: ours (tuned at the launch), ours-deferred (a "
                             "dump run: tuned at tune_deferred() on its snapshot), triton")
    parser.add_argument("--regimes", type=float, default=0.0, metavar="GAP_S",
                        help="also time the first pass's best three with the tuner's own final "
                             "benchmark (25/100 ms) in rounds, back to back and each after GAP_S "
                             "seconds idle")
    args = parser.parse_args()
    tuners = [t for t in args.tuners.split(",") if t]
    shapes = (list(w.SHAPES) if args.shape == "all"
              else [tuple(int(x) for x in args.shape.split(","))])
    scratch = Path(tempfile.mkdtemp(prefix="tuning_repeatability-"))
    import torch

    result = {
        "device": "CPU (Triton interpreter)" if w.INTERPRET else torch.cuda.get_device_name(),
        "triton": triton.__version__, "tunings": args.tunings, "rounds": args.rounds,
        "regimes_gap": args.regimes,
        "shapes": [measure(shape, args, tuners, scratch) for shape in shapes]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tuning_repeatability.json").write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result, tuners)
    (args.out / "tuning_repeatability.md").write_text(text)
    print(text)
    print("RESULT " + json.dumps({"shapes": [
        {k: one[k] for k in ("shape", "agreement", "worst_pct", "errors")}
        | {"picks": {t: len(ps) for t, ps in one["picks"].items()}}
        for one in result["shapes"]]}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
