"""Subprocess body for the cross-process test: tune add_kernel once against a shared cache dir.

Usage: python -m tests.triton.tune_worker LOG START_AT. Waits until START_AT (epoch seconds) so
that all workers miss together, uses a slow fake benchmark that appends one line per benchmarked
config to LOG, and prints one JSON line with the winner and this process's cache statistics.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ["TRITON_INTERPRET"] = "1"

from autotune_cache import get_cache  # noqa: E402
from autotune_cache.triton import set_fake_benchmark  # noqa: E402
from tests.triton import kernels  # noqa: E402

TABLE = {16: 4.0, 32: 2.0, 64: 1.5, 128: 3.0}


def main() -> None:
    log, start_at = sys.argv[1], float(sys.argv[2])

    def slow_fake(config, problem) -> float:
        block = config.kwargs["BLOCK_SIZE"]
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {block}\n")
        time.sleep(0.3)
        return TABLE[block]

    set_fake_benchmark(slow_fake)
    kernel = kernels.tuned_add()
    time.sleep(max(0.0, start_at - time.time()))
    out, expected = kernels.launch_add(kernel, n=257)
    stats = get_cache().stats
    print(json.dumps({"pid": os.getpid(), "best": kernel.best_config.kwargs["BLOCK_SIZE"],
                      "correct": bool((out == expected).all()), "tuned": stats.tuned,
                      "misses": stats.misses, "hits": stats.hits,
                      "benchmarks": stats.benchmarks}))


if __name__ == "__main__":
    main()
