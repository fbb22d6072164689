"""Process-wide library state that one test must not leak into the next (pytest-xdist runs any
test after any other in a worker): the `autotune_cache` logger's level and handlers, and where
autotune_cache.foundation.console sends its lines."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from autotune_cache.foundation import console


@pytest.fixture(autouse=True)
def _library_output_restored() -> Iterator[None]:
    logger = logging.getLogger("autotune_cache")
    level, handlers = logger.level, list(logger.handlers)
    yield
    logger.setLevel(level)
    logger.handlers[:] = handlers
    console.set_sink(None)
