"""Four autotuned kernels, one per spelling of Triton's decorator."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl
import triton.runtime
import triton.runtime.autotuner
from triton import autotune

CONFIGS = [triton.Config({"BLOCK": b}) for b in (16, 32, 64)]


def wall_clock(fn: Callable[[], Any], quantiles: Any = None, **_: Any) -> Any:
    """A do_bench of the library's own (the default one needs a GPU)."""
    start = time.perf_counter()
    fn()
    ms = (time.perf_counter() - start) * 1e3
    return [ms, ms, ms] if quantiles else ms


@triton.autotune(configs=CONFIGS, key=["n"], do_bench=wall_clock)
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


@triton.runtime.autotune(configs=CONFIGS, key=["n"], do_bench=wall_clock)
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


@triton.runtime.autotuner.autotune(configs=CONFIGS, key=["n"], do_bench=wall_clock)
@triton.jit
def square_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, x * x, mask=offs < n)


@autotune(configs=CONFIGS, key=["n"], do_bench=wall_clock)
@triton.jit
def negate_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, -tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def _grid(n: int) -> Callable[[dict[str, Any]], tuple[int]]:
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


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


def negate(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    negate_kernel[_grid(x.numel())](x, out, x.numel())
    return out
