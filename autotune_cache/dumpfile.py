"""The dump file (--dump_autotune_results_to), written so that concurrent writers lose nothing.

Decision (issue 11): several processes may dump to one file (a test that starts workers, pytest
-n, a CI step that runs a suite twice). Each write takes the dump's lock file (`.<name>.lock` next
to it, via locking.file_lock), merges the entries already in the file (ours win on a shared key)
and replaces the file atomically. A dump file therefore accumulates; Bazel's outputs directory is
fresh on every run, so a `.dump` target still gets exactly that run's entries.

A process remembers what it last wrote and the file's identity (inode, size, mtime), so it only
re-reads the file when someone else changed it: a writer alone pays one parse, not one per entry.
An existing file that is not a results file is never overwritten: that is a named error.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from autotune_cache.errors import CacheDirError, CorruptFileError, LockError
from autotune_cache.formats import Keyed, keyed, parse_results, read_capped, save_keyed
from autotune_cache.locking import file_lock

log = logging.getLogger("autotune_cache")

DUMP_FLAG = "--dump_autotune_results_to"
# Writers hold the lock for one read-merge-write; waiting longer than this means a stuck peer.
LOCK_TIMEOUT_S = 120.0


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


class DumpFile:
    """One dump file, merged into on every write."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(f".{self.path.name}.lock")
        self._written: dict[str, Keyed] = {}
        self._written_identity: tuple[int, int, int] | None = None
        self._warned_lock = False

    def _existing(self) -> dict[str, Keyed]:
        identity = _identity(self.path)
        if identity is None:
            return {}
        if identity == self._written_identity:
            return dict(self._written)
        try:
            data = read_capped(self.path)
            if not data.strip():
                return {}
            entries = parse_results(data, self.path).entries
        except FileNotFoundError:
            return {}
        except CorruptFileError as e:
            raise CacheDirError(
                f"{DUMP_FLAG}={self.path}: the file there is not a results file this process can "
                f"add to ({e}); move it away or point the flag at another path.") from e
        return {key.digest(): (key, entry) for key, entry in keyed(entries)}

    def write(self, pairs: Iterable[Keyed]) -> None:
        """Merge `pairs` into the file under its lock; CacheDirError names the file on failure."""
        with contextlib.ExitStack() as stack:
            try:
                held = stack.enter_context(file_lock(self.lock_path, LOCK_TIMEOUT_S))
            except LockError as e:
                held = False
                if not self._warned_lock:
                    log.warning("autotune_cache: writing the dump without its lock (%s); "
                                "concurrent dumps to %s may drop each other's entries", e,
                                self.path)
            if not held and not self._warned_lock:
                self._warned_lock = True
            merged = self._existing()
            merged.update((key.digest(), (key, entry)) for key, entry in pairs)
            try:
                save_keyed(self.path, merged.values())
            except OSError as e:
                raise CacheDirError(
                    f"{DUMP_FLAG}={self.path}: cannot write the dump ({e.strerror or e}); free "
                    "some space or point the flag at a writable path.") from e
            self._written = merged
            self._written_identity = _identity(self.path)
