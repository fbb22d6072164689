"""Vector add, tuned over the block size: the smallest complete autotuned Triton kernel."""

from __future__ import annotations

import example_env
import torch
import triton
import triton.language as tl

from autotune_cache.triton import autotune

if example_env.INTERPRET:
    CONFIGS = [triton.Config({"BLOCK_SIZE": b}, num_warps=4) for b in (64, 128, 256)]
    SIZES = [1000, 4097]
else:
    CONFIGS = [triton.Config({"BLOCK_SIZE": b}, num_warps=w)
               for b in (512, 1024, 2048, 4096) for w in (4, 8)]
    SIZES = [1 << 20, (1 << 24) + 3]


@autotune(configs=CONFIGS, key=["n_elements"])
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x + y with the autotuned kernel."""
    out = torch.empty_like(x)
    n = out.numel()
    add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, y, out, n)
    return out
