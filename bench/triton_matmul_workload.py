"""The brief's Triton workloads, each run in a fresh process by bench/gpu_perf.py.

    python bench/triton_matmul_workload.py --tuner triton|triton-cached|ours|winners
                                           [--results FILE]
    python bench/triton_matmul_workload.py --quality WINNERS.json [quality options]   (D)
    python bench/triton_matmul_workload.py --launch-overhead [--launches N] [--reps N]  (E)

`--tuner`: a 48-config fp16 matmul tuned over three shapes, in one process.

Prints one line `RESULT {json}`: seconds to import, seconds of the first (tuning) call and of the
second call per shape, the winning configs, the max error against torch, and for `ours` the
cache statistics. `triton-cached` is triton.autotune(cache_results=True) (results kept in the
Triton cache dir); `winners` is no tuner at all: the plain @triton.jit kernel launched with the
winner that --results FILE records for each shape, so it compiles exactly the winners once (the
floor for a run that loads results). Every caller runs it in a fresh process, so nothing is
shared in memory.

On a GPU the kernel and candidate list are exactly shared/baselines/triton_h200_probe.py's. Under
TRITON_INTERPRET=1 (no GPU) the shapes and candidate list are trimmed, and the K loop runs a
compile-time trip count, because Triton 3.6's interpreter cannot loop over a runtime bound with
numpy >= 2.4 (triton-lang/triton#9171).

`--quality` (D: quality of tuned winners) and `--launch-overhead` (E: the hit path) are
described at `quality` and `launch_overhead` below.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

T0 = time.perf_counter()

import torch  # noqa: E402

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cpu" if INTERPRET else "cuda"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

if "ours" in sys.argv:  # imported with the kernel's module, as in a test: outside the timing
    import autotune_cache.triton  # noqa: E402, F401

if INTERPRET:
    CONFIGS = [triton.Config({"BM": bm, "BN": bn, "BK": bk}, num_warps=4, num_stages=2)
               for bm in (16, 32) for bn in (16, 32) for bk in (16, 32)]
    SHAPES = [(64, 64, 64), (32, 128, 64), (128, 32, 32)]
else:
    CONFIGS = [triton.Config({"BM": bm, "BN": bn, "BK": bk}, num_warps=w, num_stages=s)
               for bm in (64, 128) for bn in (64, 128, 256) for bk in (32, 64) for w in (4, 8)
               for s in (3, 4)]
    SHAPES = [(4096, 4096, 4096), (1024, 8192, 2048), (512, 512, 8192)]

if os.environ.get("AUTOTUNE_BENCH_SMOKE") == "1":  # CI's smoke run: the script, not the speed
    CONFIGS, SHAPES = CONFIGS[:2], SHAPES[:1]


@triton.jit
def mm(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    npn = tl.cdiv(N, BN)
    pm = pid // npn
    pn = pid % npn
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        ka = k * BK + rk
        x = tl.load(a + rm[:, None] * sam + ka[None, :] * sak,
                    mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.)
        y = tl.load(b + ka[:, None] * sbk + rn[None, :] * sbn,
                    mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.)
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.float16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.heuristics({"KT": lambda args: triton.cdiv(args["K"], args["BK"])})
@triton.jit
def mm_static_k(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, KT: tl.constexpr):
    pid = tl.program_id(0)
    npn = tl.cdiv(N, BN)
    pm = pid // npn
    pn = pid % npn
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(KT):
        ka = k * BK + rk
        x = tl.load(a + rm[:, None] * sam + ka[None, :] * sak,
                    mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.)
        y = tl.load(b + ka[:, None] * sbk + rn[None, :] * sbn,
                    mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.)
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.float16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


class Winners:
    """The plain kernel launched with the recorded winner of each shape (no tuner)."""

    def __init__(self, fn, results: str) -> None:
        from autotune_cache.formats import load_results

        self.fn = fn
        self.by_shape = {}
        for entry in load_results(results):
            problem = dict(p.split("=", 1) for p in entry.key.problem.split(","))
            cfg = entry.result.config
            params = {p.name: getattr(p, p.WhichOneof("value")) for p in cfg.params}
            options = {n: getattr(cfg, n) for n in ("num_warps", "num_stages", "num_ctas")
                       if cfg.HasField(n)}
            self.by_shape[(int(problem["M"]), int(problem["N"]), int(problem["K"]))] = (
                params, options)
        self.best_config = None

    def __getitem__(self, grid):
        def launch(*args):
            params, options = self.by_shape[tuple(args[3:6])]
            self.best_config = {**params, **options}
            return self.fn[grid](*args, **params, **options)
        return launch


def build(tuner: str, results: str | None = None):
    """The workload kernel decorated by triton.autotune or by ours (same configs and key)."""
    fn = mm_static_k if INTERPRET else mm
    configs = list(CONFIGS)
    if tuner == "triton":
        return triton.autotune(configs=configs, key=["M", "N", "K"])(fn)
    if tuner == "triton-cached":
        return triton.autotune(configs=configs, key=["M", "N", "K"], cache_results=True)(fn)
    if tuner == "winners":
        if not results:
            raise SystemExit("--tuner winners needs --results FILE")
        return Winners(fn, results)
    from autotune_cache.triton import autotune

    return autotune(configs=configs, key=["M", "N", "K"])(fn)


def sync() -> None:
    if not INTERPRET:
        torch.cuda.synchronize()


def time_ms(launch, warmup: float, rep: float) -> float:
    """One timing of `launch` in ms: do_bench's median (`warmup`, `rep` ms) on a GPU, the host
    wall clock of one launch under the interpreter."""
    if INTERPRET:
        started = time.perf_counter()
        launch()
        return (time.perf_counter() - started) * 1e3
    return triton.testing.do_bench(launch, warmup=warmup, rep=rep, return_mode="median")


def operands(m: int, n: int, k: int, seed: int) -> tuple:
    """One shape's launch: (grid, the kernel's positional arguments), with seeded fp16 operands
    a (m x k) and b (k x n) and an empty output c, the first three arguments."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    a = torch.randn(m, k, device=DEVICE, generator=gen).to(torch.float16)
    b = torch.randn(k, n, device=DEVICE, generator=gen).to(torch.float16)
    c = torch.empty(m, n, device=DEVICE, dtype=torch.float16)

    def grid(meta):
        return (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)

    return grid, (a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                  c.stride(0), c.stride(1))


