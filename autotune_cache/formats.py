"""Results files: text or binary protobuf chosen by extension, versioned, deterministic, capped."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TypeVar

from google.protobuf import message, text_format

from autotune_cache.errors import CorruptFileError, VersionMismatchError
from autotune_cache.foundation.atomic import write_atomic
from autotune_cache.foundation.key import CacheKey
from autotune_cache.foundation.limits import (
    MAX_BINARY_BYTES,
    MAX_TEXT_BYTES,
    MiB,
    describe,
    text_budget_problem,
)
from autotune_cache.foundation.safeio import read_regular
from autotune_cache.proto import autotune_results_pb2 as pb

M = TypeVar("M", bound=message.Message)

# The schema version this library reads and writes (AutotuneResultsFile.version).
FORMAT_VERSION = 1

# Extensions that mean text format, as in XLA; every other extension is binary. The one list:
# messages and the result-set registry derive theirs from it.
TEXT_EXTENSIONS = (".txt", ".textproto", ".pbtxt", ".txtpb", ".prototxt")
# Extensions of results files whose own parse error is the best message for an unknown file.
RESULTS_EXTENSIONS = (*TEXT_EXTENSIONS, ".pb", ".binpb", "")

# Reads larger than this are refused, so a hostile or runaway file cannot exhaust memory (text
# files have lower caps: limits.py).
MAX_FILE_BYTES = MAX_BINARY_BYTES


def is_text_suffix(suffix: str) -> bool:
    """Whether an extension (`.textproto`, `.pb`, ...) selects text format."""
    return suffix.lower() in TEXT_EXTENSIONS


def is_text_path(path: Path | str) -> bool:
    """Whether a path's extension selects text format."""
    return is_text_suffix(Path(path).suffix)


_TEXT_HINT = ("Convert big results files to binary (`autotune-cache convert FILE.textproto "
              "FILE.pb`), or prune them.")


def read_capped(path: Path | str, limit: int | None = None, *,
                follow_symlinks: bool = True, budget: bool = True) -> bytes:
    """Read a whole regular file without blocking (safeio.read_regular), refusing files over
    `limit` bytes; the default limit, and a cap on escapes, follow the extension (limits.py).
    `follow_symlinks=False` for entries of a shared directory. `budget=False` skips the cap on
    escapes, for a caller that checks it itself before parsing (results_index: per entry)."""
    text = is_text_path(path)
    if limit is None:
        limit = min(MAX_TEXT_BYTES, MAX_FILE_BYTES) if text else MAX_FILE_BYTES
    hint = _TEXT_HINT if text else "Split it or prune it with `autotune-cache prune`."
    data = read_regular(path, limit, follow_symlinks=follow_symlinks, hint=hint)
    if text and budget:
        check_text_budget(data, path)
    return data


def check_text_budget(data: bytes, path: Path | str) -> None:
    """Raise CorruptFileError when text `data` (from `path`) would cost too much memory to
    parse (limits.text_budget_problem)."""
    if (problem := text_budget_problem(data)) is not None:
        raise CorruptFileError(f"{path}: {problem}. {_TEXT_HINT}")


# What protobuf's text parser says when a file uses names our schema lacks.
_NEWER_SCHEMA_SIGNS = ("has no field named", "has no value named", "has no value with number",
                       "not found in descriptor pool", "Type URL not found",
                       "Can not find message descriptor")

NEWER_SCHEMA_HINT = (
    "The file uses names this autotune_cache does not know (written by a newer release?). "
    "Update autotune_cache, or regenerate the file with this one."
)


_CONFLICT_MARKER = re.compile(rb"^(<{7} |={7}$|>{7} |\|{7} )", re.MULTILINE)
_BOM = b"\xef\xbb\xbf"
_TRUNCATION_SIGNS = ("Truncated message", "Unexpected end", "Wire format was corrupt")


def damage_of(data: bytes, *, text: bool) -> str | None:
    """What visibly broke a results file, in words naming the line, or None: an unresolved
    merge conflict, an editor's byte-order mark, or a cut-off end."""
    if text and (found := _CONFLICT_MARKER.search(data)):
        line = data.count(b"\n", 0, found.start()) + 1
        marker = data[found.start():].split(b"\n", 1)[0].decode("utf-8", "replace")[:40]
        return (f"line {line} holds an unresolved merge-conflict marker ({marker!r}): resolve "
                "the conflict, or regenerate the file")
    if data.startswith(_BOM):
        return ("it starts with a UTF-8 byte-order mark (bytes EF BB BF, invisible in most "
                "editors, added by an editor): save it without one, or regenerate the file")
    return None


