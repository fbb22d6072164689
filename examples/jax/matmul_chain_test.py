"""A jitted bf16 matmul chain whose XLA autotune results come from a committed cache.

Wired with `autotuned_py_test(..., backend = "xla")`: the macro sets XLA_FLAGS to load
`matmul_chain_test.autotune.textproto` (dumped on an H200), with
--xla_gpu_require_complete_aot_autotune_results, so on the GPU every fusion's config comes from
the file and nothing is tuned; a stale file fails with the command that regenerates it. On a
CPU-only machine XLA ignores the GPU autotune flags and the test checks the numbers only.

Runs as a py_test main (`python matmul_chain_test.py`) and under pytest.
"""

from __future__ import annotations

import unittest

import numpy as np

from autotune_cache.xla import jax_test_helper

# (rows, d_in, d_hidden, d_out): the problem the committed cache was dumped for.
SHAPE = (512, 1024, 2048, 1024)


def chain(x, w1, w2, w3):
    """x @ w1 -> bias+relu -> @ w2 -> relu -> @ w3: three GEMM fusions for XLA to tune."""
    import jax
    import jax.numpy as jnp

    h = jax.nn.relu(x @ w1 + jnp.asarray(1, x.dtype))
    h = jnp.maximum(h @ w2, jnp.asarray(0, x.dtype))
    return h @ w3


def inputs(rows: int, d_in: int, d_hidden: int, d_out: int, seed: int = 0) -> list[np.ndarray]:
    """Deterministic float32 inputs scaled so that every layer's outputs stay near unit size."""
    rng = np.random.default_rng(seed)
    dims = [(rows, d_in), (d_in, d_hidden), (d_hidden, d_hidden), (d_hidden, d_out)]
    return [(rng.standard_normal(d) / (np.sqrt(d[0]) if i else 1.0)).astype(np.float32)
            for i, d in enumerate(dims)]


def reference(x: np.ndarray, w1: np.ndarray, w2: np.ndarray, w3: np.ndarray) -> np.ndarray:
    """The same chain in float32 numpy."""
    h = np.maximum(x @ w1 + 1, 0)
    h = np.maximum(h @ w2, 0)
    return h @ w3


def run(shape: tuple[int, int, int, int] = SHAPE, seed: int = 0) -> np.ndarray:
    """Compile (through XLA's autotuner) and run the chain in bf16; returns float32 output."""
    import jax
    import jax.numpy as jnp

    args = [jnp.asarray(a, dtype=jnp.bfloat16) for a in inputs(*shape, seed=seed)]
    with jax_test_helper.stale_cache_errors():
        out = jax.jit(chain)(*args)
        return np.asarray(out.astype(jnp.float32))


def setUpModule() -> None:  # noqa: N802 - unittest's name
    # Before the first compile: XLA cannot dump into a TEST_UNDECLARED_OUTPUTS_DIR that does not
    # exist yet, and a missing load file should fail here with a clear message.
    jax_test_helper.prepare()


class MatmulChainTest(unittest.TestCase):
    def test_matches_float32_reference(self) -> None:
        got = run()
        want = reference(*inputs(*SHAPE))
        rel = np.linalg.norm(got - want) / np.linalg.norm(want)
        self.assertLess(rel, 2e-2, f"relative error {rel:.3g} against the float32 reference")

    def test_is_deterministic(self) -> None:
        np.testing.assert_array_equal(run(seed=1), run(seed=1))


if __name__ == "__main__":
    unittest.main()
