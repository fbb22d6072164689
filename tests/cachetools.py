"""Shared test helpers: deterministic entries and a fake tuner whose timings are exact."""

from __future__ import annotations

from autotune_cache import CacheKey, Device
from autotune_cache.proto import autotune_results_pb2 as pb

H200 = Device(name="NVIDIA H200", arch="sm_90", sm_count=132)
CPU = Device(name="cpu-interpreter", arch="interpreter", sm_count=0)
TOOLCHAIN = {"triton": "3.6.0"}


def make_key(
    kernel: str = "matmul", problem: dict | None = None, device: Device = H200,
    toolchain: dict | None = None, source: str = "src1", configs: str = "cfg1",
) -> CacheKey:
    """A cache key with sensible defaults."""
    return CacheKey(kernel=kernel, source_fingerprint=source, configs_fingerprint=configs,
                    problem=problem or {"M": 128, "N": 128, "a": "float16"}, device=device,
                    toolchain=toolchain or TOOLCHAIN)


def fake_time_ms(block: int, warps: int) -> float:
    """The deterministic fake benchmark: block 64 with 4 warps is always fastest."""
    return abs(block - 64) / 16 + abs(warps - 4) / 4 + 1.0


def fake_tune(key: CacheKey, tuning_seconds: float = 2.5) -> pb.Entry:
    """Tune `key` with the fake benchmark over a fixed candidate list."""
    candidates = []
    for block in (32, 64, 128):
        for warps in (4, 8):
            cfg = pb.Config(params=[pb.Param(name="BLOCK", int_value=block)], num_warps=warps,
                            num_stages=3)
            candidates.append(pb.Timing(config=cfg, time_ms=fake_time_ms(block, warps)))
    best = min(candidates, key=lambda t: t.time_ms)
    return pb.Entry(key=key.to_proto(), result=pb.Result(
        config=best.config, time_ms=best.time_ms, candidates=candidates,
        tuned_at="2026-11-29T10:00:00Z", tuner_version="0.1.0", tuning_seconds=tuning_seconds,
        timing_method="fake"))
