"""Four kernels, one for each spelling of Triton's decorator a library uses, and the library's
ops that launch them. `from triton import autotune` runs when this module is imported."""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
import triton.runtime
import triton.runtime.autotuner
from triton import autotune

BLOCKS = (16, 32, 64, 128)


def _configs(**extra: Any) -> list[triton.Config]:
    return [triton.Config({"BLOCK_SIZE": b}, num_warps=4, num_stages=2, **extra) for b in BLOCKS]


def _zero_out(nargs: dict[str, Any]) -> None:
    """The split-K / atomics pattern: the output accumulates, so every launch starts at zero."""
    nargs["out_ptr"].zero_()


@triton.autotune(configs=_configs(), key=["n"])
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3, mask=mask)


@triton.runtime.autotune(configs=_configs(), key=["n"])
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


@triton.runtime.autotuner.autotune(configs=_configs(), key=["n"])
@triton.jit
def square_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * x, mask=mask)


@autotune(configs=_configs(pre_hook=_zero_out), key=["n"])
@triton.jit
def accumulate_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    acc = tl.load(out_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, acc + tl.load(x_ptr + offs, mask=mask), mask=mask)


def _grid(n: int) -> Any:
    return lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)


def scale(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    scale_kernel[_grid(x.numel())](x, out, x.numel())
    return out


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    add_kernel[_grid(x.numel())](x, y, out, x.numel())
    return out


def square(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    square_kernel[_grid(x.numel())](x, out, x.numel())
    return out


def accumulate(x: torch.Tensor) -> torch.Tensor:
    """x, through an output that accumulates: right only when the pre_hook zeroed it first."""
    out = torch.full_like(x, 7.0)
    accumulate_kernel[_grid(x.numel())](x, out, x.numel())
    return out


KERNELS = {"scale_kernel": scale_kernel, "add_kernel": add_kernel,
           "square_kernel": square_kernel, "accumulate_kernel": accumulate_kernel}
