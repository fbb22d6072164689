"""Parsing and printing XLA autotune messages, text or binary, with errors that name the file."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from google.protobuf import descriptor_pool, message, text_format

from autotune_cache.errors import CorruptFileError
from autotune_cache.formats import TEXT_EXTENSIONS, parse_message

M = TypeVar("M", bound=message.Message)

# Printing with an empty pool keeps google.protobuf.Any payloads as type_url + value bytes, the
# way XLA writes its legacy per-fusion files; the default pool expands them, as XLA's dumps do.
_NO_ANY_EXPANSION = descriptor_pool.DescriptorPool()

NEWER_SCHEMA_HINT = (
    "The file uses names this autotune_cache does not model (written by a newer XLA than the "
    "JAX 0.11.2 schema in autotune_cache/xla/proto?). Update autotune_cache, or have that XLA "
    "write a binary file (binary files keep unknown fields and load fine)."
)

def parse(data: bytes, cls: type[M], path: Path | str, *, text: bool, what: str) -> M:
    """Parse `data` as a `cls` message; `what` names the file kind in errors."""
    return parse_message(data, cls, path, text=text, what=what,
                         newer_schema_hint=NEWER_SCHEMA_HINT)


def to_text(msg: message.Message, *, expand_any: bool = True) -> str:
    """Text format as XLA's C++ printer writes it (2-space indent, enums by name)."""
    pool = None if expand_any else _NO_ANY_EXPANSION
    return text_format.MessageToString(msg, descriptor_pool=pool)


def to_text_checked(msg: message.Message, path: Path | str, *, expand_any: bool = True) -> str:
    """Text of `msg`, refusing when text format would lose something (unknown fields).

    Binary XLA files may carry fields from a newer XLA that our schema does not know; protobuf
    keeps them through a binary round trip but text format cannot express them.
    """
    try:
        text = to_text(msg, expand_any=expand_any)
        again = type(msg)()
        text_format.Parse(text, again)
    except RecursionError:
        raise CorruptFileError(
            f"{path}: cannot write this as text: an entry nests google.protobuf.Any messages "
            "too deeply to print (no XLA writes such a file; is it damaged?). Write a binary "
            f"file instead (any extension other than {'/'.join(TEXT_EXTENSIONS)}).") from None
    if again.SerializeToString(deterministic=True) != msg.SerializeToString(deterministic=True):
        raise CorruptFileError(
            f"{path}: cannot write this as text without losing data: some entries carry fields "
            "this autotune_cache does not model (from a newer XLA?). Write a binary file "
            f"instead (any extension other than {'/'.join(TEXT_EXTENSIONS)})."
        )
    return text
