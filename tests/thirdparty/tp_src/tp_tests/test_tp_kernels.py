"""tp_kernels' own tests, run by pytest from the venv the wheel is installed in."""

from __future__ import annotations

import pytest
import torch
import tp_kernels


@pytest.mark.parametrize("n", [50, 200])
def test_every_spelling(n: int) -> None:
    x = torch.randn(n)
    torch.testing.assert_close(tp_kernels.scale(x), x * 2)
    torch.testing.assert_close(tp_kernels.add(x, x), x + x)
    torch.testing.assert_close(tp_kernels.square(x), x * x)
    torch.testing.assert_close(tp_kernels.negate(x), -x)