def parse_error(path: Path | str, detail: str, *, text: bool, what: str, data: bytes = b"",
                newer_schema_hint: str = NEWER_SCHEMA_HINT) -> CorruptFileError:
    """The error for `data` (read from `path`) that protobuf's parser refused with `detail`."""
    detail = detail.rstrip(".")
    kind = "text" if text else "binary"
    hint = "Regenerate it, or check it with `autotune-cache verify`."
    damage = damage_of(data, text=text)
    if damage is not None:
        return CorruptFileError(f"{path}: not a valid {kind}-format {what}: {damage}. "
                                f"(The parser said: {detail}.)")
    if not text and data[:1].isalpha():
        hint = "It looks like text: give it a .textproto extension."
    elif _looks_truncated(data, detail, text=text):
        hint = ("It ends in the middle of an entry: it was cut off or damaged (an interrupted "
                "copy, write or download?). Regenerate it, or restore it from version control.")
    elif text and any(s in detail for s in _NEWER_SCHEMA_SIGNS):
        hint = newer_schema_hint
    return CorruptFileError(f"{path}: not a valid {kind}-format {what}: {detail}. {hint}")


def _looks_truncated(data: bytes, detail: str, *, text: bool) -> bool:
    """Whether the parser failed at the very end of `data` (a cut-off file)."""
    if not text:
        return any(s in detail for s in _TRUNCATION_SIGNS)
    found = re.match(r"(\d+):(\d+)", detail)
    lines = data.rstrip(b"\n").count(b"\n") + 1
    return found is not None and int(found.group(1)) >= lines


def parse_message(data: bytes, cls: type[M], path: Path | str, *, text: bool, what: str,
                  newer_schema_hint: str = NEWER_SCHEMA_HINT) -> M:
    """Parse `data` as a `cls` message; errors name `path` and `what` kind of file it is."""
    msg = cls()
    try:
        if text:
            text_format.Parse(data.decode("utf-8"), msg)
        else:
            msg.ParseFromString(data)
    except (text_format.ParseError, message.DecodeError, UnicodeDecodeError) as e:
        raise parse_error(path, str(e), text=text, what=what, data=data,
                          newer_schema_hint=newer_schema_hint) from e
    except RecursionError:
        # Text nesting (e.g. google.protobuf.Any within Any) deeper than Python's stack.
        raise CorruptFileError(
            f"{path}: not a valid {'text' if text else 'binary'}-format {what}: its messages "
            "nest too deeply to parse (google.protobuf.Any within Any?). No XLA or "
            "autotune_cache writer nests them so; regenerate the file.") from None
    return msg


_TEXT_VERSION = re.compile(rb"^\s*version\s*:\s*(\d+)", re.MULTILINE)


# Top-level fields of XLA's results files (AutotuneResults `results`, AutotuneCache `entries` with
# `target`/`hlo_fingerprint` keys), for telling such a file from one of ours.
_XLA_SIGNS = (b"results {", b"hlo_fingerprint", b"codegen_version", b"autotune_result",
              b"optimal_config", b"hlo:")


# Top-level field numbers of XLA's binary files that ours lacks: AutotuneCache.entries (3) and
# AutotuneResults.results (4), both messages (wire type 2).
_XLA_BINARY_FIELDS = {3, 4}


def _looks_like_xla(data: bytes, msg: message.Message | None = None) -> bool:
    """Whether `data` is one of XLA's results files: by its text signs, or, parsed as ours
    (`msg`, binary), by holding no entries and only XLA's top-level fields."""
    if msg is not None:
        from google.protobuf import unknown_fields

        found = {(f.field_number, f.wire_type) for f in unknown_fields.UnknownFieldSet(msg)}
        if (found and not getattr(msg, "entries", True)
                and {n for n, _ in found} <= _XLA_BINARY_FIELDS
                and {w for _, w in found} == {2}):
            return True
    return any(sign in data[:65536] for sign in _XLA_SIGNS)


class XlaFileError(VersionMismatchError):
    """One of XLA's own results files was given where one of ours is read."""


