"""The action of `<name>.binary_copy` (rules/private/binary_copy.bzl): write the binary copy of
one committed results file into a directory.

    make_binary_copy RESULTS_FILE OUT_DIR

OUT_DIR ends up holding `<sha256 of the file>-<text|binary>.binpb`, exactly what
`autotune_cache.binary_copy.load_file` looks for, and README.txt, one line saying what the
directory holds and why (so that the directory is never empty: Bazel 4.2.3 leaves an empty
output directory out of a test's runfiles tree). No copy is made:
- when the file is under binary_copy.MIN_BYTES (it parses in milliseconds, and the loader never
  looks for the copy of a file that small);
- when the file cannot be read or parsed (missing, over a cap, damaged). The build must not
  fail for that: the test then parses the file itself and fails with the library's message and
  the regen hint, and `.regen` (which never depends on this action) can fix it. This tool only
  prints why it made no copy.
Anything else (a bug, a full disk) fails the action.

A large text file is parsed by protoc's C++ parser when grpcio-tools is on the tool's path (the
`@rules_autotune//:fast_text` label flag), else by protobuf's Python parser, about 10x slower;
then the tool prints how to set the flag (the library's own hint names pip, which is not how a
Bazel user adds it, so the library's warnings are silenced here).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from autotune_cache import binary_copy, native_text
from autotune_cache.errors import AutotuneCacheError
from autotune_cache.formats import is_text_path

README = "README.txt"


def write_copy(source: Path, out_dir: Path) -> str:
    """Writes the copy of `source` into `out_dir` when it should have one; returns what the
    directory holds, for README.txt (a problem with the file is also printed)."""
    try:
        size = source.stat().st_size
    except OSError as e:
        print(f"make_binary_copy: {source}: {e.strerror}; no binary copy made (the test will "
              "report the file itself).", file=sys.stderr)
        return f"no binary copy of {source}: {e.strerror}"
    if size < binary_copy.MIN_BYTES:
        return (f"no binary copy of {source}: {size} bytes, under binary_copy.MIN_BYTES "
                f"({binary_copy.MIN_BYTES}); the test parses it in milliseconds")
    if size >= native_text.MIN_BYTES and is_text_path(source) and not native_text.available():
        print(f"make_binary_copy: parsing {source} ({size // 1_000_000} MB of text) with "
              "protobuf's Python parser; with grpcio-tools in your pip hub, `build "
              "--@rules_autotune//:fast_text=@pypi//grpcio_tools` makes this action about 10x "
              "faster (protoc's parser).", file=sys.stderr)
    try:
        copy = binary_copy.make_copy(source, out_dir)
    except AutotuneCacheError as e:
        print(f"make_binary_copy: no binary copy made; the test will parse the file itself and "
              f"report this: {e}", file=sys.stderr)
        return f"no binary copy of {source}: it cannot be loaded (the test reports why)"
    return f"{copy.name}: the binary copy of {source}"


def main(argv: list[str]) -> int:
    """Writes the copy and README.txt; returns the exit status (2 for a wrong command line)."""
    if len(argv) != 2:
        print("usage: make_binary_copy RESULTS_FILE OUT_DIR", file=sys.stderr)
        return 2
    source, out_dir = Path(argv[0]), Path(argv[1])
    logging.getLogger("autotune_cache").setLevel(logging.ERROR)  # see the module docstring
    out_dir.mkdir(parents=True, exist_ok=True)
    held = write_copy(source, out_dir)
    (out_dir / README).write_text(
        f"{held}\n(autotuned_py_test's `<name>.binary_copy`: rules/private/binary_copy.bzl)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
