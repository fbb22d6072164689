"""Results files: text or binary protobuf chosen by extension, versioned, deterministic, capped."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TypeVar

from google.protobuf import message, text_format

from autotune_cache.atomic import write_atomic
from autotune_cache.errors import CorruptFileError, VersionMismatchError
from autotune_cache.key import CacheKey
from autotune_cache.proto import autotune_results_pb2 as pb

M = TypeVar("M", bound=message.Message)

# The schema version this library reads and writes (AutotuneResultsFile.version).
FORMAT_VERSION = 1

# Extensions that mean text format, as in XLA; every other extension is binary. The one list:
# messages and the result-set registry derive theirs from it.
TEXT_EXTENSIONS = (".txt", ".textproto", ".pbtxt", ".txtpb", ".prototxt")
# Extensions of results files whose own parse error is the best message for an unknown file.
RESULTS_EXTENSIONS = (*TEXT_EXTENSIONS, ".pb", ".binpb", "")

# Reads larger than this are refused, so a hostile or runaway file cannot exhaust memory.
MAX_FILE_BYTES = 256 * 1024 * 1024


def is_text_suffix(suffix: str) -> bool:
    """Whether an extension (`.textproto`, `.pb`, ...) selects text format."""
    return suffix.lower() in TEXT_EXTENSIONS


def is_text_path(path: Path | str) -> bool:
    """Whether a path's extension selects text format."""
    return is_text_suffix(Path(path).suffix)


def read_capped(path: Path, limit: int | None = None) -> bytes:
    """Read a whole file, refusing files larger than `limit` (default MAX_FILE_BYTES) bytes."""
    limit = MAX_FILE_BYTES if limit is None else limit
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise CorruptFileError(
            f"{path}: larger than the {limit:,}-byte limit for autotune results; "
            "is this really a results file? Split it or prune it with `autotune-cache prune`."
        )
    return data


# What protobuf's text parser says when a file uses names our schema lacks.
_NEWER_SCHEMA_SIGNS = ("has no field named", "has no value named", "has no value with number",
                       "not found in descriptor pool", "Type URL not found",
                       "Can not find message descriptor")

NEWER_SCHEMA_HINT = (
    "The file uses names this autotune_cache does not know (written by a newer release?). "
    "Update autotune_cache, or regenerate the file with this one."
)


def parse_message(data: bytes, cls: type[M], path: Path | str, *, text: bool, what: str,
                  newer_schema_hint: str = NEWER_SCHEMA_HINT) -> M:
    """Parse `data` as a `cls` message; errors name `path` and `what` kind of file it is."""
    msg = cls()
    kind = "text" if text else "binary"
    try:
        if text:
            text_format.Parse(data.decode("utf-8"), msg)
        else:
            msg.ParseFromString(data)
    except (text_format.ParseError, message.DecodeError, UnicodeDecodeError) as e:
        detail = str(e).rstrip(".")
        hint = "Regenerate it, or check it with `autotune-cache verify`."
        if text and any(s in detail for s in _NEWER_SCHEMA_SIGNS):
            hint = newer_schema_hint
        elif not text and data[:1].isalpha():
            hint = "It looks like text: give it a .textproto extension."
        raise CorruptFileError(f"{path}: not a valid {kind}-format {what}: {detail}. {hint}") from e
    return msg


_TEXT_VERSION = re.compile(rb"^\s*version\s*:\s*(\d+)", re.MULTILINE)


def _version_error(path: Path | str, version: int) -> VersionMismatchError:
    return VersionMismatchError(
        f"{path}: results file has version {version}, but this autotune_cache reads version "
        f"{FORMAT_VERSION}. Regenerate the file with this version, or use the autotune_cache "
        "release that wrote it."
    )


def parse_results(
    data: bytes, path: Path | str, *, text: bool | None = None
) -> pb.AutotuneResultsFile:
    """Parse results-file bytes, checking the schema version; `path` is named in errors."""
    text = is_text_path(path) if text is None else text
    if not data.strip():
        raise CorruptFileError(f"{path}: is empty, not an autotune results file. Regenerate it "
                               "(a dump always writes at least `version: 1`).")
    try:
        msg = parse_message(data, pb.AutotuneResultsFile, path, text=text,
                            what="autotune results file")
    except CorruptFileError:
        # A newer schema may add fields this release cannot parse: name the versions instead.
        found = _TEXT_VERSION.search(data) if text else None
        if found and int(found.group(1)) != FORMAT_VERSION:
            raise _version_error(path, int(found.group(1))) from None
        raise
    if msg.version != FORMAT_VERSION:
        raise _version_error(path, msg.version)
    for i, entry in enumerate(msg.entries):
        if not entry.key.kernel:
            raise CorruptFileError(f"{path}: entry {i} has no key.kernel; the file is damaged.")
    return msg


def load_results(path: Path | str) -> list[pb.Entry]:
    """All entries of one results file."""
    path = Path(path)
    try:
        data = read_capped(path)
    except FileNotFoundError as e:
        raise CorruptFileError(
            f"{path}: autotune results file does not exist. Generate it with the dump flag "
            "(--dump_autotune_results_to) or your regen command, or fix the path."
        ) from e
    except IsADirectoryError as e:
        raise CorruptFileError(
            f"{path}: is a directory; pass a results file, or use --autotune_cache_dir for a "
            "cache directory."
        ) from e
    return list(parse_results(data, path).entries)


Keyed = tuple[CacheKey, pb.Entry]


def keyed(entries: Iterable[pb.Entry]) -> Iterator[Keyed]:
    """(key, entry) pairs for entries whose key is not built yet."""
    return ((CacheKey.from_proto(e.key), e) for e in entries)


def sorted_unique(entries: Iterable[pb.Entry]) -> list[pb.Entry]:
    """Entries deduplicated by key (the last wins) and sorted by key."""
    return _sorted_unique(keyed(entries))


def _sorted_unique(pairs: Iterable[Keyed]) -> list[pb.Entry]:
    by_digest = {key.digest(): (key, entry) for key, entry in pairs}
    return [e for _, e in sorted(by_digest.values(), key=lambda ke: ke[0].sort_key())]


def serialize_keyed(pairs: Iterable[Keyed], *, text: bool) -> bytes:
    """Deterministic bytes of a results file holding these (key, entry) pairs."""
    msg = pb.AutotuneResultsFile(version=FORMAT_VERSION, entries=_sorted_unique(pairs))
    if text:
        return text_format.MessageToString(msg).encode("utf-8")
    return msg.SerializeToString(deterministic=True)


def serialize_results(entries: Iterable[pb.Entry], *, text: bool) -> bytes:
    """Deterministic bytes of a results file holding `entries`."""
    return serialize_keyed(keyed(entries), text=text)


def save_keyed(path: Path | str, pairs: Iterable[Keyed]) -> None:
    """Write a results file of (key, entry) pairs atomically, in the format its extension
    selects."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, serialize_keyed(pairs, text=is_text_path(path)))


def save_results(path: Path | str, entries: Iterable[pb.Entry]) -> None:
    """Write a results file atomically, in the format its extension selects."""
    save_keyed(path, keyed(entries))
