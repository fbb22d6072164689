"""Searching a canonical text results file in place: a load reads a few bytes, a lookup bisects
the file and parses only its entry's block, whatever the file's size.

A test process that loads a 10,000-entry committed file (39 MB) and looks up ten keys used to
read and scan all of it: about 140 ms, most of a test process's cost (bench/process_cost.py).
The writer sorts entries by key, kernel then problem first (canonical.py), so the blocks of one
(kernel, problem) are adjacent and a bisection by byte offset finds them: each probe reads a
few kilobytes with `os.pread` from a descriptor opened at load, so the file read is the one
the load found even if it is replaced later, and no file is mapped (a mapping of a file
truncated by an editor would kill the process).

The contract (docs/decisions/0032-search-the-committed-file.md):
- A load checks only that the file starts `version: 1`, `entries {` and ends with a `}` line.
- A hit's block is parsed alone and is used only when it is exactly one entry whose key has
  the kernel and problem of its first lines (canonical.py says why that is the entry a full
  parse gives). The blocks of its (kernel, problem) are read to their run's end, so a key held
  twice in a row gives the last, as a full parse does.
- Whatever a search meets that the writer would not have written (a block whose first lines
  are not the writer's, blocks out of order, an entry that does not match its first lines)
  drops the search: the file is read whole and loaded as `results_index` loads any file, and
  every later question is answered from that.
- A miss is proven before anyone acts on it: the memory tier asks `prove()`, which reads the
  file whole, when no loaded file holds a key. A miss costs a tuning or a strict failure, so
  it can afford the read; a hit, the common case, never pays it.
- What a search cannot see: a key held twice far apart in a file out of order outside the
  blocks probed. The writer never writes one; `autotune-cache verify` reports both.
"""

from __future__ import annotations

import bisect
import functools
import logging
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn, Protocol, TypeVar

from google.protobuf import text_format

from autotune_cache.errors import AutotuneCacheError, CorruptFileError
from autotune_cache.foundation.key import CacheKey
from autotune_cache.foundation.limits import (
    MAX_ENTRY_BYTES,
    MAX_TEXT_BYTES,
    describe,
)
from autotune_cache.foundation.safeio import open_regular
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store.canonical import (
    BOUNDARY,
    CONVERT_HINT,
    END,
    HEAD,
    KEY_HEAD,
    NEXT_BLOCK,
    START,
    Head,
    head_of,
    parse_block,
)

log = logging.getLogger("autotune_cache")

T = TypeVar("T")
Keyed = tuple[CacheKey, pb.Entry]

# Bytes read by the first step of a search for the next block (about a typical block), doubled
# at each later step up to the maximum.
_WINDOW = 4096
_WINDOW_MAX = 256 * 1024
_HEAD_WINDOW = 4096  # bytes read for a block's first lines (more when they are longer)
# The line that closes a block's key (its nested messages' are indented further), and what
# may follow it: another field of the entry, or the entry's end.
_KEY_CLOSE = b"\n  }\n"
_ENTRY_FIELD = re.compile(rb"  [a-z_]+ \{\n|\}\n")
# Kernels listed by jumping from one kernel's blocks to the next; past this many, reading the
# file whole is cheaper.
_KERNEL_JUMPS = 64


class LoadedFile(Protocol):
    """What answers once a search is dropped: `results_index.LoadedFile`, the file read whole
    (named here by its interface, so that this module does not import that one)."""

    @property
    def indexed(self) -> bool: ...
    @property
    def entries(self) -> dict[int, pb.Entry]: ...
    def get(self, key: CacheKey) -> Keyed | None: ...
    def same_problem(self, key: CacheKey) -> Iterator[Keyed]: ...
    def items(self, kernel: str | None = None) -> Iterator[Keyed]: ...
    def count_of(self, kernel: str) -> int: ...
    def unparsed_bytes_of(self, kernel: str) -> int: ...
    def kernels(self) -> set[str]: ...
    def problems(self) -> set[tuple[str, str]]: ...
    def __len__(self) -> int: ...


class _Drop(Exception):
    """The file is to be read whole; the message says why. `asked`: because a question needs
    the whole file, not because the file is not what a search may trust (said at info)."""

    def __init__(self, why: str, *, asked: bool = False) -> None:
        super().__init__(why)
        self.asked = asked


def open_searched(path: Path, source: Path, load_whole: Callable[[bytes], LoadedFile]
                  ) -> SearchedFile | None:
    """A search of the text results file `source` (messages name `path`) when it starts and
    ends as the writer's output does; None otherwise, or when it cannot be opened as a regular
    file within the read limit (the whole-file load then says why), or where the platform has
    no `os.pread`. `load_whole(data)` loads the file's bytes when a search is dropped."""
    if not hasattr(os, "pread"):
        return None
    try:
        fd = open_regular(source)
    except (OSError, AutotuneCacheError):
        return None
    try:
        size = os.fstat(fd).st_size
        opening = HEAD + START
        if (size <= MAX_TEXT_BYTES
                and size >= len(opening) + len(END)
                and os.pread(fd, len(opening), 0) == opening
                and os.pread(fd, len(END), size - len(END)) == END):
            return SearchedFile(path, fd, size, load_whole)
    except OSError:
        pass
    os.close(fd)
    return None


