"""Subprocess body: tune the TMA fused-attention kernel down the GPU path on a machine with no GPU.

The compile-only driver (sm_90 target) lets the real compiler run. Launches are intercepted: the
JIT function's `run` still specialises and compiles, but where it would launch it records the
block shape of every descriptor argument instead. So this checks, with the parallel compile,
that each candidate is specialised after its own `pre_hook` and that each benchmark launch sees
the arguments in the state its own hook left them. Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import re
import sys

os.environ["TRITON_INTERPRET"] = "0"

import torch  # noqa: E402
import triton  # noqa: E402
from triton.runtime.driver import driver  # noqa: E402

import autotune_cache.triton.autotuner as autotuner_module  # noqa: E402
import autotune_cache.triton.tune as tune_module  # noqa: E402
from autotune_cache import Device, get_cache  # noqa: E402
from autotune_cache.triton import autotune  # noqa: E402
from tests.triton import attention  # noqa: E402
from tests.triton.compile_worker import CompileOnlyDriver  # noqa: E402

FAKE_GPU = Device(name="Fake H100", arch="sm_90", sm_count=132)
DESCS = ("desc_q", "desc_k", "desc_v", "desc_o")


def main() -> None:
    driver.set_active(CompileOnlyDriver())
    autotuner_module.current_device = lambda: FAKE_GPU
    tune_module.device_identity = lambda: "fake-gpu"
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 2

    jit = attention.attn_fwd
    real_run = jit.run
    launches: list[dict] = []

    def run(*args, grid, warmup, **kwargs):
        if warmup:
            return real_run(*args, grid=grid, warmup=warmup, **kwargs)
        real_run(*args, grid=grid, warmup=True, **kwargs)  # specialise + compile, no launch
        named = dict(zip(jit.arg_names, args, strict=False))
        launches.append({"config": [kwargs["BLOCK_M"], kwargs["BLOCK_N"]],
                         "blocks": {n: list(named[n].block_shape) for n in DESCS}})
        return None

    jit.run = run

    def do_bench(kernel_call, quantiles):  # launches once (intercepted), times by order
        kernel_call()
        return [float(len(launches))] * len(quantiles)

    broken = triton.Config({"BLOCK_M": 64, "BLOCK_N": 16}, num_stages=2, num_warps=4,
                           pre_hook=attention.dummy_block_pre_hook)
    configs = [broken, *attention.attention_configs((64, 128), (32, 64))]
    tuner = attention.tuned(autotune, configs, do_bench=do_bench,
                            prune_configs_by={"early_config_prune":
                                              attention.prune_invalid_configs})
    q = torch.empty((1, 2, 128, 64), dtype=torch.float16)
    attention.launch(tuner, q, q, q)
    entry = tuner.last_entry
    # The JIT cache keys name each descriptor's type, e.g. 'tensordesc<fp16[64,64]>'.
    compiled = sorted(re.findall(r"tensordesc<[^>]*>", str(key))
                      for key in jit.device_caches[0][0])
    print(json.dumps({
        "failures": [t.failure for t in entry.result.candidates],
        "launches": launches,
        "compiled": compiled,
        "best": tuner.best_config.kwargs,
        "benchmarks": get_cache().stats.benchmarks,
        "timing_method": entry.result.timing_method,
        "workers": workers,
    }))


if __name__ == "__main__":
    main()
