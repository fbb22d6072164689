"""Two kernels: one on the library's own tuner, one on plain @triton.autotune."""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from tunerlib.tuner import lib_autotune, wall_clock

CONFIGS = [triton.Config({"BLOCK": b}) for b in (16, 32, 64)]


@lib_autotune(configs=CONFIGS, key=["n"])
@triton.jit
def rownorm_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x / 2.0, mask=mask)


@triton.autotune(configs=CONFIGS, key=["n"], do_bench=wall_clock)
@triton.jit
def shift_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


def _grid(n: int) -> Any:
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


def rownorm(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    rownorm_kernel[_grid(x.numel())](x, out, x.numel())
    return out


def shift(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    shift_kernel[_grid(x.numel())](x, out, x.numel())
    return out
