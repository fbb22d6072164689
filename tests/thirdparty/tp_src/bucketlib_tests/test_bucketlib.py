"""bucketlib's own tests, as its maintainers wrote them."""

import bucketlib
import pytest
import torch


@pytest.mark.parametrize("n", [100, 120, 300])
def test_scale(n: int) -> None:
    x = torch.arange(n, dtype=torch.float32)
    assert torch.equal(bucketlib.scale(x), x * 3)


@pytest.mark.parametrize("n", [50, 64, 200])
def test_halve(n: int) -> None:
    x = torch.arange(n, dtype=torch.float32)
    assert torch.equal(bucketlib.halve(x), x / 2)
