"""What a hit costs beyond a plain launch, piece by piece (target E of issue 13), on a GPU.

    python3 bench/launch_options_cost.py

The 1024-element add of bench/triton_launch_overhead.py, tuned by autotune_cache.triton.autotune,
then three ways launched 5,000 times a rep, 15 reps interleaved (µs per launch, median and best):
`plain` (@triton.jit with the winner's BLOCK), `plain+opts` (the same with num_warps, num_ctas
and num_stages spelled out at their defaults, as `Config.all_kwargs()` would pass them) and
`ours` (the tuned kernel). Then our own Python on a hit, with JITFunction.run stubbed out, and the
cost of `str()` of the two option dicts Triton keys its kernel cache on. Needs a GPU.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import timeit

sys.path[:0] = [os.path.join(os.path.dirname(__file__), ".."), os.path.dirname(__file__)]

import torch  # noqa: E402
import triton  # noqa: E402
from triton_launch_overhead import CONFIGS, N, add  # noqa: E402  (the same kernel and configs)

from autotune_cache.triton import autotune  # noqa: E402


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a GPU")
        return 2
    x, y = (torch.randn(N, device="cuda") for _ in range(2))
    out = torch.empty_like(x)
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK"]),)  # noqa: E731
    kernel = autotune(configs=CONFIGS, key=["n"])(add)
    kernel[grid](x, y, out, N)
    torch.cuda.synchronize()
    best = kernel.best_config.kwargs["BLOCK"]
    print("best", kernel.best_config)
    ways = {
        "plain": lambda: add[grid](x, y, out, N, BLOCK=best),
        "plain+opts": lambda: add[grid](x, y, out, N, BLOCK=best, num_warps=4, num_ctas=1,
                                        num_stages=3),
        "ours": lambda: kernel[grid](x, y, out, N),
    }
    per_launch: dict[str, list[float]] = {name: [] for name in ways}
    for launch in ways.values():
        launch()
    for _ in range(15):
        for name, launch in ways.items():
            torch.cuda.synchronize()
            started = time.perf_counter()
            for _ in range(5000):
                launch()
            torch.cuda.synchronize()
            per_launch[name].append((time.perf_counter() - started) / 5000 * 1e6)
    for name, times in per_launch.items():
        print(name, "median", round(statistics.median(times), 3), "best", round(min(times), 3))
    kernel.fn.run = lambda *a, **kw: None
    ours = min(timeit.repeat(lambda: kernel.run(x, y, out, N, grid=grid, warmup=False),
                             number=100000, repeat=7)) / 100000 * 1e6
    stub = min(timeit.repeat(lambda: kernel.fn.run(x, y, out, N, grid=grid, warmup=False),
                             number=100000, repeat=7)) / 100000 * 1e6
    print(f"our Python on a hit: {ours - stub:.3f} us (run {ours:.3f}, stub call {stub:.3f})")
    small = {"debug": False, "instrumentation_mode": None}
    big = {"num_warps": 4, "num_ctas": 1, "num_stages": 3, **small}
    for label, options in (("str(options) plain", small), ("str(options) spelled out", big)):
        cost = min(timeit.repeat(lambda o=options: str(o), number=100000, repeat=5)) / 100000
        print(label, round(cost * 1e6, 3), "us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
