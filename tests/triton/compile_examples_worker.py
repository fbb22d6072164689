"""Subprocess body: compile the example kernels' GPU candidate configs for sm_90 on a CPU.

Catches GPU-only compile errors in examples/triton before they reach a GPU machine: each example
module is imported in GPU mode (TRITON_INTERPRET=0), a compile-only driver names an sm_90 target,
and every GPU candidate of every example is compiled through the autotuner's parallel compile
path (the @triton.heuristics wrappers included). Prints one JSON line: {example: failures}.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "triton"))

import torch  # noqa: E402
from triton.runtime.driver import driver  # noqa: E402

from autotune_cache.triton.compile import compile_candidates  # noqa: E402
from tests.triton.compile_worker import CompileOnlyDriver  # noqa: E402


def main() -> None:
    driver.set_active(CompileOnlyDriver())
    import fused_softmax
    import layer_norm
    import matmul
    import vector_add

    h = torch.empty(64, 64, dtype=torch.float16)
    f = torch.empty(64, 64)
    cases = {
        "vector_add": (vector_add.add_kernel, (f, f, f, 4096), {}),
        "fused_softmax": (fused_softmax.softmax_kernel, (f, f, 64, 64, 50), {"BLOCK_SIZE": 64}),
        "layer_norm": (layer_norm.layer_norm_fwd_kernel,
                       (h, h, h, h, f, f, 1024, 1024, 1e-5), {}),
        "matmul": (matmul.matmul_kernel, (h, h, h, 512, 512, 512, 512, 1, 512, 1, 512, 1), {}),
    }
    workers = int(os.environ.get("COMPILE_WORKERS", "2"))
    only = int(os.environ.get("CONFIGS_PER_EXAMPLE", "0"))
    out = {}
    for name, (tuner, args, meta) in cases.items():
        configs = tuner.configs[:only] if only else tuner.configs
        failures = compile_candidates(tuner.fn, args, {"grid": None, "warmup": False, **meta},
                                      configs, workers).failures
        out[name] = {"compiled": len(configs), "failures": failures}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
