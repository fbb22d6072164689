"""`y = alpha * x + beta` as an autotuned Triton kernel (Triton's CPU interpreter without a GPU)."""

from __future__ import annotations

import os

import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import triton  # noqa: E402 - must follow the TRITON_INTERPRET decision above
import triton.language as tl  # noqa: E402

from autotune_cache.triton import autotune  # noqa: E402

DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
CONFIGS = [triton.Config({"BLOCK_SIZE": b}, num_warps=4) for b in (32, 128)]


@autotune(configs=CONFIGS, key=["n_elements"])
@triton.jit
def affine_kernel(x_ptr, out_ptr, alpha, beta, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * alpha + beta, mask=mask)


def affine(x: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    """alpha * x + beta with the autotuned kernel."""
    out = torch.empty_like(x)
    n = out.numel()
    affine_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, out, alpha, beta, n)
    return out


def check(n: int) -> None:
    """Runs the kernel on `n` elements and checks it against torch."""
    x = torch.rand(n, device=DEVICE, generator=torch.Generator(device=DEVICE).manual_seed(n))
    torch.testing.assert_close(affine(x, 2.0, 0.5), x * 2.0 + 0.5)
