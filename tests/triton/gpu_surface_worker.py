"""Subprocess body (CUDA GPU): the autotune arguments that only a GPU exercises.

`warmup` / `rep` and `use_cuda_graph` pick our GPU benchmark's settings (recorded as the timing
method); `reset_to_zero` / `restore_value` keep accumulating and in-place kernels right through
real GPU benchmarking; an `ir_override` candidate (the TTGIR Triton itself produced for that
config) compiles from the override and computes the same result. Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"

import torch  # noqa: E402
import triton  # noqa: E402

from autotune_cache import get_cache  # noqa: E402
from autotune_cache.triton import autotune  # noqa: E402
from tests.triton import kernels  # noqa: E402

N = 1 << 20


def grid(meta: dict) -> tuple[int]:
    return (triton.cdiv(N, meta["BLOCK_SIZE"]),)


def add_with(n: int, **options: object) -> dict:
    """Tune add_kernel for `n` elements with these autotune options. Each call takes its own `n`:
    the timing method is not part of the key, so a second call on the same problem would (rightly)
    hit the first call's entry in this process's cache."""
    kernel = autotune(configs=kernels.configs(256, 512, 1024), key=["n"], **options)(
        kernels.add_kernel)
    x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, y, out, n)
    return {"method": kernel.last_entry.result.timing_method,
            "correct": bool(torch.equal(out, x + y))}


def main() -> None:
    tmp = Path(sys.argv[1])
    report: dict[str, object] = {}
    report["warmup_rep"] = add_with(N, warmup=5, rep=20)
    report["cuda_graph"] = add_with(N // 2, use_cuda_graph=True, rep=20)

    x = torch.rand(N, device="cuda")
    acc = autotune(configs=kernels.configs(256, 512, 1024), key=["n"],
                   reset_to_zero=["out_ptr"])(kernels.accumulate_kernel)
    out = torch.full((N,), 3.0, device="cuda")
    acc[grid](x, out, N)
    report["reset_to_zero_correct"] = bool(torch.equal(out, x))
    double = autotune(configs=kernels.configs(256, 512, 1024), key=["n"],
                      restore_value=["x_ptr"])(kernels.double_in_place_kernel)
    y = x.clone()
    double[grid](y, N)
    report["restore_value_correct"] = bool(torch.equal(y, x * 2))

    # ir_override: Triton's own TTGIR for BLOCK_SIZE=512, as a separate candidate.
    a, b = torch.rand(N, device="cuda"), torch.rand(N, device="cuda")
    compiled = kernels.add_kernel.warmup(a, b, a, N, BLOCK_SIZE=512, num_warps=4, num_stages=2,
                                         grid=(1,))
    ttgir = tmp / "add_kernel.ttgir"
    ttgir.write_text(compiled.asm["ttgir"])
    override = triton.Config({"BLOCK_SIZE": 512}, num_warps=4, num_stages=2,
                             ir_override=str(ttgir))
    launching_override = [False]

    def note_config(nargs: dict, reset_only: bool = False) -> None:
        launching_override[0] = bool(nargs.get("ir_override"))

    def do_bench(kernel_call, quantiles):  # launches for real; the override "wins"
        kernel_call()
        return [1.0 if launching_override[0] else 2.0] * len(quantiles)

    kernel = autotune(configs=[*kernels.configs(256, 1024), override], key=["n"],
                      pre_hook=note_config, do_bench=do_bench)(kernels.add_kernel)
    out = torch.empty_like(a)
    kernel[grid](a, b, out, N)
    report["ir_override"] = {"best_is_override": kernel.best_config is override,
                             "correct": bool(torch.equal(out, a + b)),
                             "failures": [t.failure for t in kernel.last_entry.result.candidates
                                          if t.failure]}
    report["benchmarks"] = get_cache().stats.benchmarks
    print(json.dumps(report))


if __name__ == "__main__":
    main()
