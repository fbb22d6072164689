"""Size limits on everything read from a file, a cache directory or the Redis server.

Decision: a results file is untrusted input (a shared directory or server can hold anything), so
every read is bounded before it is parsed, and the bound is on *memory*, not only on bytes:

- binary protobuf parses in about its own size, so binary files may be large;
- protobuf's text parser costs about 6 bytes of memory per plain byte but about 140 per escaped
  byte (`\\001`: measured with protobuf 7.36 / upb), so a text file has a far lower cap *and* a
  cap on backslash escapes. The worst text file accepted then costs about
  6 x MAX_TEXT_BYTES + 140 x MAX_TEXT_ESCAPES = ~550 MB to parse. 64 MiB admits a committed
  10,000-entry cache with 8 candidates per entry (39 MB), which then loads through its own
  index (results_index.py: a load parses only the entries it uses, and the escape cap is
  checked per parsed entry); larger caches are committed as binary (`autotune-cache convert`);
- one cache-directory entry or Redis value is a few KiB; anything far larger is not ours.

docs/security.md states these limits (a test checks the numbers there against this module).
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
