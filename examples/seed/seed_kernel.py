"""The kernel the three seed tests run: `y = alpha * x + beta`, tuned over the block size.

It stands in for the XLA fusions of XLA's own seed tests. Without a GPU it runs in Triton's CPU
interpreter (TRITON_INTERPRET=1 is set before any kernel is decorated).
"""

from __future__ import annotations

import os

import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import triton  # noqa: E402 - must follow the TRITON_INTERPRET decision above
import triton.language as tl  # noqa: E402

from autotune_cache.triton import autotune  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
DEVICE = "cpu" if INTERPRET else "cuda"
CONFIGS = [triton.Config({"BLOCK_SIZE": b}, num_warps=4) for b in (32, 128)]
SIZES = (777, 2048)


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


def run_all_sizes() -> None:
    """Runs the kernel once per size and checks it against torch."""
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    for n in SIZES:
        x = torch.rand(n, device=DEVICE, generator=gen)
        torch.testing.assert_close(affine(x, 2.0, 0.5), x * 2.0 + 0.5)
