"""Subprocess body (CUDA GPU): the TMA fused-attention kernel tuned from scratch by
`triton.autotune` and by ours (parallel compile, both with empty compile caches of their own),
then by ours again from the dumped results. Prints one JSON line with the winners, timings and
the outputs' differences from a torch reference and from each other.

argv: phase ('triton' | 'ours' | 'reload'), output .pt path for the result tensor.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ["TRITON_INTERPRET"] = "0"

import torch  # noqa: E402
import triton  # noqa: E402

from autotune_cache import get_cache  # noqa: E402
from autotune_cache.triton import autotune  # noqa: E402
from tests.triton import attention  # noqa: E402

SHAPE = (4, 8, 1024, 64)  # Z, H, N_CTX, HEAD_DIM
# The tutorial's candidate space: BLOCK_M x BLOCK_N x num_stages x num_warps.
CONFIGS = attention.attention_configs((64, 128), (32, 64, 128), (2, 3, 4), (4, 8))


def main() -> None:
    phase, out_path = sys.argv[1], sys.argv[2]
    decorator = triton.autotune if phase == "triton" else autotune
    kernel = attention.tuned(decorator, CONFIGS,
                             prune_configs_by={"early_config_prune":
                                               attention.prune_invalid_configs})
    q, k, v = attention.make_inputs(*SHAPE, device="cuda")
    started = time.perf_counter()
    o = attention.launch(kernel, q, k, v)
    torch.cuda.synchronize()
    first_launch_s = time.perf_counter() - started
    ref = attention.reference(q, k, v)
    torch.save(o.cpu(), out_path)
    report = {
        "phase": phase,
        "first_launch_s": round(first_launch_s, 2),
        "best": {**kernel.best_config.kwargs, "num_warps": kernel.best_config.num_warps,
                 "num_stages": kernel.best_config.num_stages},
        "max_abs_diff_vs_torch": float((o.float() - ref.float()).abs().max()),
        "timed": sum(1 for t in kernel.configs_timings.values() if t[0] != float("inf")),
        "candidates": len(CONFIGS),
    }
    if phase != "triton":
        stats = get_cache().stats
        entry = kernel.last_entry
        report.update(hits=stats.hits, misses=stats.misses, benchmarks=stats.benchmarks,
                      failures=[t.failure for t in entry.result.candidates if t.failure],
                      timing_method=entry.result.timing_method,
                      device=entry.key.device.name)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
