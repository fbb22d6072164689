"""Loading results files fast: a canonical text file is its own index.

A load splits a canonical text file (the writer's output: `formats.serialize_keyed`,
`autotune-cache convert`) into entry blocks (each `entries {` ... `}` at column 0), reads each
block's kernel and problem from its first lines, and indexes the blocks by (kernel, problem). A
lookup parses, with protobuf's own text parser, only the blocks of its key's kernel and problem,
and uses one only when the parsed key's digest is the key's. Binary files are indexed the same
way, from their wire fields.

The contract:
- The index is used only when byte scans prove the file is split right (`version: 1`, then only
  blocks whose first lines are `entries {`, `key {`, `kernel: "..."`, optionally the two
  fingerprints and `problem: "..."`); a parsed block is checked against its first lines, and a
  mismatch drops the index for a full parse.
- A binary file is indexed from a scan of its top-level wire fields: each `entries` field's span,
  and its key alone parsed for the kernel and problem; anything but `version: 1` and well-formed
  entries with keys is parsed whole, which names the problem.
- Any other text file is parsed whole, and the load logs once per file, at info level, that
  `autotune-cache convert FILE FILE` makes it canonical.
- The file is the only authority: no derived copy, cache directory or build action.
- A block that does not parse raises CorruptFileError naming the file and the line (the entry
  and its bytes, for binary), when the block is first needed; the escape cap (limits.py) is
  checked on each block before it is parsed, and on the whole file before a full parse.
- The file's bytes stay in memory: peak memory is the file's size plus a few hundred bytes of
  index per entry (built in one pass that keeps only each block's names), not the 8 (text) to
  48 (binary) times its size a full parse costs. So that docs/security.md's figures hold, a file
  has at most MAX_FILE_ENTRIES entries and an indexed entry at most MAX_ENTRY_BYTES, each
  refused with a CorruptFileError naming the file.
- Several entries with one key: the last wins, as with a full parse.
Why, and the proof that a checked file holds one entry per block:
docs/decisions/0007-text-file-is-its-own-index.md.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from google.protobuf import message

from autotune_cache.errors import CorruptFileError
from autotune_cache.formats import (
    FORMAT_VERSION,
    check_text_budget,
    is_text_path,
    parse_results,
    read_results_file,
)
from autotune_cache.foundation.key import CacheKey
from autotune_cache.foundation.limits import MAX_ENTRY_BYTES, MAX_FILE_ENTRIES, describe
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store.canonical import (
    CONVERT_HINT,
    END,
    HEAD,
    KEY_HEAD,
    NEXT_BLOCK,
    START,
    STRING,
    head_of,
    parse_block,
)
from autotune_cache.store.searched import SearchedFile, open_searched

log = logging.getLogger("autotune_cache")


# A line whose only tokens are a field name, a colon and one string.
_STRING_LINE = re.compile(rb" *[A-Za-z_][A-Za-z0-9_]*: " + STRING)

_hinted: set[str] = set()
# Blocks indexed at a time: bounds the match objects alive at once.
_CHUNK = 4096


@dataclass
class _Index:
    """Block spans of a canonical text file and their (kernel, problem)."""

    starts: list[int]
    ends: list[int]
    groups: dict[tuple[str, str], list[int]]
    heads: list[tuple[str, str]]


def _in_strings(data: bytes, word: bytes, spans: list[tuple[int, int]], start: int = 0,
                end: int | None = None) -> bool:
    """Whether every occurrence of `word` in data[start:end] outside the header spans lies inside
    the string of a one-string line (a kernel named `entries_kernel`, a problem mentioning one)."""
    end = len(data) if end is None else end
    span = 0
    for found in re.compile(re.escape(word)).finditer(data, start, end):
        at = found.start()
        while span < len(spans) and spans[span][1] <= at:
            span += 1
        if span < len(spans) and spans[span][0] <= at:
            continue  # in a header, whose every token is known
        line_start = data.rfind(b"\n", 0, at) + 1
        line_end = data.find(b"\n", at)
        line = _STRING_LINE.fullmatch(data, line_start, len(data) if line_end < 0 else line_end)
        if line is None or at < line.start(1):
            return False
    return True


def _index(data: bytes) -> _Index | None:
    """The index of canonical text `data`, or None when the file is not provably canonical.

    Written for speed (a 39 MB file in about 0.07 s): C-level scans of the whole file, and per
    block one regular-expression match and a few list and dict operations. Besides a block's
    first lines, only two words are looked for (module docstring): another `entries` could
    open an entry the index does not know; another `problem` could set the problem of a key
    whose first lines have none."""
    if not data.startswith(HEAD) or not (data.isascii() or _is_utf8(data)):
        return None
    if len(data) == len(HEAD):
        return _Index([], [], {}, [])
    if not data.startswith(START, len(HEAD)) or not data.endswith(END):
        return None
    starts = [len(HEAD), *(m.end() for m in NEXT_BLOCK.finditer(data, len(HEAD)))]
    if len(starts) > MAX_FILE_ENTRIES:
        raise _TooMany(len(starts))
    ends = [*starts[1:], len(data)]
    match = KEY_HEAD.match
    # Vectorised per chunk of blocks (C-level list operations, as fast as one pass over all),
    # keeping only each block's names: no chunk's match objects outlive it, so the index costs
    # a few hundred bytes per entry at its peak too.
    names: list[tuple[str, str]] = []
    groups: dict[tuple[str, str], list[int]] = {}
    kernels: dict[str, str] = {}
    header_entries = 0
    for first in range(0, len(starts), _CHUNK):
        found = [match(data, start) for start in starts[first:first + _CHUNK]]
        if None in found:
            return None
        heads = cast("list[re.Match[bytes]]", found)
        texts = b"".join([m.group(0) for m in heads])
        header_entries += texts.count(b"entries")
        raw = [m.group(1, 4) for m in heads]
        if b"\\" in texts or not texts.isascii():
            decoded = [head_of(m) for m in heads]
            if None in decoded:
                return None
            chunk = cast("list[tuple[str, str]]", decoded)
        else:
            if any(not kernel for kernel, _ in raw):  # `kernel: ""`: not what the writer writes
                return None
            chunk = [(kernel.decode(), problem.decode() if problem else "")
                     for kernel, problem in raw]
        for offset, (kernel, problem) in enumerate(chunk):
            i = first + offset
            name = (kernels.setdefault(kernel, kernel), problem)
            names.append(name)
            group = groups.get(name)
            if group is None:
                groups[name] = [i]
            else:
                group.append(i)
            if not problem:
                end = heads[offset].end()
                if data.find(b"problem", end, ends[i]) >= 0 and not _in_strings(
                        data, b"problem", [], end, ends[i]):
                    return None
    if data.count(b"entries") != header_entries and not _in_strings(
            data, b"entries", [m.span() for m in (match(data, start) for start in starts)
                               if m is not None]):
        return None
    return _Index(starts, ends, groups, names)


class _TooMany(Exception):
    """A canonical text file has more blocks than MAX_FILE_ENTRIES."""


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@dataclass
class LoadedFile:
    """One loaded results file: its entries indexed by (kernel, problem), each parsed and keyed
    on first use.

    `entries[i]` is entry i once parsed (all of them for a binary or non-canonical file);
    `data` and `index`, for a canonical text file, are the file's bytes and its blocks' spans
    and first lines, from which entries are parsed."""

    path: Path
    groups: dict[tuple[str, str], list[int]]
    entries: dict[int, pb.Entry]
    count: int
    data: bytes = b""
    index: _Index | None = None
    binary: bool = False
    _keys: dict[int, CacheKey] = field(default_factory=dict)

    @property
    def indexed(self) -> bool:
        """Whether entries are parsed on use from the file's bytes (a canonical text file, or a
        well-formed binary one)."""
        return self.index is not None

    def __len__(self) -> int:
        """How many entries the file holds (a key held twice counts twice)."""
        return self.count

    searched = False  # read whole: a miss here is a miss (SearchedFile.searched)

    def prove(self) -> None:
        """Nothing to prove: the file was read whole (SearchedFile.prove)."""

    def problems(self) -> set[tuple[str, str]]:
        """Every (kernel, problem) the file holds an entry for."""
        return set(self.groups)

    def kernels(self) -> set[str]:
        """Every kernel name the file holds entries of."""
        return {kernel for kernel, _ in self.groups}

    def _entry(self, i: int) -> tuple[CacheKey, pb.Entry]:
        key = self._keys.get(i)
        if key is not None:
            return key, self.entries[i]
        entry = self.entries.get(i)
        if entry is None:
            entry = self._parse_block(i)
        key = CacheKey.from_proto(entry.key)
        self.entries[i], self._keys[i] = entry, key
        return key, entry

    def _parse_block(self, i: int) -> pb.Entry:
        index = self.index
        assert index is not None
        start, end = index.starts[i], index.ends[i]
        entry = parse_block(self.path, self.data[start:end], index.heads[i], binary=self.binary,
                            label=f"entry {i} (bytes {start}-{end})", start=start,
                            whole=lambda: self.data)
        if entry is None:
            # Not reachable for a file the index admits (module docstring); kept so a gap in
            # that reasoning costs a full parse, never a wrong entry.
            log.warning("autotune_cache: %s: entry %d does not match its first lines; parsing "
                        "the whole file", self.path, i)
            self._replace(_parse_whole(self.path, self.data))
            raise _Reindexed
        return entry

    def _replace(self, other: LoadedFile) -> None:
        self.groups, self.entries, self.count = other.groups, other.entries, other.count
        self.data, self.index, self._keys = b"", None, {}

    def _keyed(self, select: Callable[[], list[int]]) -> dict[str, tuple[CacheKey, pb.Entry]]:
        """(key, entry) by key digest of the entries `select()` names, in file order: the last
        one wins. `select` is asked again when a block drops the index."""
        while True:
            try:
                out: dict[str, tuple[CacheKey, pb.Entry]] = {}
                for i in select():
                    key, entry = self._entry(i)
                    out[key.digest()] = (key, entry)
                return out
            except _Reindexed:
                continue

    def _group(self, key: CacheKey) -> list[int]:
        return self.groups.get((key.kernel, key.problem), [])

    def get(self, key: CacheKey) -> tuple[CacheKey, pb.Entry] | None:
        """The key and entry recorded for `key`, or None."""
        return self._keyed(lambda: self._group(key)).get(key.digest())

    def same_problem(self, key: CacheKey) -> Iterator[tuple[CacheKey, pb.Entry]]:
        """Every (key, entry) of key's kernel and problem, once per key."""
        yield from self._keyed(lambda: self._group(key)).values()

    def items(self, kernel: str | None = None) -> Iterator[tuple[CacheKey, pb.Entry]]:
        """Every (key, entry), or those of one kernel, once per key: each is parsed."""
        yield from self._keyed(lambda: sorted(
            i for (k, _), group in self.groups.items() for i in group
            if kernel is None or k == kernel)).values()

    def count_of(self, kernel: str) -> int:
        """How many entries the file holds for `kernel` (what `items(kernel)` would key)."""
        return sum(len(group) for (k, _), group in self.groups.items() if k == kernel)

    def unparsed_bytes_of(self, kernel: str) -> int:
        """The bytes of text `items(kernel)` would still parse: the blocks of `kernel`'s
        entries not parsed yet (0 for a binary file, whose entries parse in microseconds, and
        for a non-canonical one, parsed at load)."""
        index = self.index
        if index is None or self.binary:  # binary entries parse in microseconds
            return 0
        return sum(index.ends[i] - index.starts[i] for (k, _), group in self.groups.items()
                   if k == kernel for i in group if i not in self.entries)


