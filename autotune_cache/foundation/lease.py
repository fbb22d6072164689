"""A Redis lock held as a short lease that a background thread renews while its holder works.

The lock is a lease of LOCK_LEASE_S seconds: the holder's thread renews it every third of the
lease, so a live holder keeps it however long tuning takes, and a dead holder's lease runs out
within LOCK_LEASE_S. A waiter that gives up (its own timeout) tunes without the lock; a key tuned
twice costs time, never results. (docs/decisions/0005-redis-lease.md)
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("autotune_cache")


@contextlib.contextmanager
def renewed_lease(client: Any, name: str, lease_s: float, wait_s: float,
                  errors: tuple[type[BaseException], ...]) -> Iterator[bool]:
    """Hold Redis lock `name` as a renewed lease; yields True once held, False when another
    holder still had it after `wait_s` seconds. Server errors propagate (the caller decides)."""
    lock = client.lock(name, timeout=lease_s, blocking_timeout=wait_s, thread_local=False)
    if not lock.acquire():
        yield False
        return
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(lease_s / 3):
            try:
                lock.reacquire()
            except errors as e:  # lost the lease (server restart, a long pause): say so once
                log.warning("autotune_cache: could not renew the remote lock %s (%s); another "
                            "process may tune the same key", name, e)
                return

    renewer = threading.Thread(target=renew, name=f"autotune-lease-{name[-8:]}", daemon=True)
    renewer.start()
    try:
        yield True
    finally:
        stop.set()
        renewer.join()
        with contextlib.suppress(*errors):
            lock.release()
