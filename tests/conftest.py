"""Process-wide library state that one test must not leak into the next (pytest-xdist runs any
test after any other in a worker): the `autotune_cache` logger's level and handlers, and where
autotune_cache.foundation.console sends its lines."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from autotune_cache.foundation import console


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest first: the tests marked `bazel` (real Bazel) or `slow` (real kernels, many
    processes) go to the pytest-xdist workers before the quick ones, so that the quick ones fill
    in at the end instead of one slow test running alone while the other workers idle. The sort
    is stable: each group keeps the collection order, so a module's tests stay together."""
    items.sort(key=lambda item: 0 if item.get_closest_marker("bazel")
               or item.get_closest_marker("slow") else 1)


@pytest.fixture(autouse=True)
def _library_output_restored() -> Iterator[None]:
    logger = logging.getLogger("autotune_cache")
    level, handlers = logger.level, list(logger.handlers)
    yield
    logger.setLevel(level)
    logger.handlers[:] = handlers
    console.set_sink(None)