ResultsFile = LoadedFile | SearchedFile  # what load_file returns


class _Reindexed(Exception):
    """The index was dropped for a full parse: start the lookup again."""


def _parse_whole(path: Path, data: bytes) -> LoadedFile:
    if is_text_path(path):
        check_text_budget(data, path)
    entries = list(parse_results(data, path).entries)
    _check_count(path, len(entries))
    groups: dict[tuple[str, str], list[int]] = {}
    for i, entry in enumerate(entries):
        groups.setdefault((entry.key.kernel, entry.key.problem), []).append(i)
    return LoadedFile(path, groups, dict(enumerate(entries)), len(entries))


def _check_count(path: Path, count: int, *, at_least: bool = False) -> None:
    if count > MAX_FILE_ENTRIES:
        raise CorruptFileError(
            f"{path}: has {'more than ' if at_least else ''}{count:,} entries, more than the "
            f"{describe(MAX_FILE_ENTRIES, 'MAX_FILE_ENTRIES')} one results file may hold "
            "(each costs memory whatever its size). Split it: give --load_autotune_results_from "
            "several files (`autotune-cache merge` and `prune` write subsets).")


def _check_sizes(path: Path, index: _Index) -> None:
    for i, (start, end) in enumerate(zip(index.starts, index.ends, strict=True)):
        if end - start > MAX_ENTRY_BYTES:
            raise CorruptFileError(
                f"{path}: entry {i} ({index.heads[i][0]}) is {end - start:,} bytes, more than "
                f"the {describe(MAX_ENTRY_BYTES)} one entry may have; no tuner writes such an "
                "entry, so the file is damaged or not ours. Regenerate it.")


