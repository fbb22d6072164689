"""The cache key: what a tuned result depends on, in a canonical, hashable form.

Every key carries the key scheme it was computed with (`KEY_SCHEME`, like XLA's
`kCurrentVersion`): the recipe of its digest, of `canonical_problem`, and of the fingerprints
the backends put in it (`triton/fingerprint.py`, `triton/configs.configs_fingerprint`). A change
to any of them bumps `KEY_SCHEME`, and an entry of another scheme is then reported as exactly
that ("written with key scheme N, this autotune_cache computes scheme M"), never as an edited
kernel. Scheme 1 is the scheme of every key written before schemes were recorded: its keys
store no `key_scheme` field and keep their digests, so their files keep their bytes and names.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from autotune_cache.proto import autotune_results_pb2 as pb

# The key scheme this autotune_cache computes keys with; see the module docstring.
KEY_SCHEME = 1
# The scheme a key without a `key_scheme` field was written with.
UNRECORDED_SCHEME = 1


@dataclass(frozen=True, order=True)
class Device:
    """The device a result was measured on."""

    name: str
    arch: str = ""
    sm_count: int = 0

    def __str__(self) -> str:
        parts = [self.name]
        if self.arch:
            parts.append(self.arch)
        if self.sm_count:
            parts.append(f"{self.sm_count} SMs")
        return " / ".join(parts)

    def to_proto(self) -> pb.Device:
        return pb.Device(name=self.name, arch=self.arch, sm_count=self.sm_count)

    @classmethod
    def from_proto(cls, msg: pb.Device) -> Device:
        return cls(name=msg.name, arch=msg.arch, sm_count=msg.sm_count)


# The candidate-list fingerprint of a warm-up entry: a plain `@triton.jit` specialization that a
# dump run compiled, recorded so that a loaded run compiles it ahead (triton/warmups.py). A
# real candidate-list fingerprint is a hex digest, so no tuned entry carries it.
WARMUP_CONFIGS = "triton.jit"


def is_warmup(key: CacheKey) -> bool:
    """Whether `key` is a warm-up entry's (a specialization to compile ahead, no tuned result)."""
    return key.configs_fingerprint == WARMUP_CONFIGS


