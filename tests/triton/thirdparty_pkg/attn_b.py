"""One of two modules with a kernel named `_fwd_kernel` and the same source, as two libraries'
attention kernels are: their cache entries must never be shared."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK_SIZE": b}) for b in (16, 32, 64, 128)],
                 key=["n"])
@triton.jit
def _fwd_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


def forward(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    _fwd_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)](x, out, x.numel())
    return out