def first_call(kernel, m: int, n: int, k: int) -> tuple:
    """The first call of one shape (tunes unless cached; a dump run of ours defers the tuning),
    timed on the host; what second_call needs."""
    grid, args = operands(m, n, k, seed=m * 31 + n * 7 + k)
    a, b, c = args[:3]
    sync()
    t = time.perf_counter()
    kernel[grid](*args)
    sync()
    first = time.perf_counter() - t
    err = (c.float() - a.float() @ b.float()).abs().max().item()
    return (m, n, k), grid, args, first, err


def second_call(kernel, shape: tuple, grid, args: tuple, first: float, err: float) -> dict:
    """The second call of one shape, after every shape's first call, and the config it ran."""
    t = time.perf_counter()
    kernel[grid](*args)
    sync()
    second = time.perf_counter() - t
    return {"shape": list(shape), "first_call_s": round(first, 3),
            "second_call_ms": round(second * 1e3, 3), "max_err": round(err, 4),
            "best": str(kernel.best_config)}


# ----- D (--quality): quality of tuned winners ----------------------------------------------------


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
            samples[name].append(time_ms(launches[name], warmup, rep))
    return {name: statistics.median(s) for name, s in samples.items()}


def burst_finalists(screen: dict[str, float], picked: set[str], top: int, margin: float
                    ) -> list[str]:
    """The candidates the burst regime times after idle: the best `top` of the back-to-back
    `screen`, every one within `margin` of its best, and the picks; in the screen's order."""
    ranked = sorted(screen, key=screen.__getitem__)
    best = screen[ranked[0]]
    keep = set(ranked[:top]) | {n for n in ranked if screen[n] <= best * (1 + margin)} | picked
    return [name for name in screen if name in keep]


def quality(args: argparse.Namespace) -> int:
    """D, quality of tuned winners (issue 13): re-benchmark every candidate carefully.

    --quality WINNERS.json maps a tuner's name to {"M,N,K": "<str(config)>"} (what
    `--tuner` reports as `best`). For each of the workload's shapes every
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

    Why the idle gap (H200 run 13, its logs in the git history of bench/results/): timed back
    to back over all 48 candidates, the bursts run at whatever clocks the previous candidate left,
    and each candidate always follows the same neighbour (a rotated start changes only who goes
    first). That run read BK 64 with 4 stages at 0.2114 ms, 9 % behind BK 64 with 3 stages at
    0.1939 ms, where the tuner, timing each burst after 0.1 s idle, had just read them at 0.1930 and
    0.1912 ms: the 4-stage config's back-to-back bursts ran in its neighbour's heat, above the cap
    the regime is defined as staying below. The back-to-back screen is kept in the output
    (`screen_ms`) and decides only which candidates are timed again.

    Prints `RESULT {json}`. Under TRITON_INTERPRET=1 the times are host wall clock of one launch.
    """
    winners: dict[str, dict[str, str]] = json.loads(args.quality.read_text())

    fn = mm_static_k if INTERPRET else mm
    out: dict = {"runs": args.runs, "warmup_ms": args.warmup, "rep_ms": args.rep,
                 "gap_s": args.gap, "burst_top": args.burst_top,
                 "burst_margin": args.burst_margin,
                 "sustained_warmup_ms": args.sustained_warmup,
                 "sustained_rep_ms": args.sustained_rep, "shapes": []}
    for m, n, k in SHAPES:
        grid, call_args = operands(m, n, k, seed=m + n + k)
        times: dict[str, float] = {}
        launches = {}
        for config in CONFIGS:
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


# ----- E (--launch-overhead): the hit path -------------------------------------------------------

ADD_N = 1024
ADD_CONFIGS = [triton.Config({"BLOCK": b}, num_warps=4) for b in (128, 256, 512, 1024)]


