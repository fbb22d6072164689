"""Size limits on everything read from a file, a cache directory or the Redis server.

Every read is bounded before it is parsed, and the bound is on memory, not only on bytes: binary
files may be large (MAX_BINARY_BYTES); text files have a far lower cap (MAX_TEXT_BYTES) and a cap
on backslash escapes (MAX_TEXT_ESCAPES), so the worst text file accepted costs about 550 MB to
parse; one cache-directory entry or Redis value is at most MAX_ENTRY_BYTES /
MAX_REMOTE_VALUE_BYTES. A canonical text file loaded through its index (results_index.py) has the
escape cap checked per parsed entry.

docs/security.md states these limits (a test checks the numbers there against this module); why
they are what they are: docs/decisions/0001-bounded-reads.md.
"""

from __future__ import annotations

MiB = 1024 * 1024

MAX_BINARY_BYTES = 256 * MiB
MAX_TEXT_BYTES = 64 * MiB
MAX_TEXT_ESCAPES = 1024 * 1024
MAX_ENTRY_BYTES = 4 * MiB
# Entries in one loaded results file: the index costs a few hundred bytes per entry whatever the
# entry's size, so a file of tiny entries is bounded by count, not by bytes.
MAX_FILE_ENTRIES = 200_000
MAX_REMOTE_VALUE_BYTES = 4 * MiB
# Per miss on the Redis tier: index members read (SRANDMEMBER, so the cost does not grow with the
# index) and the bytes of near-miss values fetched; each reply is also capped as it arrives.
MAX_REMOTE_INDEX_MEMBERS = 256
MAX_REMOTE_MISS_BYTES = 16 * MiB

_COUNTS = {"MAX_TEXT_ESCAPES": "escapes", "MAX_REMOTE_INDEX_MEMBERS": "members",
           "MAX_FILE_ENTRIES": "entries"}


def describe(value: int, name: str = "") -> str:
    """How a limit reads in messages and docs: `64 MiB`, or `1,048,576 escapes`."""
    if name in _COUNTS:
        return f"{value:,} {_COUNTS[name]}"
    if value % MiB == 0:
        return f"{value // MiB} MiB"
    return f"{value:,} bytes"


def text_budget_problem(data: bytes) -> str | None:
    """Why text-format `data` would cost too much memory to parse, or None when it may be
    parsed. The size cap itself is checked while reading (safeio.read_regular)."""
    escapes = data.count(b"\\")
    if escapes > MAX_TEXT_ESCAPES:
        return (f"has {escapes:,} backslash escapes, more than the "
                f"{describe(MAX_TEXT_ESCAPES, 'MAX_TEXT_ESCAPES')} a text file may have "
                "(protobuf's text parser needs ~140 bytes of memory for each)")
    return None
