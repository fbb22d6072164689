"""The Triton engine's per-process state: one object, replaced in a forked child.

Each part of the engine keeps what it holds for this process (the compile scheduler, the
compile-ahead of loaded winners, the deferred tunings, the warm-up bookkeeping, the remote
compile cache's client) in its own class, and reaches the one instance of it through
`current().part(ThatClass)`: made on first use, by calling the class with no arguments.

Why one object: a forked child has none of its parent's threads, so every queue, pool, lock and
half-finished compile the parent held must be forgotten there, together, or the child waits for
work no thread will do. One fork handler (`os.register_at_fork`) replaces the object; the parts
are made again on their next use. A child also checks the process id on every `current()`, so a
fork that bypasses the handler (`os.fork` from C) is caught too.

Not here, by design: what the package installed into Triton itself (the patched `Autotuner`
class in classroute.py, the modules routed in routing.py, the compile hook in warmups.py) and
the benchmark a test injected (bench.py) belong to the interpreter, not to a run, and a forked
child keeps them, as it keeps the modules it imported.
"""

from __future__ import annotations

import os
import threading
from typing import Any, TypeVar

T = TypeVar("T")


class ProcessState:
    """The engine's state in one process: its parts, by class (see the module docstring)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self._parts: dict[type, Any] = {}

    def part(self, kind: type[T]) -> T:
        """This process's instance of `kind`, made (as `kind()`) on first use."""
        found = self._parts.get(kind)
        if found is None:
            with self.lock:
                found = self._parts.get(kind)
                if found is None:
                    found = self._parts[kind] = kind()
        return found

    def existing(self, kind: type[T]) -> T | None:
        """This process's instance of `kind` if one was made, else None (nothing is made)."""
        return self._parts.get(kind)


_state = ProcessState()


def current() -> ProcessState:
    """The state of the calling process (a new one in a forked child)."""
    state = _state
    if state.pid != os.getpid():
        _forget_parent()
        state = _state
    return state


def _forget_parent() -> None:
    """In a forked child: drop the parent's state; every part is made again on its next use."""
    global _state
    _state = ProcessState()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parent)
