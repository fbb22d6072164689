"""schema_check finds XLA's embedded descriptors and reports schema drift (no XLA binary needed)."""

from __future__ import annotations

from google.protobuf import descriptor_pb2

from autotune_cache.xla import schema_check
from autotune_cache.xla.proto import (
    xla_autotuner_pb2,
    xla_autotuning_pb2,
    xla_cpu_pb2,
    xla_dnn_pb2,
    xla_gpu_pb2,
    xla_xtile_pb2,
)

MODULES = (xla_autotuner_pb2, xla_autotuning_pb2, xla_cpu_pb2, xla_dnn_pb2, xla_gpu_pb2,
           xla_xtile_pb2)


def our_files() -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """Our own schema, standing in for what an XLA binary embeds (same packages and names)."""
    out = {}
    for module in MODULES:
        fd = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(fd)
        out[fd.name] = fd
    return out


def test_our_schema_agrees_with_itself():
    assert schema_check.differences(our_files()) == []


def test_a_renumbered_field_and_a_new_enum_value_are_reported():
    files = our_files()
    fd = files["autotune_cache/xla/proto/xla_autotuner.proto"]
    target = next(m for m in fd.message_type if m.name == "AutotuneTargetKey")
    target.field[2].number = 30
    backend = next(e for e in fd.enum_type if e.name == "Backend")
    backend.value.add(name="SHINY_NEW_BACKEND", number=42)
    diffs = schema_check.differences(files)
    assert len(diffs) == 2
    assert any(d.startswith("message xla.autotuner.AutotuneTargetKey") and "30" in d
               for d in diffs)
    assert any("SHINY_NEW_BACKEND" in d for d in diffs)


def test_descriptors_are_found_inside_a_binary():
    fd = our_files()["autotune_cache/xla/proto/xla_autotuner.proto"]
    fd.name = "xla/autotune_cache.proto"
    blob = b"\x7fELF" + bytes(range(256)) * 3 + fd.SerializeToString() + b"\x00\xff" * 50
    found = schema_check.embedded_descriptors(blob, ["xla/autotune_cache.proto", "nope.proto"])
    assert list(found) == ["xla/autotune_cache.proto"]
    assert [m.name for m in found["xla/autotune_cache.proto"].message_type] == [
        m.name for m in fd.message_type]


def test_main_refuses_a_binary_without_xla(tmp_path, capsys):
    (tmp_path / "x.so").write_bytes(b"\x7fELF nothing here")
    assert schema_check.main([str(tmp_path / "x.so")]) == 2
    assert "no xla/autotune_cache.proto" in capsys.readouterr().err
