"""Layer norm forward (one program per row, columns in BLOCK_SIZE chunks), tuned per width."""

from __future__ import annotations

import example_env
import torch
import triton
import triton.language as tl

from autotune_cache.triton import autotune

if example_env.INTERPRET:
    CONFIGS = [triton.Config({"BLOCK_SIZE": b}, num_warps=4) for b in (32, 64, 128)]
    SHAPES = [(16, 100), (4, 300)]
else:
    CONFIGS = [triton.Config({"BLOCK_SIZE": b}, num_warps=w)
               for b in (256, 512, 1024, 2048, 4096) for w in (2, 4, 8)]
    SHAPES = [(4096, 1024), (2048, 4096), (1024, 12288)]


# The column loop runs a compile-time number of tiles. (Triton 3.6's interpreter cannot loop
# `range(0, N, BLOCK_SIZE)` over a runtime N with numpy >= 2.4: triton-lang/triton#9171.)
@autotune(configs=CONFIGS, key=["N"])
@triton.heuristics({"TILES": lambda args: triton.cdiv(args["N"], args["BLOCK_SIZE"])})
@triton.jit
def layer_norm_fwd_kernel(X, Y, W, B, Mean, Rstd, stride, N, eps,
                          BLOCK_SIZE: tl.constexpr, TILES: tl.constexpr):
    row = tl.program_id(0)
    X += row * stride
    Y += row * stride
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for tile in range(TILES):
        cols = tile * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for tile in range(TILES):
        cols = tile * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.0)
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for tile in range(TILES):
        cols = tile * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(Y + cols, y.to(Y.dtype.element_ty), mask=mask)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """layer_norm(x) over the last dim of a 2-D tensor with the autotuned kernel."""
    m, n = x.shape
    y = torch.empty_like(x)
    mean = torch.empty(m, dtype=torch.float32, device=x.device)
    rstd = torch.empty(m, dtype=torch.float32, device=x.device)
    layer_norm_fwd_kernel[(m,)](x, y, weight, bias, mean, rstd, x.stride(0), n, eps)
    return y
