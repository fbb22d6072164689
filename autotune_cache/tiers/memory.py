"""The first tier, the process tier: what this process tuned or looked up, over the files of
--load_autotune_results_from (named for what it holds: not only memory, the loaded files too)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from autotune_cache.foundation.key import CacheKey
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store.canonical import CONVERT_HINT
from autotune_cache.store.results_index import ResultsFile, load_file
from autotune_cache.tiers.base import Found

log = logging.getLogger("autotune_cache")

THIS_PROCESS = "this process"


class ProcessTier:
    """What this process tuned or looked up, then the loaded files (the last file wins).

    Loaded files stay as `results_index.ResultsFile`s: a canonical text file is searched in
    place (store/searched.py), others indexed by (kernel, problem), and entries are parsed and
    keyed on first use, so loading a large committed file costs no per-entry work."""

    name = "memory"
    shared = False
    writable = True

    def __init__(self, loaded: list[ResultsFile] | None = None,
                 files: tuple[Path, ...] = ()) -> None:
        self.memory: dict[str, Found] = {}
        # Searched last to first: a later file overrides an earlier one's entry for a key.
        self.loaded: list[ResultsFile] = loaded or []
        self.files = files

    @classmethod
    def from_files(cls, paths: Iterable[Path],
                   read_from: Callable[[Path], Path] | None = None) -> ProcessTier:
        """Load every results file; a later file overrides an earlier one's entry for a key.
        `read_from(path)`: where to read a file's bytes (a dump run's snapshot), if not at
        `path`; messages name `path`."""
        paths = tuple(paths)
        loaded = [load_file(path, read_from=None if read_from is None else read_from(path))
                  for path in paths]
        if log.isEnabledFor(logging.DEBUG):
            for i, later in enumerate(loaded):
                for earlier in loaded[:i]:
                    for kernel, problem in sorted(later.problems() & earlier.problems()):
                        # Entries stay unparsed here: name the (kernel, problem), not keys.
                        log.debug("autotune_cache: %s overrides %s for any key both hold "
                                  "(both have entries of kernel %s, problem [%s])", later.path,
                                  earlier.path, kernel, problem)
        return cls(loaded, paths)

    def searched(self) -> list[str]:
        return [str(p) for p in self.files]

    def in_memory(self, key: CacheKey) -> bool:
        """Whether this process already holds `key` (looked up or tuned here)."""
        return key.digest() in self.memory

    def forget(self, key: CacheKey) -> Found | None:
        """Drop what this process holds for `key` (a rejected winner: Cache.reject_winner);
        what it held, if anything."""
        return self.memory.pop(key.digest(), None)

    def remember(self, found: Found) -> None:
        """Keep an entry found in any tier, with its origin, for the next lookup."""
        self.memory[found.key.digest()] = found

    def get(self, key: CacheKey) -> Found | None:
        found = self.memory.get(key.digest())
        if found is not None:
            return found
        found = self._from_files(key)
        if found is None and any(file.searched for file in self.loaded):
            # A search's miss trusts the file's order (searched.py); prove it before anyone
            # acts on it: a miss costs a tuning or a strict failure, a read is cheap beside.
            for file in self.loaded:
                file.prove()
            found = self._from_files(key)
            if found is not None:
                log.info("autotune_cache: %s holds %s where a search could not find it, so it "
                         "is read whole: its entries are not in the writer's order; %s",
                         found.origin, key.describe(),
                         CONVERT_HINT.format(path=found.origin))
        return found

    def _from_files(self, key: CacheKey) -> Found | None:
        for file in reversed(self.loaded):
            got = file.get(key)
            if got is not None:
                return Found(got[1], got[0], str(file.path))
        return None

    def put(self, key: CacheKey, entry: pb.Entry) -> None:
        self.memory[key.digest()] = Found(entry, key, THIS_PROCESS)

    def same_problem(self, key: CacheKey) -> Iterator[Found]:
        yield from list(self.memory.values())
        for file in reversed(self.loaded):
            for k, entry in file.same_problem(key):
                yield Found(entry, k, str(file.path))

    def loaded_entries(self, kernel: str, *, max_entries: int, max_unparsed_bytes: int
                       ) -> list[tuple[CacheKey, pb.Entry]]:
        """Every (key, entry) of `kernel` in the loaded files, earlier files first; none when
        they hold more than `max_entries` of them or more than `max_unparsed_bytes` of their
        text is still unparsed (see Cache.loaded_entries)."""
        entries, unparsed = self.loaded_cost(kernel)
        if entries > max_entries or unparsed > max_unparsed_bytes:
            return []
        return [item for file in self.loaded for item in file.items(kernel)]

    def loaded_cost(self, kernel: str) -> tuple[int, int]:
        """What loaded_entries(kernel) would read: how many entries of `kernel` the loaded files
        hold, and how many bytes of their text are still unparsed."""
        files = self.loaded
        return (sum(f.count_of(kernel) for f in files),
                sum(f.unparsed_bytes_of(kernel) for f in files))

    def loaded_kernels(self) -> set[str]:
        """The kernel names the loaded files hold entries of (nothing is parsed)."""
        return {kernel for file in self.loaded for kernel in file.kernels()}

    def lock(self, key: CacheKey, timeout: float) -> contextlib.nullcontext[bool]:
        """Nothing to lock: no other process sees this tier."""
        return contextlib.nullcontext(False)
