"""The action of `<name>.binary_copy` (rules/private/binary_copy.bzl): write the binary copy of
one committed results file into a directory.

    make_binary_copy RESULTS_FILE OUT_DIR

OUT_DIR ends up holding `<sha256 of the file>-<text|binary>.binpb`, exactly what
`autotune_cache.binary_copy.load_file` looks for, or nothing:
- when the file is under binary_copy.MIN_BYTES (it parses in milliseconds, and the loader never
  looks for the copy of a file that small);
- when the file cannot be read or parsed (missing, over a cap, damaged). The build must not
  fail for that: the test then parses the file itself and fails with the library's message and
  the regen hint, and `.regen` (which never depends on this action) can fix it. This tool only
  prints why it made no copy.
Anything else (a bug, a full disk) fails the action.
"""

from __future__ import annotations

import sys
from pathlib import Path

from autotune_cache import binary_copy
from autotune_cache.errors import AutotuneCacheError


def main(argv: list[str]) -> int:
    """Writes the copy; returns the exit status (2 for a wrong command line)."""
    if len(argv) != 2:
        print("usage: make_binary_copy RESULTS_FILE OUT_DIR", file=sys.stderr)
        return 2
    source, out_dir = Path(argv[0]), Path(argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        size = source.stat().st_size
    except OSError as e:
        print(f"make_binary_copy: {source}: {e.strerror}; no binary copy made (the test will "
              "report the file itself).", file=sys.stderr)
        return 0
    if size < binary_copy.MIN_BYTES:
        return 0
    try:
        binary_copy.make_copy(source, out_dir)
    except AutotuneCacheError as e:
        print(f"make_binary_copy: no binary copy made; the test will parse the file itself and "
              f"report this: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