@triton.jit
def add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def launch_overhead(args: argparse.Namespace) -> int:
    """E, hit-path cost (target E of issue 13): a launch-bound 1024-element add, three ways.

    The same @triton.jit kernel launched plainly (BLOCK fixed), through triton.autotune and through
    autotune_cache.triton.autotune (four BLOCK candidates, key=["n"]; both tuned before timing, so
    every timed launch is a hit). Each rep launches `--launches` times back to back and synchronises
    once; the figure is host microseconds per launch, the median of the reps, with the three ways
    interleaved rep by rep so drift hits all of them alike.

    Prints `RESULT {json}`. Under TRITON_INTERPRET=1 (no GPU) the numbers are the interpreter's,
    and triton.autotune is reported as failing ("0 active drivers"); the script still runs.
    """
    from autotune_cache.triton import autotune as our_autotune

    x, y = (torch.randn(ADD_N, device=DEVICE) for _ in range(2))
    out = torch.empty_like(x)
    grid = lambda meta: (triton.cdiv(ADD_N, meta["BLOCK"]),)  # noqa: E731
    ways = {
        "plain_jit": lambda: add[grid](x, y, out, ADD_N, BLOCK=1024),
        "triton_autotune": (lambda k: lambda: k[grid](x, y, out, ADD_N))(
            triton.autotune(configs=ADD_CONFIGS, key=["n"])(add)),
        "ours": (lambda k: lambda: k[grid](x, y, out, ADD_N))(our_autotune(configs=ADD_CONFIGS,
                                                                      key=["n"])(add)),
    }
    result: dict = {"interpret": INTERPRET, "n": ADD_N, "launches": args.launches,
                    "reps": args.reps, "errors": {}}
    for name, launch in list(ways.items()):
        try:
            launch()  # compile / tune
            sync()
            assert torch.allclose(out, x + y)
        except Exception as e:
            result["errors"][name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            del ways[name]
    per_launch: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.reps):
        for name, launch in ways.items():
            sync()
            started = time.perf_counter()
            for _ in range(args.launches):
                launch()
            sync()
            per_launch[name].append((time.perf_counter() - started) / args.launches * 1e6)
    result["us_per_launch"] = {n: round(statistics.median(v), 3) for n, v in per_launch.items()}
    result["all_us"] = {n: [round(t, 3) for t in v] for n, v in per_launch.items()}
    base = result["us_per_launch"].get("plain_jit")
    if base:
        result["ratio_vs_plain"] = {n: round(v / base, 3)
                                    for n, v in result["us_per_launch"].items()}
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--tuner", choices=("triton", "triton-cached", "ours", "winners"))
    mode.add_argument("--quality", type=Path, metavar="WINNERS.json", help="D (see quality)")
    mode.add_argument("--launch-overhead", action="store_true", help="E (see launch_overhead)")
    parser.add_argument("--results", help="the results file `--tuner winners` launches")
    group = parser.add_argument_group("--quality")
    group.add_argument("--runs", type=int, default=5)
    group.add_argument("--warmup", type=float, default=10.0)
    group.add_argument("--rep", type=float, default=25.0)
    group.add_argument("--gap", type=float, default=0.1,
                       help="seconds idle before each burst (0: back to back)")
    group.add_argument("--burst-top", type=int, default=8)
    group.add_argument("--burst-margin", type=float, default=0.15)
    group.add_argument("--sustained-warmup", type=float, default=25.0)
    group.add_argument("--sustained-rep", type=float, default=100.0)
    group.add_argument("--sustained-top", type=int, default=6)
    group = parser.add_argument_group("--launch-overhead")
    group.add_argument("--launches", type=int, default=5000)
    group.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    if args.quality is not None:
        return quality(args)
    if args.launch_overhead:
        return launch_overhead(args)
    return workload(args)


def workload(args: argparse.Namespace) -> int:
    """`--tuner`: the matmul workload's first and second calls of every shape."""
    out: dict = {"tuner": args.tuner, "interpret": INTERPRET, "configs": len(CONFIGS),
                 "import_s": round(time.perf_counter() - T0, 3), "shapes": []}
    started = time.perf_counter()
    kernel = None
    try:
        kernel = build(args.tuner, args.results)
        firsts = [first_call(kernel, *shape) for shape in SHAPES]
        if args.tuner == "ours":
            # A dump run defers its tunings to its end (docs/triton.md): do them here, inside
            # the timed workload, so the second calls launch the winners.
            from autotune_cache.triton import tune_deferred

            tune_deferred()
        out["shapes"] = [second_call(kernel, *call) for call in firsts]
    except Exception as e:  # reported, e.g. triton.autotune under the interpreter
        out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    out["workload_s"] = round(time.perf_counter() - started, 3)
    if args.tuner == "ours":
        from autotune_cache import get_cache

        out["stats"] = get_cache().stats.as_dict()
        out["preloaded_winners"] = len(getattr(kernel, "_preloads", None) or {})
    print("RESULT " + json.dumps(out), flush=True)
    return 1 if "error" in out else 0


if __name__ == "__main__":
    sys.exit(main())
