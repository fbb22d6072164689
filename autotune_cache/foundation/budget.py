"""TimeBudget: how long one process may wait for a shared server before giving it up.

A server that answers every call just under its socket timeout never fails a call, so it is
never disabled by an error: each lookup silently costs seconds. Both Redis users (the results
tier, tiers/redis.py, and Triton's remote compile cache, triton/remote_compile.py) count their
waits against one of these and turn the server off, with one warning, once it is spent.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

REMOTE_TIME_BUDGET_S = 10.0  # a healthy server answers in milliseconds


class TimeBudget:
    """Seconds spent waiting, against a limit."""

    def __init__(self, limit_s: float = REMOTE_TIME_BUDGET_S) -> None:
        self.limit_s = limit_s
        self.spent_s = 0.0

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        """Count the time the block takes (also when it raises)."""
        start = time.monotonic()
        try:
            yield
        finally:
            self.spent_s += time.monotonic() - start

    @contextlib.contextmanager
    def waiting(self, what: str, then: str, give_up: Callable[[str], None]) -> Iterator[None]:
        """Count the block's time; once the budget is spent, call `give_up` with the warning
        that says so (the owner turns the server off, and warns once)."""
        try:
            with self.timed():
                yield
        finally:
            if self.spent:
                give_up(self.warning(what, then))

    @property
    def spent(self) -> bool:
        """Whether more than the limit has been waited."""
        return self.spent_s > self.limit_s

    def warning(self, what: str, then: str) -> str:
        """The one line that gives `what` up: how long was waited, the limit, what happens."""
        return (f"autotune_cache: {what} is too slow: this process waited {self.spent_s:.1f} s "
                f"for it (the budget is {self.limit_s:.0f} s per process); {then}")
