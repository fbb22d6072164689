"""Correctness of the autotuned vector add against torch, for every example size."""

from __future__ import annotations

import unittest

import example_env
import torch
import vector_add


class VectorAddTest(unittest.TestCase):
    def test_matches_torch(self) -> None:
        gen = example_env.seeded(0)
        for n in example_env.this_shard(vector_add.SIZES):
            with self.subTest(n=n):
                x = torch.rand(n, device=example_env.DEVICE, generator=gen)
                y = torch.rand(n, device=example_env.DEVICE, generator=gen)
                torch.testing.assert_close(vector_add.add(x, y), x + y)
                self.assertIn(vector_add.add_kernel.best_config, vector_add.CONFIGS)


if __name__ == "__main__":
    unittest.main()
