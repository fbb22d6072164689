"""Correctness of the autotuned fused softmax against torch.softmax."""

from __future__ import annotations

import unittest

import example_env
import fused_softmax
import torch


class FusedSoftmaxTest(unittest.TestCase):
    def test_matches_torch(self) -> None:
        gen = example_env.seeded(1)
        for shape in example_env.this_shard(fused_softmax.SHAPES):
            with self.subTest(shape=shape):
                x = torch.randn(*shape, device=example_env.DEVICE, generator=gen)
                torch.testing.assert_close(fused_softmax.softmax(x), torch.softmax(x, dim=-1),
                                           rtol=1e-5, atol=1e-6)
                self.assertIn(fused_softmax.softmax_kernel.best_config, fused_softmax.CONFIGS)


if __name__ == "__main__":
    unittest.main()
