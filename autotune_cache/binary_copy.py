"""Loading results files fast: a binary copy of each large file, keyed by the file's SHA-256.

Committed results files stay text, for review; parsing a 10,000-entry text file with protobuf's
pure-Python text parser takes tens of seconds (a few with protoc's C++ parser: native_text.py).
So the first load of a large file (text or binary) writes a binary copy of it to the user's
cache directory, named by the SHA-256 of the file's bytes; every later load of the same bytes
reads the copy instead: one hash of the file, one binary parse of a flat message, no per-entry
work.

Decisions:
- The copy is keyed by content, never by path or time: an edited file has another hash and
  misses; a file checked out anywhere, by anyone, with the same bytes hits.
- The copy is untrusted. It is used only when its version, the schema's hash, the source hash
  and its own checksum all match; any problem (missing, unreadable, damaged, another
  schema) falls back to parsing the file, which is always the authority, and rewrites the copy.
  Each entry's key digest is checked again when the entry is first used (`LoadedFile.get`), and
  a mismatch also falls back to the file.
- Nothing outside this module knows the copy exists: entries' origins and every message name
  the results file itself.
- Entries stay serialized until first used, so a load does no per-entry work; a file's keys are
  only built all at once when the cache searches near misses (after a miss).
- The copies live in $AUTOTUNE_BINARY_CACHE_DIR, else $XDG_CACHE_HOME/autotune_cache/binary,
  else ~/.cache/autotune_cache/binary; `off` disables them. They are written atomically; copies
  unused for MAX_AGE_S are deleted when a new one is written. Failing to write one is not an
  error (a read-only home, a sandbox).
- Files under MIN_BYTES (16 KiB) get no copy: they parse in about 10 ms. The bound was 256 KiB
  until the H200 profile of scenario B (issue 13) showed a 56 kB results file (3 entries of 48
  candidates) costing 80 ms of Python parsing in every test process.
- Under Bazel a test's HOME is its private TEST_TMPDIR, so a copy would not outlive the test;
  there the build makes it: autotuned_py_test's `<name>.binary_copy` action runs `make_copy`
  and the test gets AUTOTUNE_BINARY_CACHE_DIR=TEST_WORKSPACE/<its runfiles path>. A
  `TEST_WORKSPACE/` directory (resolved under $TEST_SRCDIR, as the load flag is, so a chdir is
  harmless) is the build's output: it is only read, never written, cleaned or touched (a
  touch would change a Bazel output), and a missing or damaged copy there is a warning, since
  the test then pays the full parse. When the prefix cannot be resolved (no TEST_SRCDIR),
  copies are off for the process: they are an optimisation, never an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import message

from autotune_cache import env
from autotune_cache.atomic import write_atomic
from autotune_cache.errors import CorruptFileError, PathPrefixError
from autotune_cache.flags import WORKSPACE_PREFIX, resolve_path
from autotune_cache.formats import (
    MAX_FILE_BYTES,
    is_text_path,
    parse_results,
    read_capped,
    read_results_file,
)
from autotune_cache.key import CacheKey
from autotune_cache.limits import MAX_TEXT_BYTES
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.proto import binary_copy_pb2

log = logging.getLogger("autotune_cache")

COPY_VERSION = 2
COPY_SUFFIX = ".binpb"
# Files smaller than this parse in about 10 ms and get no copy.
MIN_BYTES = 16 * 1024
# Copies nobody has used for this long are deleted when a new copy is written.
MAX_AGE_S = 30 * 24 * 3600.0

SCHEMA_SHA256 = hashlib.sha256(pb.DESCRIPTOR.serialized_pb).hexdigest()


@dataclass(frozen=True)
class CopyDir:
    """Where binary copies are looked for, and whether this process may write there."""

    path: Path
    # False for the build's directory (a TEST_WORKSPACE/ path): read it, never change it.
    writable: bool = True


def copy_location() -> CopyDir | None:
    """Where binary copies live (module docstring), or None when they are off."""
    configured = env.get(env.AUTOTUNE_BINARY_CACHE_DIR).strip()
    if env.parse_bool(configured) is False:
        return None
    if configured.startswith(WORKSPACE_PREFIX):
        try:
            resolved = resolve_path(configured, env.AUTOTUNE_BINARY_CACHE_DIR, env.environ(),
                                    create_parent=False)
        except PathPrefixError as e:
            log.debug("autotune_cache: binary copies off: %s", e)
            return None
        return CopyDir(resolved, writable=False)
    if configured:
        return CopyDir(Path(configured))
    xdg = env.get(env.XDG_CACHE_HOME)
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return CopyDir(base / "autotune_cache" / "binary")


def copy_path(directory: Path, path: Path, source_sha: str) -> Path:
    """The name the copy of `path`, whose bytes hash to `source_sha`, has in `directory`."""
    kind = "text" if is_text_path(path) else "binary"
    return directory / f"{source_sha}-{kind}{COPY_SUFFIX}"


def _content_crc32(digests: list[str], entries: list[bytes]) -> int:
    """CRC-32 of the digests and entries, in order: it catches a damaged copy. (A hash would
    not stop a hostile writer, who can rewrite the checksum beside the data; that is why each
    entry's key is checked again on use and the source file stays the authority.)"""
    crc = 0
    for digest, data in zip(digests, entries, strict=True):
        crc = zlib.crc32(data, zlib.crc32(digest.encode() + len(data).to_bytes(8, "little"), crc))
    return crc


@dataclass
class LoadedFile:
    """One loaded results file: its entries by key digest, each parsed and keyed on first use.

    `raw[digest]` is an entry's serialized bytes (from a binary copy) or the parsed entry (from
    the file itself); `get` returns (key, entry) and keeps the result. When the file holds one
    key twice, the last entry wins, as it always has."""

    path: Path
    raw: dict[str, bytes | pb.Entry]
    from_copy: bool = False
    _ready: dict[str, tuple[CacheKey, pb.Entry]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.raw)

    def digests(self) -> list[str]:
        return list(self.raw)

    def get(self, digest: str) -> tuple[CacheKey, pb.Entry] | None:
        """The key and entry recorded under `digest`, or None."""
        ready = self._ready.get(digest)
        if ready is not None:
            return ready
        raw = self.raw.get(digest)
        if raw is None:
            return None
        if isinstance(raw, pb.Entry):
            entry = raw
        else:
            entry = pb.Entry()
            try:
                entry.ParseFromString(raw)
            except message.DecodeError:
                entry = None  # type: ignore[assignment]
        key = CacheKey.from_proto(entry.key) if entry is not None and entry.key.kernel else None
        if entry is None or key is None or key.digest() != digest:
            # Only a damaged binary copy can get here: the file itself is the authority.
            log.warning("autotune_cache: the binary copy of %s is damaged; reading the file "
                        "itself", self.path)
            fresh = load_file(self.path, use_copy=False)
            self.raw, self.from_copy, self._ready = fresh.raw, False, {}
            return self.get(digest)
        self._ready[digest] = (key, entry)
        return key, entry

    def items(self) -> Iterator[tuple[CacheKey, pb.Entry]]:
        """Every (key, entry), building all keys (used only after a miss)."""
        for digest in list(self.raw):
            got = self.get(digest)
            if got is not None:
                yield got


# What a missing or damaged copy in the build's directory costs, for the warning.
_BUILD_COPY = ("(the build's `.binary_copy` output, AUTOTUNE_BINARY_CACHE_DIR); parsing the "
               "file itself, which is slow for a large file")


def _read_copy(path: Path, source_sha: str, copy: Path, *, prepared: bool = False
               ) -> LoadedFile | None:
    """The copy's entries when it is valid for `source_sha`, else None. `prepared`: the
    build's read-only directory: its copy is not touched, and a problem is a warning."""
    try:
        data = read_capped(copy)  # a regular file only, bounded (safeio)
    except FileNotFoundError:
        if prepared:
            log.warning("autotune_cache: no binary copy of %s in %s %s", path, copy.parent,
                        _BUILD_COPY)
        return None
    except (CorruptFileError, OSError) as e:
        log.log(logging.WARNING if prepared else logging.DEBUG,
                "autotune_cache: cannot read the binary copy %s of %s: %s", copy, path, e)
        return None
    msg = binary_copy_pb2.BinaryCopy()
    try:
        msg.ParseFromString(data)
    except message.DecodeError:
        msg = None  # type: ignore[assignment]
    digests = list(msg.digests) if msg is not None else []
    entries = list(msg.entries) if msg is not None else []
    if (msg is None or msg.version != COPY_VERSION or msg.schema_sha256 != SCHEMA_SHA256
            or msg.source_sha256 != source_sha or len(digests) != len(entries)
            or msg.content_crc32 != _content_crc32(digests, entries)):
        if prepared:
            log.warning("autotune_cache: ignoring the damaged or outdated binary copy %s of %s "
                        "%s", copy, path, _BUILD_COPY)
        else:
            log.info("autotune_cache: ignoring the damaged or outdated binary copy %s of %s",
                     copy, path)
        return None
    if not prepared:
        with contextlib.suppress(OSError):
            os.utime(copy)  # used: keep it from the age-based clean-up
    return LoadedFile(path, dict(zip(digests, entries, strict=True)), from_copy=True)


def _write_copy(path: Path, source_sha: str, copy: Path, loaded: LoadedFile) -> None:
    digests = loaded.digests()
    entries = []
    for digest in digests:
        raw = loaded.raw[digest]
        entries.append(raw if isinstance(raw, bytes) else raw.SerializeToString(deterministic=True))
    msg = binary_copy_pb2.BinaryCopy(
        version=COPY_VERSION, source_sha256=source_sha, schema_sha256=SCHEMA_SHA256,
        content_crc32=_content_crc32(digests, entries), digests=digests, entries=entries)
    try:
        copy.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(copy, msg.SerializeToString())
    except OSError as e:
        log.debug("autotune_cache: cannot write the binary copy %s of %s: %s", copy, path, e)
        return
    _clean_old(copy.parent)


def _clean_old(directory: Path, now: float | None = None) -> None:
    """Delete copies unused for MAX_AGE_S (best effort: another process may be doing it too)."""
    now = time.time() if now is None else now
    try:
        old = [p for p in directory.glob(f"*{COPY_SUFFIX}")
               if now - p.stat().st_mtime > MAX_AGE_S]
    except OSError:
        return
    for p in old:
        with contextlib.suppress(OSError):
            p.unlink()


def _parse_file(path: Path, data: bytes) -> LoadedFile:
    raw: dict[str, bytes | pb.Entry] = {}
    for entry in parse_results(data, path).entries:
        raw[CacheKey.from_proto(entry.key).digest()] = entry  # the last one wins
    return LoadedFile(path, raw)


def make_copy(path: Path | str, directory: Path | str) -> Path:
    """Write the binary copy of `path` into `directory` (whatever the file's size) and return
    it: for a build action that prepares copies ahead of the tests (autotuned_py_test's
    `<name>.binary_copy`, rules/private/make_binary_copy.py), whose tests then load `path` with
    AUTOTUNE_BINARY_CACHE_DIR=`directory`. Raises the library's errors for a file that cannot
    be read or parsed."""
    path, directory = Path(path), Path(directory)
    data = read_results_file(path)
    source_sha = hashlib.sha256(data).hexdigest()
    copy = copy_path(directory, path, source_sha)
    directory.mkdir(parents=True, exist_ok=True)
    _write_copy(path, source_sha, copy, _parse_file(path, data))
    return copy


def _hash_regular_file(path: Path, kind: str) -> str:
    """Hex SHA-256 of `path` read in chunks, or "" when it gets no copy: not a regular file
    (opened without blocking, so a FIFO never hangs us), under MIN_BYTES, over the read cap of
    its kind (formats.read_capped: a copy never lets in a file that could not be read as itself),
    or unreadable. read_results_file then says what is wrong, if anything."""
    cap = min(MAX_TEXT_BYTES, MAX_FILE_BYTES) if kind == "text" else MAX_FILE_BYTES
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or not MIN_BYTES <= info.st_size <= cap:
            return ""
        try:
            return hashlib.file_digest(f, "sha256").hexdigest()
        except OSError:
            return ""


def load_file(path: Path | str, *, use_copy: bool = True) -> LoadedFile:
    """Load one results file (text or binary by its extension), through its binary copy when
    the file is large and a valid copy exists; writes the copy when it does not.

    With a copy, the file is only hashed (in chunks: no copy of its bytes in memory); it is read
    and parsed only when there is no valid copy, and the copy written then is keyed by the
    bytes actually parsed."""
    path = Path(path)
    where = copy_location() if use_copy else None
    kind = "text" if is_text_path(path) else "binary"
    if where is not None:
        source_sha = _hash_regular_file(path, kind)
        if source_sha:
            copy = copy_path(where.path, path, source_sha)
            loaded = _read_copy(path, source_sha, copy, prepared=not where.writable)
            if loaded is not None:
                log.debug("autotune_cache: loaded %s (%d entries) from its binary copy %s",
                          path, len(loaded), copy)
                return loaded
    data = read_results_file(path)
    loaded = _parse_file(path, data)
    if where is not None and where.writable and len(data) >= MIN_BYTES:
        source_sha = hashlib.sha256(data).hexdigest()
        _write_copy(path, source_sha, copy_path(where.path, path, source_sha), loaded)
    return loaded