def _version_error(path: Path | str, version: int, data: bytes = b"",
                   msg: message.Message | None = None) -> VersionMismatchError:
    if _looks_like_xla(data, msg):
        return XlaFileError(
            f"{path}: is an XLA autotune results file (XLA's own format"
            + (f", version {version}" if version else "") + "), "
            "not an autotune_cache one. Load it into XLA with "
            "--xla_gpu_load_autotune_results_from (XLA_FLAGS), or inspect it with "
            "`autotune-cache inspect`.")
    if version == 0 and msg is not None:  # binary
        return VersionMismatchError(
            f"{path}: has no version field, which every autotune_cache results file has; it "
            "is another kind of protobuf file, or damaged. Regenerate it with "
            "--dump_autotune_results_to.")
    if version == 0:
        return VersionMismatchError(
            f"{path}: has no `version: {FORMAT_VERSION}` line, which every autotune_cache "
            "results file has; it was cut short or written by hand. Add the line, or "
            "regenerate the file with --dump_autotune_results_to.")
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
            raise _version_error(path, int(found.group(1)), data) from None
        if text and not found and _looks_like_xla(data):
            raise _version_error(path, 0, data) from None
        raise
    if msg.version != FORMAT_VERSION:
        raise _version_error(path, msg.version, data, None if text else msg)
    unknown = _unknown_top_level_fields(msg)
    if unknown:
        raise CorruptFileError(
            f"{path}: is not an autotune_cache results file (it has protobuf field numbers "
            f"{unknown} that the format does not have: another kind of protobuf message?). "
            "Give a file written by --dump_autotune_results_to or `autotune-cache convert`.")
    for i, entry in enumerate(msg.entries):
        if not entry.key.kernel:
            raise CorruptFileError(f"{path}: entry {i} has no key.kernel; the file is damaged.")
    return msg


def _unknown_top_level_fields(msg: message.Message) -> list[int]:
    """Field numbers of `msg` that its schema lacks (a foreign message parsed as ours)."""
    from google.protobuf import unknown_fields

    return sorted({f.field_number for f in unknown_fields.UnknownFieldSet(msg)})


def load_results(path: Path | str) -> list[pb.Entry]:
    """All entries of one results file."""
    path = Path(path)
    return list(parse_results(read_results_file(path), path).entries)


def read_results_file(path: Path, *, budget: bool = True) -> bytes:
    """The bytes of a results file given to load, with messages for a missing path or a
    directory; `budget` as for read_capped."""
    if path.is_dir():
        raise CorruptFileError(
            f"{path}: is a directory; pass a results file, or use --autotune_cache_dir for a "
            "cache directory.")
    try:
        return read_capped(path, budget=budget)
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


Keyed = tuple[CacheKey, pb.Entry]


def duplicate_keys(entries: Iterable[pb.Entry]) -> list[str]:
    """One line per key that more than one of `entries` holds (only the last would be used)."""
    seen: dict[str, int] = {}
    out = []
    for i, entry in enumerate(entries):
        key = CacheKey.from_proto(entry.key)
        first = seen.setdefault(key.digest(), i)
        if first != i:
            out.append(f"entries {first} and {i} have the same key ({key.describe()}); only "
                       "the last is used")
    return out


def keyed(entries: Iterable[pb.Entry]) -> Iterator[Keyed]:
    """(key, entry) pairs for entries whose key is not built yet."""
    return ((CacheKey.from_proto(e.key), e) for e in entries)


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
    selects; refused, before anything is written, when no reader would read it back
    (check_readable_back)."""
    path = Path(path)
    data = serialize_keyed(pairs, text=is_text_path(path))
    check_readable_back(path, data)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data)


def check_readable_back(path: Path | str, data: bytes) -> None:
    """CorruptFileError, naming `path`, when `data` is over the read limits that every reader
    applies (read_capped): a file written anyway could be read by no verb, not even `convert`,
    and would replace a readable one."""
    text = is_text_path(path)
    limit = min(MAX_TEXT_BYTES, MAX_FILE_BYTES) if text else MAX_FILE_BYTES
    problem = None
    if len(data) > limit:
        problem = f"{len(data) / MiB:.1f} MiB, over the {describe(limit)} read limit"
    elif text:
        problem = text_budget_problem(data)
    if problem is None:
        return
    fix = ("write a binary file instead (a .pb path: binary files may hold up to "
           f"{describe(MAX_FILE_BYTES)}), or prune the entries"
           if text else "prune the entries, or split them over several files")
    raise CorruptFileError(f"{path}: not written: the results would be {problem}, so nothing "
                           f"could read the file back; {fix}. Nothing was changed.")


def save_results(path: Path | str, entries: Iterable[pb.Entry]) -> None:
    """Write a results file atomically, in the format its extension selects."""
    save_keyed(path, keyed(entries))
