"""A jitted matmul whose XLA autotune results come from the committed cache (on a GPU)."""

import unittest

import numpy as np

from autotune_cache.xla import jax_test_helper


class MatmulTest(unittest.TestCase):
    def test_matmul(self) -> None:
        jax_test_helper.prepare()
        import jax

        x = np.arange(64 * 64, dtype=np.float32).reshape(64, 64) / 4096.0
        with jax_test_helper.stale_cache_errors():
            y = jax.jit(lambda a: a @ a)(x)
        np.testing.assert_allclose(np.asarray(y), x @ x, rtol=1e-4)


if __name__ == "__main__":
    unittest.main()
