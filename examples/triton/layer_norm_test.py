"""Correctness of the autotuned layer norm forward against torch.nn.functional.layer_norm."""

from __future__ import annotations

import unittest

import example_env
import layer_norm
import torch


class LayerNormTest(unittest.TestCase):
    def test_matches_torch(self) -> None:
        gen = example_env.seeded(2)
        dtype = torch.float32 if example_env.INTERPRET else torch.float16
        for m, n in example_env.this_shard(layer_norm.SHAPES):
            with self.subTest(shape=(m, n)):
                dev = example_env.DEVICE
                x = torch.randn(m, n, device=dev, generator=gen).to(dtype)
                w = torch.rand(n, device=dev, generator=gen).to(dtype)
                b = torch.rand(n, device=dev, generator=gen).to(dtype)
                expected = torch.nn.functional.layer_norm(x.float(), (n,), w.float(), b.float())
                torch.testing.assert_close(layer_norm.layer_norm(x, w, b).float(), expected,
                                           atol=2e-2, rtol=1e-2)
                self.assertIn(layer_norm.layer_norm_fwd_kernel.best_config, layer_norm.CONFIGS)


if __name__ == "__main__":
    unittest.main()
