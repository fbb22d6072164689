"""fp16 matmul C = A @ B with grouped tile ordering, over the brief's 48-config candidate space.

On a GPU the candidates are the brief's 48 configs (BLOCK_M x BLOCK_N x BLOCK_K x num_warps x
num_stages); under the CPU interpreter a trimmed list keeps the test fast. `prune_by_shape` drops
tiles larger than the matrix, as real matmul autotuners do.
"""

from __future__ import annotations

import example_env
import torch
import triton
import triton.language as tl

from autotune_cache.triton import autotune

if example_env.INTERPRET:
    CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 16}, num_warps=4,
                             num_stages=2)
               for bm in (16, 32) for bn in (16, 32)]
    SHAPES = [(64, 64, 64), (16, 80, 40)]
else:
    CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w,
                             num_stages=s)
               for bm in (64, 128) for bn in (64, 128, 256) for bk in (32, 64)
               for w in (4, 8) for s in (3, 4)]
    SHAPES = [(4096, 4096, 4096), (1024, 8192, 2048), (512, 512, 8192)]


def prune_by_shape(configs: list[triton.Config], named_args: dict, **kwargs: object
                   ) -> list[triton.Config]:
    """Keep configs whose tiles fit the problem (never prunes everything)."""
    m, n = named_args["M"], named_args["N"]
    fitting = [c for c in configs
               if c.kwargs["BLOCK_M"] <= max(16, triton.next_power_of_2(m))
               and c.kwargs["BLOCK_N"] <= max(16, triton.next_power_of_2(n))]
    return fitting or configs


# K_TILES is a compile-time trip count: Triton 3.6's interpreter cannot loop over a runtime
# bound with numpy >= 2.4 (triton-lang/triton#9171).
@autotune(configs=CONFIGS, key=["M", "N", "K"],
          prune_configs_by={"early_config_prune": prune_by_shape})
@triton.heuristics({"K_TILES": lambda args: triton.cdiv(args["K"], args["BLOCK_K"])})
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  K_TILES: tl.constexpr, GROUP_M: tl.constexpr = 8):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group_size = GROUP_M * num_pid_n
    first_m = (pid // group_size) * GROUP_M
    rows_in_group = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size) % rows_in_group
    pid_n = (pid % group_size) // rows_in_group
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(K_TILES):
        ka = kt * BLOCK_K + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + ka[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ka[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(tl.float16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b for fp16 2-D tensors with the autotuned kernel."""
    (m, k), (_, n) = a.shape, b.shape
    c = torch.empty((m, n), device=a.device, dtype=torch.float16)
    grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)  # noqa: E731
    matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1))
    return c
