"""The fake library's own tests, as a library ships them."""

from __future__ import annotations

import os

import pytest
import torch
from fakelib import add, scale

DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"


@pytest.mark.parametrize("n", [100, 1000])
def test_scale(n: int) -> None:
    x = torch.randn(n, device=DEVICE)
    torch.testing.assert_close(scale(x, 3.0), x * 3.0)


@pytest.mark.parametrize("n", [100, 1000])
def test_add(n: int) -> None:
    x, y = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
    torch.testing.assert_close(add(x, y), x + y)


def test_skipped_like_a_library_test() -> None:
    pytest.skip("kept to check that outcomes other than passed are compared too")
