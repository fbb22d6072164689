"""A pytest-style test (no `__main__`): BUILD.bazel runs it with `runner = "pytest"`."""

import pytest
from kernels import affine


@pytest.mark.parametrize("n", [64, 300])
def test_affine(n: int) -> None:
    affine.check(n)
