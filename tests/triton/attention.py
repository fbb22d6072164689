"""Fused attention (forward) with host TensorDescriptor arguments, in the style of Triton's
fused-attention tutorial (python/tutorials/06-fused-attention.py, TMA variant).

As in the tutorial, the host builds every descriptor with a dummy `[1, 1]` block shape and each
candidate config carries a `pre_hook` that sets the real block shapes from its BLOCK_M / BLOCK_N.
The block shape is part of Triton's specialisation, so a candidate compiled before its hook has
run is compiled for `[1, 1]` blocks and fails inside `tl.dot` (in the called @jit function).

`N_CTX` is a constexpr so that the inner loop has a compile-time trip count, which Triton 3.6's
interpreter needs with numpy >= 2.4 (see docs/triton.md, "Interpreter notes").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


def host_descriptor_pre_hook(nargs: dict[str, Any]) -> None:
    """The tutorial's per-config hook: block shapes follow the config's BLOCK_M / BLOCK_N."""
    block_m, block_n, head_dim = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["HEAD_DIM"]
    if not isinstance(nargs["desc_q"], TensorDescriptor):
        return
    nargs["desc_q"].block_shape = [block_m, head_dim]
    nargs["desc_k"].block_shape = [block_n, head_dim]
    nargs["desc_v"].block_shape = [block_n, head_dim]
    nargs["desc_o"].block_shape = [block_m, head_dim]


def dummy_block_pre_hook(nargs: dict[str, Any]) -> None:
    """A hook that leaves every descriptor at the host's dummy `[1, 1]` block: the state each
    candidate was specialised in when hooks ran only at launch. Its config fails to compile in
    `tl.dot` inside `_attn_fwd_inner`."""
    for name in ("desc_q", "desc_k", "desc_v", "desc_o"):
        nargs[name].block_shape = [1, 1]


def attention_configs(blocks_m: tuple[int, ...], blocks_n: tuple[int, ...],
                      stages: tuple[int, ...] = (2,), warps: tuple[int, ...] = (4,),
                      ) -> list[triton.Config]:
    """One config per (BLOCK_M, BLOCK_N, num_stages, num_warps), each with the descriptor hook."""
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=s, num_warps=w,
                          pre_hook=host_descriptor_pre_hook)
            for bm in blocks_m for bn in blocks_n for s in stages for w in warps]


def prune_invalid_configs(configs: list[triton.Config], named_args: dict[str, Any],
                          **kwargs: Any) -> list[triton.Config]:
    """The tutorial's early prune: a query block may not be longer than the sequence."""
    n_ctx = kwargs["N_CTX"]
    return [c for c in configs if c.kwargs["BLOCK_M"] <= n_ctx]


@triton.jit
def _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, offset_y, qk_scale,
                    N_CTX: tl.constexpr, BLOCK_N: tl.constexpr):
    for start_n in range(0, N_CTX, BLOCK_N):
        k = desc_k.load([offset_y + start_n, 0])
        qk = tl.dot(q, tl.trans(k))
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = desc_v.load([offset_y + start_n, 0])
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def attn_fwd(sm_scale, Z, H, desc_q, desc_k, desc_v, desc_o, N_CTX: tl.constexpr,
             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    offset_y = off_hz * N_CTX
    qo_offset_y = offset_y + start_m * BLOCK_M
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504  # 1 / ln(2)
    q = desc_q.load([qo_offset_y, 0])
    acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, offset_y, qk_scale,
                                    N_CTX, BLOCK_N)
    acc = acc / l_i[:, None]
    desc_o.store([qo_offset_y, 0], acc.to(desc_o.dtype))


def make_inputs(z: int, h: int, n_ctx: int, head_dim: int, device: str = "cpu",
                seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v of shape (z, h, n_ctx, head_dim) in float16."""
    gen = torch.Generator(device=device).manual_seed(seed)
    shape = (z, h, n_ctx, head_dim)
    return tuple(torch.randn(shape, generator=gen, device=device, dtype=torch.float16) * 0.5
                 for _ in range(3))  # type: ignore[return-value]


def descriptors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                ) -> tuple[TensorDescriptor, ...]:
    """The tutorial's host descriptors over the (Z*H*N_CTX, HEAD_DIM) view, with a dummy block."""
    y_dim = q.shape[0] * q.shape[1] * q.shape[2]
    head_dim = q.shape[-1]
    dummy_block = [1, 1]
    return tuple(TensorDescriptor(t, shape=[y_dim, head_dim], strides=[head_dim, 1],
                                  block_shape=dummy_block) for t in (q, k, v, o))


def launch(kernel: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           sm_scale: float = 0.5) -> torch.Tensor:
    """The tutorial's host side: build descriptors, launch with a grid function, return o."""
    z, h, n_ctx, head_dim = q.shape
    o = torch.empty_like(q)
    desc_q, desc_k, desc_v, desc_o = descriptors(q, k, v, o)

    def grid(meta: dict[str, Any]) -> tuple[int, int, int]:
        return (triton.cdiv(n_ctx, meta["BLOCK_M"]), z * h, 1)

    kernel[grid](sm_scale, z, h, desc_q, desc_k, desc_v, desc_o, N_CTX=n_ctx, HEAD_DIM=head_dim)
    return o


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              sm_scale: float = 0.5) -> torch.Tensor:
    """softmax(q k^T * sm_scale) v in float32, cast back to float16."""
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * sm_scale
    return torch.matmul(torch.softmax(scores, dim=-1), v.float()).to(q.dtype)


def tuned(decorator: Callable[..., Any], configs: list[triton.Config], **kwargs: Any) -> Any:
    """attn_fwd under `decorator` (ours or triton.autotune), keyed like the tutorial."""
    return decorator(configs=configs, key=["N_CTX", "HEAD_DIM"], **kwargs)(attn_fwd)
