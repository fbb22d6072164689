"""Subprocess body: one key tuned down the GPU path on a machine with no GPU, with screening.

The compile-only driver (sm_90 target) lets the real compiler run; launches are intercepted (the
JIT function still specialises and finds the compiled kernel, nothing is launched). Records the
order the candidates were specialised in, and for every benchmark how many candidates the JIT
cache held. Prints one JSON line.
"""

from __future__ import annotations

import json
import os

os.environ["TRITON_INTERPRET"] = "0"

import torch  # noqa: E402
import triton  # noqa: E402
from triton.runtime.driver import driver  # noqa: E402

import autotune_cache.triton.autotuner as autotuner_module  # noqa: E402
import autotune_cache.triton.tune as tune_module  # noqa: E402
from autotune_cache import Device, get_cache  # noqa: E402
from autotune_cache.triton import autotune  # noqa: E402
from autotune_cache.triton.bench import UserBenchmark  # noqa: E402
from tests.triton import kernels  # noqa: E402
from tests.triton.compile_worker import CompileOnlyDriver  # noqa: E402

FAKE_GPU = Device(name="Fake H100", arch="sm_90", sm_count=132)
# Screening and final times by BLOCK_SIZE: 256 (the costly compile) screens best, 64 wins.
SCREEN_MS = {16: 0.9, 32: 0.8, 64: 0.5, 128: 0.7, 256: 0.4}
FINAL_MS = {16: 9.0, 32: 8.0, 64: 4.0, 128: 7.0, 256: 5.0}


def main() -> None:
    driver.set_active(CompileOnlyDriver())
    autotuner_module.current_device = lambda: FAKE_GPU
    tune_module.device_identity = lambda: "fake-gpu"
    jit = kernels.add_kernel
    jit_cache = jit.device_caches[0][0]
    events: list[list] = []  # [stage, BLOCK_SIZE, kernels in the JIT cache then]
    specialised: list[int] = []

    real_run = jit.run

    def run(*args, grid, warmup, **kwargs):
        kernel = real_run(*args, grid=grid, warmup=True, **kwargs)  # specialise, no launch
        return kernel if warmup else None

    jit.run = run

    def timer(stage: str, table: dict[int, float]) -> UserBenchmark:
        def do_bench(kernel_call, quantiles):
            kernel_call()
            block = current[0]
            events.append([stage, block, len(jit_cache)])
            return [table[block]] * len(quantiles)

        bench = UserBenchmark(do_bench)
        bench.method = "do_bench"
        return bench

    current = [0]

    def hook(nargs):
        current[0] = nargs["BLOCK_SIZE"]
        if nargs["BLOCK_SIZE"] not in specialised:
            specialised.append(nargs["BLOCK_SIZE"])

    configs = [triton.Config({"BLOCK_SIZE": b}, num_warps=4, num_stages=2, pre_hook=hook)
               for b in (16, 32, 64, 128)]
    configs.append(triton.Config({"BLOCK_SIZE": 256}, num_warps=1, num_stages=2, pre_hook=hook))
    tune_module.bench_mod.halving_stages = lambda benchmark, n: [
        (timer("screen", SCREEN_MS), 2), (timer("final", FINAL_MS), None)]
    tuner = autotune(configs=configs, key=["n"], do_bench=lambda f, quantiles: 1.0)(jit)
    x = torch.empty(1024)
    tuner[lambda meta: (triton.cdiv(1024, meta["BLOCK_SIZE"]),)](x, x, x, 1024)
    entry = tuner.last_entry
    print(json.dumps({
        "events": events,
        "specialised": specialised,
        "best": tuner.best_config.kwargs,
        "times": [t.time_ms for t in entry.result.candidates],
        "benchmarks": get_cache().stats.benchmarks,
    }))


if __name__ == "__main__":
    main()
