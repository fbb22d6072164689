"""Fixtures for the Triton autotuner tests: CPU interpreter, a fresh cache per test, fakes."""

from __future__ import annotations

import os

# Kernels in these tests run on Triton's CPU interpreter with CPU tensors, GPU or not; Triton reads
# the variable when @triton.jit runs, so it must be set before tests/triton/kernels.py is imported.
os.environ.setdefault("TRITON_INTERPRET", "1")

from collections.abc import Callable, Iterator  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

import autotune_cache  # noqa: E402
from autotune_cache import Cache, Settings  # noqa: E402
from autotune_cache.triton import bench  # noqa: E402


@pytest.fixture
def use_cache() -> Iterator[Callable[..., Cache]]:
    """Configure the process-wide cache from Settings keyword arguments; reset after the test."""

    def configure(**settings: Any) -> Cache:
        return autotune_cache.configure(Settings(**settings))

    configure()
    yield configure
    configure()


@dataclass
class FakeBench:
    """A deterministic benchmark: time = table[BLOCK_SIZE] (ms); records every call."""

    table: dict[int, float]
    fail: dict[int, str] = field(default_factory=dict)
    calls: list[int] = field(default_factory=list)

    def __call__(self, config: Any, problem: Any) -> float:
        block = config.kwargs["BLOCK_SIZE"]
        self.calls.append(block)
        if block in self.fail:
            raise RuntimeError(self.fail[block])
        return self.table[block]


@pytest.fixture
def fake() -> Iterator[Callable[..., FakeBench]]:
    """Install a FakeBench (built from a {BLOCK_SIZE: ms} table) for the test's duration."""
    installed: list[FakeBench] = []

    def install(table: dict[int, float], fail: dict[int, str] | None = None) -> FakeBench:
        fb = FakeBench(dict(table), dict(fail or {}))
        bench.set_fake_benchmark(fb)
        installed.append(fb)
        return fb

    yield install
    bench.set_fake_benchmark(None)