# Ways text format opens an `entries` field; their count bounds the entries of any text file
# before it is parsed (a string holding one of them only makes the bound looser).
_TEXT_OPENERS = (b"entries {", b"entries{", b"entries:", b"entries <", b"entries<")


def _text_entries_at_least(data: bytes) -> int:
    return sum(data.count(opener) for opener in _TEXT_OPENERS)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]  # IndexError past the end: the caller falls back to a full parse
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _binary_index(path: Path, data: bytes) -> _Index | None:
    """The index of binary `data`: each top-level `entries` field's span and its key's kernel
    and problem (the key parsed alone, merged as protobuf merges repeated `key` fields), or
    None when the file is anything but `version: 1` and well-formed entries with keys, for a
    full parse to name the problem. Raises CorruptFileError past MAX_FILE_ENTRIES."""
    starts: list[int] = []
    ends: list[int] = []
    heads: list[tuple[str, str]] = []
    groups: dict[tuple[str, str], list[int]] = {}
    kernels: dict[str, str] = {}
    version = 0
    pos, size = 0, len(data)
    try:
        while pos < size:
            tag, pos = _varint(data, pos)
            if tag == 0x08:  # version, a varint
                version, pos = _varint(data, pos)
                continue
            if tag != 0x12:  # anything but `entries`: a full parse says what it is
                return None
            length, pos = _varint(data, pos)
            end = pos + length
            if end > size:
                return None
            keys = []
            inner = pos
            while inner < end:  # the entry's own fields: collect `key` (1), skip the rest
                inner_tag, inner = _varint(data, inner)
                wire = inner_tag & 7
                if wire == 0:
                    _, inner = _varint(data, inner)
                elif wire == 1:
                    inner += 8
                elif wire == 5:
                    inner += 4
                elif wire == 2:
                    n, inner = _varint(data, inner)
                    if inner_tag >> 3 == 1:
                        keys.append(data[inner:inner + n])
                    inner += n
                else:
                    return None
            if inner != end or not keys:
                return None
            key = pb.Key.FromString(b"".join(keys))
            if not key.kernel:
                return None
            kernel = kernels.setdefault(key.kernel, key.kernel)
            head = (kernel, key.problem)
            groups.setdefault(head, []).append(len(starts))
            starts.append(pos)
            ends.append(end)
            heads.append(head)
            if len(starts) > MAX_FILE_ENTRIES:
                _check_count(path, len(starts), at_least=True)
            pos = end
    except (IndexError, ValueError, message.DecodeError):
        return None
    if version != FORMAT_VERSION:
        return None
    return _Index(starts, ends, groups, heads)


