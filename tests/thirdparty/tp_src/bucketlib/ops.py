"""bucketlib's kernels."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from bucketlib.tuner import bucket_tune


@bucket_tune(key=["n"], strategy=["log2"])
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3, mask=mask)


@bucket_tune(key=["n"], strategy=["align32"])
@triton.jit
def halve_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) / 2, mask=mask)


def _launch(kernel, x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)](x, out, x.numel())
    return out


def scale(x: torch.Tensor) -> torch.Tensor:
    return _launch(scale_kernel, x)


def halve(x: torch.Tensor) -> torch.Tensor:
    return _launch(halve_kernel, x)