def _canonical_value(value: object) -> str:
    """Render one problem value so that equal problems always render equally."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "(" + ",".join(_canonical_value(v) for v in value) + ")"
    text = str(value)
    if any(c in text for c in ",="):
        raise ValueError(f"problem value {text!r} must not contain ',' or '='")
    return text


def canonical_problem(problem: Mapping[str, object] | str) -> str:
    """The canonical text of a problem key: name=value pairs sorted by name, comma-joined."""
    if isinstance(problem, str):
        return problem
    for name in problem:
        if not name or any(c in name for c in ",=") or name != name.strip():
            raise ValueError(f"problem key name {name!r} must be non-empty and free of ',' '='")
    return ",".join(f"{name}={_canonical_value(problem[name])}" for name in sorted(problem))


def canonical_toolchain(toolchain: Mapping[str, str] | tuple[tuple[str, str], ...]) -> tuple:
    """Toolchain versions as a sorted tuple of (name, version) pairs."""
    items = toolchain.items() if isinstance(toolchain, Mapping) else toolchain
    return tuple(sorted((str(k), str(v)) for k, v in items))


@dataclass(frozen=True)
class CacheKey:
    """Everything that decides whether a tuned result is still valid."""

    kernel: str
    source_fingerprint: str
    configs_fingerprint: str
    problem: str
    device: Device
    toolchain: tuple[tuple[str, str], ...] = field(default=())
    scheme: int = KEY_SCHEME

    def __init__(
        self,
        kernel: str,
        source_fingerprint: str,
        configs_fingerprint: str,
        problem: Mapping[str, object] | str,
        device: Device,
        toolchain: Mapping[str, str] | tuple[tuple[str, str], ...] = (),
        scheme: int = KEY_SCHEME,
    ) -> None:
        if not kernel:
            raise ValueError("cache key needs a kernel name")
        object.__setattr__(self, "kernel", kernel)
        object.__setattr__(self, "source_fingerprint", source_fingerprint)
        object.__setattr__(self, "configs_fingerprint", configs_fingerprint)
        object.__setattr__(self, "problem", canonical_problem(problem))
        object.__setattr__(self, "device", device)
        object.__setattr__(self, "toolchain", canonical_toolchain(toolchain))
        object.__setattr__(self, "scheme", scheme)

    @property
    def toolchain_str(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.toolchain)

    def sort_key(self) -> tuple:
        """Order used for every file we write, so output is deterministic."""
        return (
            self.kernel,
            self.problem,
            self.device.name,
            self.device.arch,
            self.device.sm_count,
            self.toolchain,
            self.source_fingerprint,
            self.configs_fingerprint,
            self.scheme,
        )

    def to_proto(self) -> pb.Key:
        """The key as stored; `key_scheme` is left unset for scheme 1 (see UNRECORDED_SCHEME)."""
        return pb.Key(
            kernel=self.kernel,
            source_fingerprint=self.source_fingerprint,
            configs_fingerprint=self.configs_fingerprint,
            problem=self.problem,
            device=self.device.to_proto(),
            toolchain=[pb.Version(name=k, version=v) for k, v in self.toolchain],
            key_scheme=0 if self.scheme == UNRECORDED_SCHEME else self.scheme,
        )

    @classmethod
    def from_proto(cls, msg: pb.Key) -> CacheKey:
        return cls(
            kernel=msg.kernel,
            source_fingerprint=msg.source_fingerprint,
            configs_fingerprint=msg.configs_fingerprint,
            problem=msg.problem,
            device=Device.from_proto(msg.device),
            toolchain=tuple((v.name, v.version) for v in msg.toolchain),
            scheme=msg.key_scheme or UNRECORDED_SCHEME,
        )

    def digest(self) -> str:
        """Stable hex SHA-256 of the key; the cache-directory file name. The scheme is part of
        the input from scheme 2 on (a scheme-1 key hashes as before schemes were recorded)."""
        fields = [
            self.kernel,
            self.source_fingerprint,
            self.configs_fingerprint,
            self.problem,
            self.device.name,
            self.device.arch,
            str(self.device.sm_count),
            self.toolchain_str,
        ]
        if self.scheme != UNRECORDED_SCHEME:
            fields.append(f"key_scheme={self.scheme}")
        return hashlib.sha256("\x1f".join(fields).encode()).hexdigest()

    def problem_group(self) -> str:
        """Short hex hash of kernel and problem: every key that could be a near miss of this
        one shares it, so the cache directory and the remote tier can find them cheaply."""
        return hashlib.sha256(f"{self.kernel}\x1f{self.problem}".encode()).hexdigest()[:16]

    def describe(self) -> str:
        """One line naming the kernel, problem, device and toolchain, for messages."""
        return (
            f"kernel {self.kernel!r}, problem [{self.problem}], device [{self.device}], "
            f"toolchain [{self.toolchain_str}]"
        )

    def is_stale(self, other: CacheKey) -> bool:
        """Whether `other`, a near miss of this key (same kernel and problem), is stale: another
        key scheme, kernel source, device or toolchain. One that differs only in its candidate
        list is not: its timings are reused by an incremental re-tune."""
        return (other.scheme != self.scheme
                or other.source_fingerprint != self.source_fingerprint
                or other.device != self.device or other.toolchain != self.toolchain)

    def stale_reasons(self, other: CacheKey) -> list[str]:
        """What differs between this key and a near-miss entry's key, in words. Fingerprints
        of another key scheme are not compared: they differ whether or not the kernel did."""
        reasons = []
        if other.scheme != self.scheme:
            reasons.append(scheme_mismatch(other.scheme, self.scheme))
        if other.device != self.device:
            reasons.append(f"device [{other.device}] != [{self.device}]")
        if other.toolchain != self.toolchain:
            reasons.append(f"toolchain [{other.toolchain_str}] != [{self.toolchain_str}]")
        if other.scheme != self.scheme:
            return reasons
        if other.source_fingerprint != self.source_fingerprint:
            reasons.append("kernel source changed")
        if other.configs_fingerprint != self.configs_fingerprint:
            reasons.append("candidate configs changed")
        return reasons


def scheme_mismatch(written: int, current: int) -> str:
    """The stale reason of an entry whose key was computed with another key scheme."""
    text = (f"key scheme {written} != {current}: this cache was written with key scheme "
            f"{written}, and this autotune_cache computes keys with scheme {current}, so its "
            "fingerprints cannot be compared (the kernel itself may be unchanged); ")
    if written > current:
        return text + "update autotune_cache to the release that wrote it, or regenerate the cache"
    return text + "regenerate the cache"
