"""Compare autotune_cache's copy of XLA's autotune schema with the one inside an XLA binary.

    python -m autotune_cache.xla.schema_check path/to/xla_cuda_plugin.so

XLA's C++ protobuf code embeds each .proto file's serialized FileDescriptorProto in the binary
(for example jax_plugins/xla_cuda13/xla_cuda_plugin.so from the jax-cuda13-pjrt wheel). This
finds the ones our schema mirrors and reports every message or enum whose fields (name, number,
type, repeated, oneof) or values differ. Run it when JAX/XLA is upgraded; exit status 1 on any
difference. It only reads the file.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool

from autotune_cache.xla.wire import read_varint

# XLA's files that hold the types our schema models.
XLA_FILES = (
    "xla/autotune_cache.proto",
    "xla/autotune_results.proto",
    "xla/autotuning.proto",
    "xla/backends/autotuner/backend_config.proto",
    "xla/backends/autotuner/backends.proto",
    "xla/tsl/protobuf/dnn.proto",
    "xla/codegen/xtile/xtile_config.proto",
    "xla/service/cpu/backend_config.proto",
    "xla/backends/cpu/ynn_fusion_options.proto",
    "xla/service/gpu/backend_configs.proto",
)
ROOTS = ("xla.autotuner.AutotuneCache", "xla.AutotuneResults", "xla.autotuner.BackendConfig")
_MAX_FILE_FIELD = 18  # FileDescriptorProto's highest field number is small; beyond it, stop.


def _descriptor_end(data: bytes, start: int) -> int:
    """Where the FileDescriptorProto starting at `start` ends: at the first implausible field."""
    pos = start
    while pos < len(data):
        try:
            tag, nxt = read_varint(data, pos)
            number, wire_type = tag >> 3, tag & 7
            if not 1 <= number <= _MAX_FILE_FIELD:
                break
            if wire_type == 2:
                size, nxt = read_varint(data, nxt)
                nxt += size
            elif wire_type == 0:
                _, nxt = read_varint(data, nxt)
            else:
                break
        except ValueError:  # cut off, or not a varint
            break
        if nxt > len(data):
            break
        pos = nxt
    return pos


def embedded_descriptors(data: bytes, names: Iterable[str]
                         ) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """The FileDescriptorProtos named `names` found embedded in `data`."""
    found = {}
    for name in names:
        raw = name.encode()
        for match in re.finditer(re.escape(bytes([0x0A, len(raw)]) + raw), data):
            fd = descriptor_pb2.FileDescriptorProto()
            try:
                fd.ParseFromString(data[match.start():_descriptor_end(data, match.start())])
            except Exception:  # noqa: BLE001 - a false match; try the next one
                continue
            if fd.message_type or fd.enum_type:
                found[name] = fd
                break
    return found


def _index(files: Iterable[descriptor_pb2.FileDescriptorProto]) -> dict[str, object]:
    types: dict[str, object] = {}

    def walk(prefix: str, messages: Iterable, enums: Iterable) -> None:
        for e in enums:
            types[f"{prefix}.{e.name}"] = e
        for m in messages:
            types[f"{prefix}.{m.name}"] = m
            walk(f"{prefix}.{m.name}", m.nested_type, m.enum_type)

    for fd in files:
        walk(fd.package, fd.message_type, fd.enum_type)
    return types


def differences(xla: dict[str, descriptor_pb2.FileDescriptorProto]) -> list[str]:
    """Human-readable differences between XLA's types (reachable from ROOTS) and ours."""
    from autotune_cache.xla.proto import xla_autotuner_pb2  # noqa: F401 - registers our types

    pool = descriptor_pool.Default()
    theirs = _index(xla.values())
    out, seen, todo = [], set(), list(ROOTS)
    while todo:
        name = todo.pop()
        if name in seen or name.startswith("google.protobuf."):
            continue
        seen.add(name)
        t = theirs.get(name)
        if t is None:
            out.append(f"{name}: not found in the XLA binary (pass more files?)")
            continue
        if isinstance(t, descriptor_pb2.EnumDescriptorProto):
            try:
                ours = {(v.name, v.number) for v in pool.FindEnumTypeByName(name).values}
            except KeyError:
                out.append(f"enum {name}: missing from our schema")
                continue
            want = {(v.name, v.number) for v in t.value}
            if ours != want:
                out.append(f"enum {name}: XLA only {sorted(want - ours)}, ours only "
                           f"{sorted(ours - want)}")
            continue
        try:
            md = pool.FindMessageTypeByName(name)
        except KeyError:
            out.append(f"message {name}: missing from our schema")
            continue
        want = set()
        for f in t.field:
            if f.type_name:
                todo.append(f.type_name.lstrip("."))
            oneof = t.oneof_decl[f.oneof_index].name if f.HasField("oneof_index") and not \
                f.proto3_optional else ""
            want.add((f.name, f.number, f.type, f.label == f.LABEL_REPEATED,
                      f.type_name.lstrip("."), oneof))
        ours = set()
        for f in md.fields:
            sub = f.message_type or f.enum_type
            repeated = f.label == f.LABEL_REPEATED if not hasattr(f, "is_repeated") else \
                f.is_repeated
            ours.add((f.name, f.number, f.type, repeated, sub.full_name if sub else "",
                      f.containing_oneof.name if f.containing_oneof else ""))
        if ours != want:
            out.append(f"message {name}: XLA only {sorted(want - ours)}, ours only "
                       f"{sorted(ours - want)}")
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the differences for the binary given on the command line."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    path = Path(argv[0])
    try:
        data = path.read_bytes()
    except OSError as e:
        print(f"{path}: cannot read ({e.strerror})", file=sys.stderr)
        return 2
    xla = embedded_descriptors(data, XLA_FILES)
    if "xla/autotune_cache.proto" not in xla:
        print(f"{path}: holds no xla/autotune_cache.proto descriptor; give an XLA GPU binary "
              "such as jax_plugins/xla_cuda13/xla_cuda_plugin.so", file=sys.stderr)
        return 2
    diffs = differences(xla)
    for d in diffs:
        print(d)
    print(f"{len(diffs)} differences in the types reachable from {', '.join(ROOTS)}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
