"""One-line, human-readable summaries of XLA autotune configs and fusions, for the CLI table."""

from __future__ import annotations

import re

from google.protobuf import message

from autotune_cache.xla.proto import xla_autotuner_pb2 as cache_pb
from autotune_cache.xla.proto import xla_autotuning_pb2 as legacy_pb

BACKEND_CONFIG_URL_SUFFIX = "/xla.autotuner.BackendConfig"


def fields_summary(msg: message.Message) -> str:
    """`name=value` for every set field, sub-messages as `name{...}`; enums by name."""
    parts = []
    for fd, value in msg.ListFields():
        if fd.message_type is not None and not fd.message_type.GetOptions().map_entry:
            values = value if _is_repeated(fd) else [value]
            parts.extend(f"{fd.name}{{{fields_summary(v)}}}" for v in values)
        elif fd.enum_type is not None and not _is_repeated(fd):
            parts.append(f"{fd.name}={_enum_name(fd.enum_type, value)}")
        elif isinstance(value, bool):
            parts.append(f"{fd.name}={str(value).lower()}")
        else:
            parts.append(f"{fd.name}={value if not _is_repeated(fd) else list(value)}")
    return " ".join(parts)


def _is_repeated(fd: object) -> bool:
    # protobuf >= 5 has is_repeated; 4.x only has label.
    rep = getattr(fd, "is_repeated", None)
    if rep is not None:
        return bool(rep)
    return getattr(fd, "label", 0) == 3


def _enum_name(enum_type: object, number: int) -> str:
    value = enum_type.values_by_number.get(number)  # type: ignore[attr-defined]
    return value.name if value is not None else str(number)


def backend_name(number: int) -> str:
    """The Backend enum's name, or `backend#N` for values newer than our schema."""
    try:
        return cache_pb.Backend.Name(number)
    except ValueError:
        return f"backend#{number}"


def backend_config_summary(config: cache_pb.BackendConfig) -> str:
    """The chosen backend config's fields, e.g. `block_m=128 block_n=256 ...`."""
    which = config.WhichOneof("config")
    if which is None:
        return ""
    return fields_summary(getattr(config, which))


def config_summary(config: cache_pb.Config) -> str:
    """A new-format winning config, e.g. `TRITON block_m=128 block_n=256 ...`."""
    detail = backend_config_summary(config.backend_config)
    return " ".join(p for p in (backend_name(config.backend), detail) if p)


def legacy_result_summary(result: legacy_pb.AutotuneResult) -> str:
    """A legacy AutotuneResult, e.g. `triton block_m=128 ...` or `NATIVE_EMITTER`."""
    which = result.WhichOneof("key")
    if which is None:
        text = "no config"
    elif which == "other":
        text = result.other.name or "other"
        any_config = result.other.config
        if any_config.type_url.endswith(BACKEND_CONFIG_URL_SUFFIX):
            packed = cache_pb.BackendConfig()
            try:
                unpacked = any_config.Unpack(packed)
            except message.DecodeError:  # a damaged file: summarise, verify reports it
                text = f"{text} (undecodable backend config)"
            else:
                if unpacked:
                    detail = backend_config_summary(packed)
                    text = f"{text} {detail}" if detail else text
    else:
        detail = fields_summary(getattr(result, which))
        text = f"{which} {detail}" if detail else which
    if result.HasField("failure"):
        kind = legacy_pb.AutotuneResult.FailureKind
        text += f" FAILED({_enum_name(kind.DESCRIPTOR, result.failure.kind)})"
    return text


def legacy_time_ms(result: legacy_pb.AutotuneResult) -> float | None:
    """The measured run time in milliseconds, or None when XLA stored none."""
    if not result.HasField("run_time"):
        return None
    return result.run_time.seconds * 1e3 + result.run_time.nanos / 1e6


_ROOT = re.compile(r"ROOT\s+\S+\s*=\s*(?P<shape>\S+(?:\{[^}]*\})?)\s+(?P<op>[\w-]+)\(")


def hlo_summary(hlo: str) -> str:
    """The fusion's root op and shape, e.g. `add bf16[4096,1024]{1,0}`; `` when not found."""
    match = _ROOT.search(hlo)
    if match is None:
        return ""
    return f"{match.group('op')} {match.group('shape')}"
