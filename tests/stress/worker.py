"""Subprocess bodies for the concurrency stress tests (run with `python -m tests.stress.worker`)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from autotune_cache import Cache, Settings
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store.dirstore import DirectoryStore
from tests.cachetools import fake_tune, make_key

SHARED_KEYS = 20


def keys_for(worker: int, per_worker: int):
    """Keys only this worker writes, then keys every worker writes."""
    own = [make_key(problem={"W": worker, "i": i}) for i in range(per_worker)]
    shared = [make_key(problem={"S": i}) for i in range(SHARED_KEYS)]
    return own + shared


def write_and_read(directory: str, worker: int, per_worker: int) -> None:
    """Tune through a shared directory while checking that every read is whole."""
    cache = Cache(Settings(cache_dir=Path(directory)))
    store = DirectoryStore(directory)
    for key in keys_for(worker, per_worker):
        if cache.lookup(key) is None:
            cache.record(fake_tune(key))
        # Any entry readable in the directory must be complete and carry its own key.
        for path, entry, problem in store.scan():
            assert entry is not None, f"partial or corrupt entry seen: {path}: {problem}"
            assert entry.result.candidates, path


def big_entry(i: int) -> pb.Entry:
    entry = fake_tune(make_key(kernel="victim"))
    entry.result.tuner_version = f"write-{i}"
    entry.result.candidates.extend(list(entry.result.candidates) * 1000)
    return entry


def writer_forever(directory: str) -> None:
    """Rewrite one large entry in a loop until killed."""
    store = DirectoryStore(directory)
    i = 0
    while True:
        store.put(big_entry(i))
        i += 1


def reader(directory: str, seconds: float) -> None:
    """Read the victim entry repeatedly; it must always be absent or whole."""
    store = DirectoryStore(directory)
    key = make_key(kernel="victim")
    path = store.path_for(key)
    deadline = time.time() + seconds
    reads = 0
    while time.time() < deadline:
        if path.exists():
            entry = store._read(path)  # raises on any partial file
            assert len(entry.result.candidates) == 6 * 1001, "partial entry read"
            reads += 1
    print(reads)


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    if mode == "write_and_read":
        write_and_read(rest[0], int(rest[1]), int(rest[2]))
    elif mode == "writer_forever":
        writer_forever(rest[0])
    elif mode == "reader":
        reader(rest[0], float(rest[1]))
