"""Subprocess body: the autotuner's GPU tuning path on a machine with no GPU.

A compile-only driver names an sm_90 target and the device is stubbed as an H100-class GPU, so
`Autotuner._select` runs exactly what it runs on a GPU up to the launch: cache lookup, parallel
compile of the matmul example's GPU candidates (through @triton.heuristics), the device-wide
benchmarking lock, benchmarking (a user `do_bench` that does not launch) and recording. Prints one
JSON line describing the recorded entry.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "triton"))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.runtime.driver import driver  # noqa: E402

import autotune_cache.triton.autotuner as autotuner_module  # noqa: E402
import autotune_cache.triton.tune as tune_module  # noqa: E402
from autotune_cache import Device, get_cache  # noqa: E402
from autotune_cache.triton import autotune  # noqa: E402
from tests.triton.compile_worker import CompileOnlyDriver  # noqa: E402

FAKE_GPU = Device(name="Fake H100", arch="sm_90", sm_count=132)


def main() -> None:
    driver.set_active(CompileOnlyDriver())
    autotuner_module.current_device = lambda: FAKE_GPU
    tune_module.device_identity = lambda: "fake-gpu"
    import matmul

    bench_calls: list[int] = []

    def do_bench(kernel_call, quantiles):  # times without launching: there is no GPU
        bench_calls.append(1)
        return [float(len(bench_calls))] * len(quantiles)

    bad = triton.Config({"BLOCK_M": 48, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=3)
    configs = [bad] + matmul.CONFIGS[:3]
    tuner = autotune(configs=configs, key=["M", "N", "K"], do_bench=do_bench)(
        matmul.matmul_kernel.fn)
    h = torch.empty(512, 512, dtype=torch.float16)
    args = (h, h, h, 512, 512, 512, 512, 1, 512, 1, 512, 1)
    kwargs = {"grid": (1,), "warmup": False}
    tuner.nargs = dict(zip(tuner.arg_names, args, strict=False))
    best, _ = tuner._select(args, kwargs, {**tuner.nargs, **kwargs})
    entry = tuner.last_entry
    jit = matmul.matmul_kernel.fn.fn
    print(json.dumps({
        "best": best.kwargs,
        "failures": [t.failure for t in entry.result.candidates],
        "toolchain": {v.name: v.version for v in entry.key.toolchain},
        "device": entry.key.device.name,
        "timing_method": entry.result.timing_method,
        "bench_calls": len(bench_calls),
        "compiled": len(jit.device_caches[0][0]),
        "benchmarks": get_cache().stats.benchmarks,
    }))


if __name__ == "__main__":
    main()
