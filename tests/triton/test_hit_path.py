"""The autotuner's hit path (Autotuner.run): the fast memo agrees with the full path."""

from __future__ import annotations

import torch
import triton

from autotune_cache.triton.problem import triton_style_key
from tests.triton import kernels

TABLE = {16: 4.0, 32: 2.0, 64: 1.5, 128: 3.0}


def fast_memo(kernel, args):
    return tuple([args[i] for i in kernel._key_positions if i < len(args)]
                 + [str(a.dtype) for a in args if hasattr(a, "dtype")])


def test_the_fast_memo_is_tritons_key():
    kernel = kernels.tuned_add()
    x = torch.zeros(4)
    args = (x, x, x, 4)
    assert fast_memo(kernel, args) == triton_style_key(
        kernel.arg_names, kernel.keys, dict(zip(kernel.arg_names, args, strict=False)))


def test_hits_launch_the_winner_and_follow_retuning(use_cache, fake):
    use_cache()
    bench = fake(TABLE)
    kernel = kernels.tuned_add()
    for _ in range(3):
        out, expected = kernels.launch_add(kernel, n=100)
        torch.testing.assert_close(out, expected)
    assert bench.calls == [16, 32, 64, 128]  # tuned once
    assert len(kernel._resolved) == 1 and kernel.best_config.kwargs == {"BLOCK_SIZE": 64}
    kernels.launch_add(kernel, n=300)  # another problem: tuned, resolved separately
    assert len(kernel._resolved) == 2

    bench.table.update({64: 9.0})  # clearing Triton's memo forces a re-tune, as in Triton
    kernel.cache.clear()
    use_cache()
    out, expected = kernels.launch_add(kernel, n=100)
    torch.testing.assert_close(out, expected)
    assert kernel.best_config.kwargs == {"BLOCK_SIZE": 32}


def test_a_key_passed_by_keyword_takes_the_full_path(use_cache, fake):
    use_cache()
    fake(TABLE)
    kernel = kernels.tuned_add()
    x, y = torch.rand(50), torch.rand(50)
    out = torch.empty_like(x)
    grid = lambda meta: (triton.cdiv(50, meta["BLOCK_SIZE"]),)  # noqa: E731
    kernel[grid](x, y, out, n=50)
    kernel[grid](x, y, out, n=50)
    torch.testing.assert_close(out, x + y)
    assert kernel.best_config.kwargs == {"BLOCK_SIZE": 64}
