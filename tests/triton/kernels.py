"""Small interpreter-friendly kernels for the autotuner tests, and autotuner factories.

Each factory wraps the same @triton.jit function in a new Autotuner, which is how a second process
sees a kernel: same source fingerprint, empty in-process memo.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from autotune_cache.triton import Autotuner, autotune


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


@triton.jit
def accumulate_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    acc = tl.load(out_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, acc + tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def double_in_place_kernel(x_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


def configs(*blocks: int) -> list[triton.Config]:
    """One config per BLOCK_SIZE."""
    return [triton.Config({"BLOCK_SIZE": b}, num_warps=4, num_stages=2) for b in blocks]


def tuned_add(blocks: tuple[int, ...] = (16, 32, 64, 128), **kwargs: Any) -> Autotuner:
    """A fresh autotuner over add_kernel, keyed on n."""
    return autotune(configs=configs(*blocks), key=["n"], **kwargs)(add_kernel)


def launch_add(kernel: Autotuner, n: int = 100) -> tuple[torch.Tensor, torch.Tensor]:
    """Run `kernel` on x + y of length n; returns (result, expected)."""
    gen = torch.Generator().manual_seed(n)
    x, y = torch.rand(n, generator=gen), torch.rand(n, generator=gen)
    out = torch.empty_like(x)
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, y, out, n)
    return out, x + y


# The fake benchmark's times (ms) by BLOCK_SIZE: 64 wins.
TABLE = {16: 4.0, 32: 2.0, 64: 1.5, 128: 3.0}


def candidate_times(kernel: Autotuner) -> dict[int, float | str]:
    """{BLOCK_SIZE: time_ms or failure} from the kernel's last entry."""
    out: dict[int, float | str] = {}
    for timing in kernel.last_entry.result.candidates:
        block = next(p.int_value for p in timing.config.params if p.name == "BLOCK_SIZE")
        out[block] = timing.failure or timing.time_ms
    return out
