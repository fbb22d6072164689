"""This process's part of the dump (--dump_autotune_results_to): which entries it holds, when
they are written, and what runs before the last write.

The cache tells it every entry the process used (found in a tier, or tuned) and every warm-up
(triton/warmups.py); it writes them through DumpFile (dumpfile.py: the root process writes the
file, others their part of the run) whenever a newly tuned entry is recorded, and once more at
the end. Split from the cache (cache.py) so that the cache composes tiers and runs the tuning
protocol, and the dump's bookkeeping lives beside the dump file.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from autotune_cache.formats import Keyed
from autotune_cache.foundation.key import CacheKey
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store.dumpfile import DumpFile


class DumpRun:
    """The entries this process dumps, and the work before their final write. With no dump
    file (`file` None) it keeps nothing and writes nothing."""

    def __init__(self, file: DumpFile | None) -> None:
        self.file = file
        self._lock = threading.RLock()
        self._used: dict[str, Keyed] = {}
        self._dirty = False
        self._finishers: list[Callable[[], None]] = []

    def use(self, key: CacheKey, entry: pb.Entry) -> None:
        """An entry this process used (found or tuned): it belongs in the dump."""
        if self.file is not None:
            with self._lock:
                self._used[key.digest()] = (key, entry)
                self._dirty = True

    def add_warmup(self, key: CacheKey, entry: pb.Entry) -> bool:
        """A warm-up entry, unless the dump holds its key already; whether it was added."""
        if self.file is None:
            return False
        with self._lock:
            if key.digest() in self._used:
                return False
            self._used[key.digest()] = (key, entry)
            self._dirty = True
            return True

    def flush(self) -> None:
        """Write the entries now if they changed since the last write."""
        with self._lock:
            if self.file is not None and self._dirty:
                self.file.write(self._used.values())
                self._dirty = False

    def before_final(self, finisher: Callable[[], None]) -> None:
        """Run `finisher` once, right before the final write, in the order registered;
        registering it again is a no-op. It may still record entries (the deferred tunings of a
        dump run do)."""
        with self._lock:
            if finisher not in self._finishers:
                self._finishers.append(finisher)

    def _run_finishers(self) -> None:
        """Run (and forget) the finishers. Every one runs even when one fails; the first
        failure is raised afterwards, once what the others recorded is written."""
        with self._lock:
            finishers, self._finishers = self._finishers, []
        failure: BaseException | None = None
        for finisher in finishers:
            try:
                finisher()
            except Exception as e:  # noqa: BLE001 - raised below, after the others ran
                failure = failure or e
        if failure is not None:
            self.flush()
            raise failure

    def finish(self, *, failed: bool = False) -> int:
        """The last write (an empty run's dump is still written), after the finishers; the
        number of entries the dump holds. `failed`: the run failed, so the file keeps the
        entries it held before that this run did not reproduce (DumpFile.close)."""
        self._run_finishers()
        with self._lock:
            if self.file is None:
                return 0
            self._dirty = False
            return self.file.close(self._used.values(), keep_existing=failed)

    @property
    def kept(self) -> int:
        """How many entries the last finish kept from the file because the run failed."""
        return self.file.kept if self.file is not None else 0
