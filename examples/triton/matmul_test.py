"""Correctness of the autotuned fp16 matmul against torch (fp32 reference)."""

from __future__ import annotations

import unittest

import example_env
import matmul
import torch


class MatmulTest(unittest.TestCase):
    def test_matches_torch(self) -> None:
        gen = example_env.seeded(3)
        for m, n, k in example_env.this_shard(matmul.SHAPES):
            with self.subTest(shape=(m, n, k)):
                dev = example_env.DEVICE
                a = torch.randn(m, k, device=dev, generator=gen).to(torch.float16)
                b = torch.randn(k, n, device=dev, generator=gen).to(torch.float16)
                expected = (a.float() @ b.float()).to(torch.float16)
                torch.testing.assert_close(matmul.matmul(a, b), expected, atol=0.1, rtol=2e-2)
                self.assertIn(matmul.matmul_kernel.best_config, matmul.CONFIGS)


if __name__ == "__main__":
    unittest.main()