class SearchedFile:
    """One loaded canonical text results file, searched in place (module docstring); the
    interface of `results_index.LoadedFile`, which answers instead once the search is
    dropped."""

    def __init__(self, path: Path, fd: int, size: int,
                 load_whole: Callable[[bytes], LoadedFile]) -> None:
        self.path = path
        self.size = size
        self._fd = fd
        self._close = weakref.finalize(self, os.close, fd)
        self._load_whole = load_whole
        self._full: LoadedFile | None = None
        self._locks: dict[int, threading.Lock] = {}  # by process id: see _lock
        self._top = len(HEAD)  # the first block's start
        self._heads: dict[int, Head] = {}  # block start -> its (kernel, problem)
        self._probed: list[int] = []  # starts whose heads a bisection compared, in order
        self._ends: dict[int, int] = {}  # block start -> the next block's start, or size
        self._after: dict[int, int] = {}  # offset -> the first block start at or after it
        self._entries: dict[int, Keyed] = {}  # block start -> its parsed key and entry
        self._digests: dict[int, str | None] = {}  # block start -> its key's digest, alone
        self._kernels: dict[str, list[int]] = {}  # kernel -> its blocks' starts

    # ----- the interface of LoadedFile ------------------------------------------------------

    @property
    def indexed(self) -> bool:
        """Whether entries are parsed on use (always, for a search)."""
        return self._full is None or self._full.indexed

    @property
    def searched(self) -> bool:
        """Whether the file is still searched in place (not read whole)."""
        return self._full is None

    @property
    def entries(self) -> dict[int, pb.Entry]:
        """The entries parsed so far, by block start (LoadedFile's, once read whole)."""
        if self._full is not None:
            return self._full.entries
        return {start: entry for start, (_, entry) in self._entries.items()}

    def get(self, key: CacheKey) -> Keyed | None:
        """The key and entry recorded for `key`, or None (proven only by prove())."""
        return self._answer(lambda: self._find(key), lambda full: full.get(key))

    def same_problem(self, key: CacheKey) -> Iterator[Keyed]:
        """Every (key, entry) of key's kernel and problem, once per key."""
        yield from self._answer(lambda: list(self._by_digest(self._run(key)).values()),
                                lambda full: list(full.same_problem(key)))

    def items(self, kernel: str | None = None) -> Iterator[Keyed]:
        """Every (key, entry), or those of one kernel, once per key: each is parsed."""
        if kernel is None:
            yield from self._answer(self._drop_for("every entry is asked for"),
                                    lambda full: list(full.items()))
            return
        yield from self._answer(lambda: list(self._by_digest(self._kernel(kernel)).values()),
                                lambda full: list(full.items(kernel)))

    def count_of(self, kernel: str) -> int:
        """How many entries the file holds for `kernel`."""
        return self._answer(lambda: len(self._kernel(kernel)), lambda full: full.count_of(kernel))

    def unparsed_bytes_of(self, kernel: str) -> int:
        """The bytes of text `items(kernel)` would still parse."""
        return self._answer(
            lambda: sum(self._end(s) - s for s in self._kernel(kernel) if s not in self._entries),
            lambda full: full.unparsed_bytes_of(kernel))

    def kernels(self) -> set[str]:
        """Every kernel name the file holds entries of (nothing is parsed)."""
        return self._answer(self._kernel_names, lambda full: full.kernels())

    def problems(self) -> set[tuple[str, str]]:
        """Every (kernel, problem) the file holds an entry for: the file is read whole."""
        return self._answer(self._drop_for("every problem is asked for"),
                            lambda full: full.problems())

    def __len__(self) -> int:
        """How many entries the file holds: the file is read whole."""
        return self._answer(self._drop_for("its entries are counted"), len)

    def prove(self) -> None:
        """Read the file whole, so that a miss is a miss whatever the file's order."""
        self._answer(self._drop_for("a key is missing"), lambda full: None)

    # ----- answering ------------------------------------------------------------------------

    def _answer(self, search: Callable[[], T], full: Callable[[LoadedFile], T]) -> T:
        with self._lock():
            if self._full is None:
                try:
                    return search()
                except _Drop as e:
                    self._read_whole(str(e), asked=e.asked)
            assert self._full is not None
            return full(self._full)

    def _lock(self) -> threading.Lock:
        """This process's lock. A forked child has none of its parent's threads, so a lock one
        of them held (a compile-ahead's scan) would never be released: each process makes its
        own, by `setdefault`, which one thread wins. The descriptor is shared and pread keeps
        no offset, so a child searches the same file."""
        pid = os.getpid()
        lock = self._locks.get(pid)
        return lock if lock is not None else self._locks.setdefault(pid, threading.Lock())

    @staticmethod
    def _drop_for(why: str) -> Callable[[], NoReturn]:
        def drop() -> NoReturn:
            raise _Drop(why, asked=True)
        return drop

    def _read_whole(self, why: str, *, asked: bool) -> None:
        """Stop searching: load the bytes the descriptor reads, as any file is loaded."""
        data = self._read(0, self.size, whole=True)
        # Loaded before the descriptor is closed: a load that raises (damage elsewhere in the
        # file) leaves the search as it was, so the next question raises the same error, never
        # reads a descriptor number the process has since given to another file.
        self._full = self._load_whole(data)
        self._close()
        if asked:
            log.debug("autotune_cache: %s is read whole: %s", self.path, why)
        else:
            log.info("autotune_cache: %s is read whole: %s; %s", self.path, why,
                     CONVERT_HINT.format(path=self.path))

    # ----- reading --------------------------------------------------------------------------

    def _read(self, start: int, end: int, *, whole: bool = False) -> bytes:
        """The bytes from `start` to `end`; a file shorter than at load (truncated in place)
        drops the search, and `whole` reads what is left of it."""
        parts = []
        while start < end:
            part = os.pread(self._fd, end - start, start)
            if not part:
                if whole:
                    break
                raise _Drop("it is shorter than when it was loaded (rewritten in place)")
            parts.append(part)
            start += len(part)
        return b"".join(parts)

    def _start_from(self, offset: int) -> int:
        """The first block start at or after `offset`, or the file's size."""
        if offset <= self._top:
            return self._top
        known = self._after.get(offset)
        if known is not None:
            return known
        found, pos = self.size, offset - 3  # a boundary's `\n}\n` precedes the start
        window = _WINDOW
        while pos < self.size:
            chunk = self._read(pos, min(pos + window, self.size))
            at = chunk.find(BOUNDARY)
            if at >= 0:
                found = pos + at + 3
                break
            if pos + len(chunk) >= self.size:
                break
            pos += len(chunk) - (len(BOUNDARY) - 1)
            window = min(2 * window, _WINDOW_MAX)
        self._after[offset] = found
        return found

    def _start_back(self, offset: int, floor: int) -> int:
        """The last block start in (floor, offset], or `floor` when there is none."""
        stop = offset - 3 + len(BOUNDARY)  # a boundary ending here starts a block at offset
        window = _WINDOW
        while stop > floor:
            begin = max(floor - 2, stop - window)  # a start past floor has its `\n}\n` here
            at = self._read(begin, stop).rfind(BOUNDARY)
            if at >= 0:
                return begin + at + 3
            if begin == floor - 2:
                break
            stop = begin + len(BOUNDARY) - 1
            window = min(2 * window, _WINDOW_MAX)
        return floor

    def _end(self, start: int) -> int:
        end = self._ends.get(start)
        if end is None:
            end = self._ends[start] = self._start_from(start + 1)
        if end - start > MAX_ENTRY_BYTES:
            raise CorruptFileError(
                f"{self.path}: the entry at byte {start} is {end - start:,} bytes, more than "
                f"the {describe(MAX_ENTRY_BYTES)} one entry may have; no tuner writes such an "
                "entry, so the file is damaged or not ours. Regenerate it.")
        return end

    def _head(self, start: int) -> Head:
        """The (kernel, problem) of the block at `start`, checked against the heads read
        before and after it in the file."""
        head = self._heads.get(start)
        if head is None:
            chunk = self._read(start, min(start + _HEAD_WINDOW, self.size))
            found = KEY_HEAD.match(chunk)
            if found is None and len(chunk) == _HEAD_WINDOW:
                chunk = self._read(start, min(start + MAX_ENTRY_BYTES, self.size))
                found = KEY_HEAD.match(chunk)
            head = self._keep_head(start, found)
        probes = self._probed
        i = bisect.bisect_left(probes, start)
        if i == len(probes) or probes[i] != start:
            if (i and self._heads[probes[i - 1]] > head) \
                    or (i < len(probes) and self._heads[probes[i]] < head):
                raise _Drop("its entries are not in the writer's order (hand-edited, or "
                            "merged by hand)")
            probes.insert(i, start)
        return head

    def _keep_head(self, start: int, found: re.Match[bytes] | None) -> Head:
        """The (kernel, problem) of the block at `start` from its KEY_HEAD match, kept; a block
        whose first lines are not the writer's drops the search."""
        head = None if found is None else head_of(found)
        if head is None:
            raise _Drop(f"the block at byte {start} does not start as the writer writes one")
        self._heads[start] = head
        return head

    # ----- searching ------------------------------------------------------------------------

    def _first(self, before: Callable[[Head], bool]) -> int:
        """The start of the first block whose head is not `before` (a predicate true for a
        prefix of the writer's order), or the file's size."""
        lo = self._top
        if not before(self._head(lo)):
            return lo
        hi = self.size  # lo: a start whose head is before; hi: the size, or one whose is not
        while True:
            middle = max((lo + hi) // 2, lo + 1)
            probe = self._start_from(middle)
            if probe >= hi:  # no block starts in the upper half: take the one the middle is in
                probe = self._start_back(middle, lo)
                if probe <= lo:
                    return hi
            if before(self._head(probe)):
                lo = probe
            else:
                hi = probe

    def _run(self, key: CacheKey) -> list[int]:
        """The starts of the blocks of key's kernel and problem."""
        head = (key.kernel, key.problem)
        start, run = self._first(lambda h: h < head), []
        while start < self.size and self._head(start) == head:
            run.append(start)
            start = self._end(start)
        return run

    def _kernel(self, kernel: str) -> list[int]:
        """The starts of the blocks of `kernel`, read from its span of the file."""
        starts = self._kernels.get(kernel)
        if starts is None:
            lo = self._first(lambda h: h[0] < kernel)
            hi = self._first(lambda h: h[0] <= kernel)
            span = self._read(lo, hi) if lo < hi else b""
            starts = [lo + at for at in [0, *(m.end() for m in NEXT_BLOCK.finditer(span))]
                      if lo + at < hi] if span else []
            for start, end in zip(starts, [*starts[1:], hi][:len(starts)], strict=True):
                self._ends.setdefault(start, end)
                head = self._heads.get(start)
                if head is None:
                    head = self._keep_head(start, KEY_HEAD.match(span, start - lo))
                if head[0] != kernel:
                    raise _Drop(f"the blocks of kernel {kernel} are not adjacent")
            self._kernels[kernel] = starts
        return starts

    def _kernel_names(self) -> set[str]:
        names: set[str] = set()
        start = self._top
        while start < self.size:
            if len(names) == _KERNEL_JUMPS:
                raise _Drop(f"every kernel is asked for, and it holds over {_KERNEL_JUMPS}")
            kernel = self._head(start)[0]
            names.add(kernel)
            start = self._first(functools.partial(_at_or_before, kernel))
        return names

    def _find(self, key: CacheKey) -> Keyed | None:
        """The key's entry in its (kernel, problem) run. A run of several blocks (other
        devices, toolchains or sources: a file's history) has each block's key parsed alone
        first, about a tenth of its entry, and only blocks whose key may be this one parsed
        whole."""
        run, digest = self._run(key), key.digest()
        if len(run) > 1:
            run = [start for start in run
                   if start in self._entries or self._key_digest(start) in (digest, None)]
        return self._by_digest(run).get(digest)

    def _key_digest(self, start: int) -> str | None:
        """The digest of the key of the block at `start`, parsed alone from its `key {` lines;
        None when they are not the writer's (the block is then parsed whole). Only a filter: a
        block it keeps is parsed whole and matched by its full key."""
        if start in self._digests:
            return self._digests[start]
        chunk = self._read(start, min(self._end(start), start + _HEAD_WINDOW))
        close = chunk.find(_KEY_CLOSE, len(START))
        digest = None
        if close >= 0 and _ENTRY_FIELD.match(chunk, close + len(_KEY_CLOSE)):
            try:
                entry = text_format.Parse(chunk[len(START):close + 4].decode("utf-8"),
                                          pb.Entry())
                digest = CacheKey.from_proto(entry.key).digest()
            except (text_format.ParseError, UnicodeDecodeError, ValueError,
                    AutotuneCacheError):
                digest = None
        self._digests[start] = digest
        return digest

    def _by_digest(self, starts: list[int]) -> dict[str, Keyed]:
        """(key, entry) by key digest of the blocks at `starts`, parsed on first use, in file
        order: a key held twice gives the last."""
        out: dict[str, Keyed] = {}
        for start in starts:
            keyed = self._entries.get(start)
            if keyed is None:
                end = self._end(start)
                entry = parse_block(self.path, self._read(start, end), self._head(start),
                                    binary=False, label=f"bytes {start}-{end}", start=start,
                                    whole=lambda: self._read(0, self.size, whole=True))
                if entry is None:
                    raise _Drop(f"the entry at byte {start} does not match its first lines")
                keyed = self._entries[start] = (CacheKey.from_proto(entry.key), entry)
            out[keyed[0].digest()] = keyed
        return out


def _at_or_before(kernel: str, head: Head) -> bool:
    return head[0] <= kernel
