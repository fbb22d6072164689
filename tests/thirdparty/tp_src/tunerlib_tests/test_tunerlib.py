"""tunerlib's own tests, as its maintainers wrote them."""

import torch
import tunerlib


def test_rownorm() -> None:
    x = torch.arange(200, dtype=torch.float32)
    assert torch.equal(tunerlib.rownorm(x), x / 2)


def test_shift() -> None:
    x = torch.arange(300, dtype=torch.float32)
    assert torch.equal(tunerlib.shift(x), x + 1)
