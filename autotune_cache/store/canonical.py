"""What a canonical text results file looks like, and parsing one of its entry blocks alone.

The writer (`formats.serialize_keyed`, `autotune-cache convert`) writes `version: 1`, then one
block per entry, sorted by key (`CacheKey.sort_key`: kernel, then problem, ...): `entries {` at
column 0, the key's kernel, fingerprints and problem each one string on its own line, and a `}`
at column 0. Both loaders read these facts from here: `results_index` (a whole-file index,
proven by byte scans) and `searched` (a bisection of the file in place).

Why a block parsed alone is the entry a full parse would give: the schema has one `entries`
field, at the top level, and a text-format string cannot span lines; so in a file that parses,
a line starting `entries {` starts a top-level entry, and the text up to the next one is that
entry (plus, in a hand-edited file, comments or other top-level fields, which `parse_block`
refuses). The parsed key is then checked against the block's first lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from google.protobuf import message, text_encoding, text_format

from autotune_cache.formats import FORMAT_VERSION, check_text_budget, parse_error
from autotune_cache.proto import autotune_results_pb2 as pb

CONVERT_HINT = ("run `autotune-cache convert {path} {path}` to rewrite it canonically, and "
                "later loads parse only the entries they use")

HEAD = b"version: %d\n" % FORMAT_VERSION
START = b"entries {\n"
END = b"\n}\n"
# Where the next block starts: after a `}` line at column 0 followed by `entries {`.
NEXT_BLOCK = re.compile(rb"\n\}\n(?=entries \{\n)")
BOUNDARY = b"\n}\nentries {\n"  # NEXT_BLOCK as a plain string; the block starts 3 bytes in
# One quoted string, as protobuf's text tokenizer reads one: no newline, escapes kept.
STRING = rb'"([^"\\\n]*(?:\\.[^"\\\n]*)*)"'
# A block's first lines, from the `entries {` at its start; the line after them must be the
# key's device, its toolchain or its end (a line starting with a quote would continue the
# string before it).
KEY_HEAD = re.compile(
    rb"entries \{\n  key \{\n    kernel: " + STRING + rb"\n"
    rb"(?:    source_fingerprint: " + STRING + rb"\n)?"
    rb"(?:    configs_fingerprint: " + STRING + rb"\n)?"
    rb"(?:    problem: " + STRING + rb"\n)?"
    rb"(?=    device \{\n|    toolchain \{\n|  \}\n)")

Head = tuple[str, str]  # a block's (kernel, problem), from its first lines


def unescape(raw: bytes) -> str | None:
    """A header string's value, decoded as protobuf's tokenizer decodes it; None when it is not
    valid (the block parse, or the full parse, then says why)."""
    try:
        if b"\\" not in raw:
            return raw.decode("utf-8")
        return text_encoding.CUnescape(raw.decode("utf-8")).decode("utf-8")
    except (UnicodeDecodeError, ValueError):
        return None


def head_of(found: re.Match[bytes]) -> Head | None:
    """The (kernel, problem) of a KEY_HEAD match; None when the writer would not have written
    it (an empty kernel, a string that does not decode)."""
    kernel, problem = found.group(1, 4)
    name, about = unescape(kernel), unescape(problem or b"")
    if not name or about is None:
        return None
    return name, about


def parse_block(path: Path, block: bytes, head: Head, *, binary: bool, label: str, start: int,
                whole: Callable[[], bytes]) -> pb.Entry | None:
    """The entry of one block parsed alone, or None when it is not exactly one entry whose
    kernel and problem are `head` (the caller then parses the whole file). A block that does
    not parse raises CorruptFileError naming the file and the line (the entry's bytes, for
    binary, from `label`); `start` is the block's offset in the file, and `whole()` the file's
    bytes, read only for that message."""
    msg = pb.AutotuneResultsFile()
    if binary:
        try:
            msg.entries.add().MergeFromString(block)
        except message.DecodeError as e:
            raise parse_error(path, f"{label}: {e}", text=False,
                              what="autotune results file") from e
    else:
        check_text_budget(block, path)
        try:
            text_format.Parse(block.decode("utf-8"), msg)
        except (text_format.ParseError, UnicodeDecodeError) as e:
            data = whole()
            line = data.count(b"\n", 0, start)
            detail = re.sub(r"^(\d+)", lambda m: str(int(m.group(1)) + line), str(e))
            raise parse_error(path, detail, text=True, data=data,
                              what="autotune results file") from e
    if len(msg.entries) != 1 or msg.version != 0:
        return None
    entry = msg.entries[0]
    return entry if (entry.key.kernel, entry.key.problem) == head else None
