"""Parsing large text-format files with protoc's C++ parser instead of protobuf's Python one.

protobuf's Python package parses text format in pure Python, about 1.3 MB/s on the CI machine
(a 10,000-entry text cache with 8 candidates per entry, 39 MB: 27-30 s). `protoc --encode`, the
C++ text parser protobuf itself ships, turns the same file into binary in 2.9 s, and the binary
parses in milliseconds (bench/cpu_cache_scaling.py measures both). protoc comes from the
`grpcio-tools` wheel (`pip install autotune_cache[fast-text]`), which carries it as a module.

Decisions:
- Used only for text files of at least MIN_BYTES (starting protoc costs about 0.3 s) and only
  when grpc_tools is importable; otherwise, and for smaller files, the Python parser runs.
- protoc is only a fast path, never the authority: on any failure (a syntax error, a missing
  module, a timeout, a crash) the caller parses with Python, whose error message names the line
  and column. Whatever protoc accepts, Python's parser accepts and builds the same message from
  (tests/core/test_native_text.py; a fuzz property in tests/reliability/test_fuzz.py); protoc
  is stricter in places (a raw NUL byte in a string), and there Python decides. Bytes that are
  not UTF-8 never reach protoc (it would take them inside strings; Python refuses the file).
- protoc gets the message's schema as a descriptor set written from the generated modules'
  descriptors, so no .proto file has to be found at run time; it includes the types the file's
  `google.protobuf.Any` fields name (XLA's files have them), looked up in the descriptor pool
  as Python's parser looks them up.
- It runs in a child process (protoc reads stdin and writes stdout), in isolated mode (`-I`:
  not the working directory, nor PYTHON* variables, decide what it imports) under the parent's
  `sys.path`, with a timeout.
- Where grpc_tools is missing, a text file of at least HINT_BYTES (several seconds of Python
  parsing) logs, once per process, how to install it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import logging
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2, message

MIN_BYTES = 1024 * 1024
HINT_BYTES = 8 * 1024 * 1024
TIMEOUT_S = 600.0

log = logging.getLogger("autotune_cache")
_hinted: list[bool] = []

_CHILD = (
    "import json, sys\n"
    "sys.path[:0] = json.loads(sys.argv[1])\n"
    "from grpc_tools import protoc\n"
    "sys.exit(protoc.main(['protoc', *sys.argv[2:]]))\n"
)


@functools.cache
def available() -> bool:
    """Whether protoc (the grpc_tools module) can be imported here."""
    return importlib.util.find_spec("grpc_tools") is not None


# A google.protobuf.Any's type URL, in the text (`type_url: "…/pkg.Msg"` or `[…/pkg.Msg] {`).
_ANY_TYPE = re.compile(rb"type\.googleapis\.com/([A-Za-z_][A-Za-z0-9_.]*)")


def _descriptor_set(cls: type[message.Message], data: bytes = b"") -> bytes:
    """A FileDescriptorSet with `cls`'s file, the files of the message types `data`'s Any
    fields name (Python's parser finds those in its descriptor pool; protoc only knows what it
    is given), and every file they import, imports first."""
    files: list[descriptor_pb2.FileDescriptorProto] = []
    seen: set[str] = set()

    def add(file) -> None:
        if file.name in seen:
            return
        seen.add(file.name)
        for dependency in file.dependencies:
            add(dependency)
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        files.append(proto)

    add(cls.DESCRIPTOR.file)
    pool = cls.DESCRIPTOR.file.pool
    for name in sorted(set(_ANY_TYPE.findall(data))):
        # A type unknown here too: both parsers refuse the file.
        with contextlib.suppress(KeyError, UnicodeDecodeError):
            add(pool.FindMessageTypeByName(name.decode()).file)
    return descriptor_pb2.FileDescriptorSet(file=files).SerializeToString()


def text_to_binary(data: bytes, cls: type[message.Message], path: object) -> bytes | None:
    """`data` (text format, read from `path`) encoded as a binary `cls` by protoc, or None when
    protoc is not available here, or fails for any reason (the caller then parses the text with
    Python)."""
    if len(data) < MIN_BYTES:
        return None
    if not available():
        if len(data) >= HINT_BYTES and not _hinted:
            _hinted.append(True)
            log.warning("autotune_cache: %s is %d MB of text; protobuf's Python parser takes "
                        "about a second per MB. `pip install 'autotune_cache[fast-text]'` "
                        "(grpcio-tools) parses it about 10x faster, and a binary copy "
                        "(`autotune-cache convert`) loads in milliseconds.", path,
                        len(data) // 1_000_000)
        return None
    try:  # Python's path reads text as UTF-8; protoc would take other bytes in strings
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    with tempfile.TemporaryDirectory(prefix="autotune-protoc-") as tmp:
        descriptors = Path(tmp) / "schema.pb"
        descriptors.write_bytes(_descriptor_set(cls, data))
        try:
            proc = subprocess.run(
                [sys.executable, "-I", "-c", _CHILD, json.dumps([p for p in sys.path if p]),
                 f"--descriptor_set_in={descriptors}",
                 f"--encode={cls.DESCRIPTOR.full_name}", cls.DESCRIPTOR.file.name],
                input=data, capture_output=True, timeout=TIMEOUT_S, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
    return proc.stdout if proc.returncode == 0 else None
