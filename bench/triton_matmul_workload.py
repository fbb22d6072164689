"""The brief's Triton workload: a 48-config fp16 matmul tuned over three shapes, in one process.

    python bench/triton_matmul_workload.py --tuner triton|triton-cached|ours|winners
                                           [--results FILE]

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
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuner", choices=("triton", "triton-cached", "ours", "winners"),
                        required=True)
    parser.add_argument("--results", help="the results file `--tuner winners` launches")
    args = parser.parse_args()
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
