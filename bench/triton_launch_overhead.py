"""Hit-path cost (target E of issue 13): a launch-bound 1024-element add, three ways, one process.

    python bench/triton_launch_overhead.py [--launches 5000] [--reps 7]

The same @triton.jit kernel launched plainly (BLOCK fixed), through triton.autotune and through
autotune_cache.triton.autotune (four BLOCK candidates, key=["n"]; both tuned before timing, so
every timed launch is a hit). Each rep launches `--launches` times back to back and synchronises
once; the figure is host microseconds per launch, the median of the reps, with the three ways
interleaved rep by rep so drift hits all of them alike.

Prints `RESULT {json}`. Under TRITON_INTERPRET=1 (no GPU) the numbers are the interpreter's,
and triton.autotune is reported as failing ("0 active drivers"); the script still runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cpu" if INTERPRET else "cuda"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

N = 1024
CONFIGS = [triton.Config({"BLOCK": b}, num_warps=4) for b in (128, 256, 512, 1024)]


@triton.jit
def add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def sync() -> None:
    if not INTERPRET:
        torch.cuda.synchronize()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from autotune_cache.triton import autotune as our_autotune

    x, y = (torch.randn(N, device=DEVICE) for _ in range(2))
    out = torch.empty_like(x)
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK"]),)  # noqa: E731
    ways = {
        "plain_jit": lambda: add[grid](x, y, out, N, BLOCK=1024),
        "triton_autotune": (lambda k: lambda: k[grid](x, y, out, N))(
            triton.autotune(configs=CONFIGS, key=["n"])(add)),
        "ours": (lambda k: lambda: k[grid](x, y, out, N))(our_autotune(configs=CONFIGS,
                                                                      key=["n"])(add)),
    }
    result: dict = {"interpret": INTERPRET, "n": N, "launches": args.launches, "reps": args.reps,
                    "errors": {}}
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


if __name__ == "__main__":
    sys.exit(main())
