"""The Triton engine's per-process state: one object with a named field per part, replaced in a
forked child.

Each part of the engine keeps what it holds for this process in its own class; this object
holds the one instance of each, by name, made on first use (`made`):

| field | part | module |
| --- | --- | --- |
| `scheduler` | the one compile pool | scheduler.py |
| `compile_ahead` | loaded winners compiled before their launch | preload.py |
| `warmups` | plain-kernel warm-ups recorded and compiled ahead | warmups.py |
| `deferred` | a dump run's tunings deferred to its end | deferred.py |
| `remote_compile` | the connection to the shared compile cache | remote_compile.py |
| `queue_mode` | the one `AsyncCompileMode` of queued candidates | compile.py |
| `detached` | the targets Triton was primed for without its driver | detached.py |
| `offload` | the compile processes running Triton's back end | offload.py |

Why one object: a forked child has none of its parent's threads, so every queue, pool, lock and
half-finished compile the parent held must be forgotten there, together, or the child waits for
work no thread will do. One fork handler (`os.register_at_fork`), the package's only one,
replaces the object; the parts are made again on their next use. A child also checks the process
id on every `current()`, so a fork that bypasses the handler (`os.fork` from C) is caught too.

Not here, by design: what the package wrote into Triton itself (hooks.py) and the benchmark a
test injected (bench.py) belong to the interpreter, not to a run, and a forked child keeps them,
as it keeps the modules it imported.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

T = TypeVar("T")


class ProcessState:
    """The engine's state in one process (see the module docstring for each field)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self.scheduler: Any = None
        self.compile_ahead: Any = None
        self.warmups: Any = None
        self.deferred: Any = None
        self.remote_compile: Any = None
        self.queue_mode: Any = None
        self.detached: Any = None
        self.offload: Any = None

    def made(self, field: str, make: Callable[[], T]) -> T:
        """The part in `field` (one declared above), made with `make()` on first use."""
        found = getattr(self, field)
        if found is None:
            with self.lock:
                found = getattr(self, field)
                if found is None:
                    found = vars(self)[field] = make()
        return cast(T, found)


_state = ProcessState()


def current() -> ProcessState:
    """The state of the calling process (a new one in a forked child)."""
    state = _state
    if state.pid != os.getpid():
        _forget_parent()
        state = _state
    return state


def _forget_parent() -> None:
    """In a forked child: drop the parent's state; every part is made again on its next use.
    A switch interval the parent's pool had set while it compiled (scheduler.py) is put back:
    the child has none of its compiles. The copies of the pipes to the parent's compile
    processes (offload.py) are closed, so those end when the parent closes its own."""
    global _state
    switched = getattr(_state.scheduler, "_switched", None)
    if switched is not None and sys.getswitchinterval() == switched[1]:
        sys.setswitchinterval(switched[0])
    if _state.offload is not None:  # the parent's compile processes' pipes (offload.py)
        _state.offload.forget()
    _state = ProcessState()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parent)
