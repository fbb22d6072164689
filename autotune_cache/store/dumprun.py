"""This process's part of the dump (--dump_autotune_results_to): which entries it holds, when
they are written, and what runs before the last write.

The cache tells it every entry the process used (found in a tier, or tuned) and every warm-up
(triton/warmups.py); it writes them through DumpFile (dumpfile.py: a member of the run writes
its part whenever a newly tuned entry is recorded; the root writes the file once, at the end,
by the ownership rule of dumprule.py). The root then shows the dump's one line
(dumprule.DumpOutcome.line) unless a runner shows it itself (the pytest plugin's summary).

Split from the cache (cache.py) so that the cache composes tiers and runs the tuning protocol,
and the dump's bookkeeping lives beside the dump file.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from autotune_cache.formats import Keyed
from autotune_cache.foundation import console, env
from autotune_cache.foundation.key import CacheKey
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store.dumpfile import DumpFile
from autotune_cache.store.dumprule import FULL, KINDS, SUBSET, DumpOutcome

# Bazel's --test_filter reaches the test as this variable: the run selected a subset.
_TEST_FILTER_VAR = "TESTBRIDGE_TEST_ONLY"


class DumpRun:
    """The entries this process dumps, and the work before their final write. With no dump
    file (`file` None) it keeps nothing and writes nothing."""

    def __init__(self, file: DumpFile | None) -> None:
        self.file = file
        self._lock = threading.RLock()
        self._used: dict[str, Keyed] = {}
        self._dirty = False
        self._finishers: list[Callable[[], None]] = []
        self._kind = FULL
        self._selection = ""
        self._line_shown_elsewhere = False
        if env.get(_TEST_FILTER_VAR):
            self.select(SUBSET, f"--test_filter={env.get(_TEST_FILTER_VAR)}")

    def select(self, kind: str, selection: str = "") -> None:
        """Say what kind of run this is (dumprule: FULL or SUBSET; `selection` how a subset
        was chosen, for the dump line): a runner knows (the pytest plugin: a path, -k, -m,
        --lf), a plain process is a full run unless Bazel's test filter is set."""
        if kind not in KINDS:
            raise ValueError(f"unknown kind of dump run {kind!r}")
        self._kind, self._selection = kind, selection

    def show_line_elsewhere(self) -> None:
        """A runner shows the dump's line itself (the pytest plugin's terminal summary)."""
        self._line_shown_elsewhere = True

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
            # What the others recorded is written, as a failed run's dump: the key that could
            # not be tuned keeps the entry the file held for it.
            self._close(failed=True)
            raise failure

    def finish(self, *, failed: bool = False) -> int:
        """The last write (an empty run's dump is still written), after the finishers; the
        number of entries the dump holds. `failed`: the run failed, so the file keeps the
        entries it held before that this run did not reproduce (DumpFile.close). The root
        shows the dump's line (unless show_line_elsewhere)."""
        self._run_finishers()
        return self._close(failed=failed)

    def _close(self, *, failed: bool) -> int:
        with self._lock:
            if self.file is None:
                return 0
            self._dirty = False
            before = self.file.outcome
            count = self.file.close(self._used.values(), keep_existing=failed, kind=self._kind,
                                    selection=self._selection)
            outcome = self.file.outcome
            if outcome is not None and outcome is not before and not self._line_shown_elsewhere:
                console.say(f"autotune_cache: {outcome.line()}")
            return count

    @property
    def outcome(self) -> DumpOutcome | None:
        """What the root's last finish did to the dump file (None elsewhere, or before)."""
        return self.file.outcome if self.file is not None else None

    @property
    def kept(self) -> int:
        """How many of the file's earlier entries the last finish kept."""
        return self.file.kept if self.file is not None else 0