def load_file(path: Path | str, read_from: Path | None = None) -> ResultsFile:
    """Load one results file (text or binary by its extension): a canonical text file is
    searched in place (searched.py), a well-formed binary file is indexed, and their entries
    are parsed on use; any other file is read whole by load_bytes. `read_from`: where to read
    the bytes, if not at `path` (messages name `path`)."""
    path = Path(path)
    if is_text_path(path):
        searched = open_searched(path, read_from or path, lambda data: load_bytes(path, data))
        if searched is not None:
            return searched
    return load_bytes(path, read_results_file(read_from or path, budget=False))


def load_bytes(path: Path, data: bytes) -> LoadedFile:
    """Load the bytes of results file `path`: a canonical text file (proven by byte scans) or a
    well-formed binary file is indexed and its entries parsed on use; any other file is parsed
    whole. A file with more than MAX_FILE_ENTRIES entries, or an indexed entry over
    MAX_ENTRY_BYTES, is refused with a CorruptFileError naming it. The escape budget is checked
    per entry."""
    text = is_text_path(path)
    if text:
        try:
            index = _index(data)
        except _TooMany as e:
            _check_count(path, e.args[0])
            raise
        if index is not None:
            _check_sizes(path, index)
            return LoadedFile(path, index.groups, {}, len(index.starts), data, index)
        if str(path) not in _hinted and data.strip():
            _hinted.add(str(path))
            log.info("autotune_cache: %s is not canonical text (hand-edited, or written by "
                     "another tool), so it is parsed whole; %s", path,
                     CONVERT_HINT.format(path=path))
        if len(data) > MAX_FILE_ENTRIES * 8:  # room for more entries than allowed: count first
            _check_count(path, _text_entries_at_least(data), at_least=True)
    elif data.strip():
        index = _binary_index(path, data)
        if index is not None:
            _check_sizes(path, index)
            return LoadedFile(path, index.groups, {}, len(index.starts), data, index,
                              binary=True)
    return _parse_whole(path, data)
