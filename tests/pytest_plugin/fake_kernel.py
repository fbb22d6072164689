"""A stand-in for an autotuned kernel, copied into pytester's directory as `fake_kernel.py`.

`launch()` does what autotune_cache.triton.Autotuner does on a launch, through the library's
public API only: look the key up in the process-wide cache and, on a miss, "tune" with a
deterministic fake benchmark and record the entry. Entries are byte-identical whoever tunes them,
unless FAKE_KERNEL_NOISE is set (then the tuning time names the xdist worker, as real timing noise
would make two workers' results differ). FAKE_KERNEL_SOURCE stands for an edit of the kernel's
source: it becomes the keys' source fingerprint; FAKE_KERNEL_CONFIGS stands for an edit of the
candidate list.
"""

from __future__ import annotations

import os

from autotune_cache import CacheKey, Device, entry_pb2, get_cache

H200 = Device(name="NVIDIA H200", arch="sm_90", sm_count=132)
A100 = Device(name="NVIDIA A100", arch="sm_80", sm_count=108)


def key(kernel: str, n: int, device: Device = H200) -> CacheKey:
    source = os.environ.get("FAKE_KERNEL_SOURCE", "src")
    configs = os.environ.get("FAKE_KERNEL_CONFIGS", "cfg")
    return CacheKey(kernel=kernel, source_fingerprint=source, configs_fingerprint=configs,
                    problem={"N": n, "x": "float16"}, device=device,
                    toolchain={"triton": "3.6.0"})


def tune(k: CacheKey) -> entry_pb2.Entry:
    candidates = [
        entry_pb2.Timing(config=entry_pb2.Config(
            params=[entry_pb2.Param(name="BLOCK", int_value=block)], num_warps=4),
            time_ms=abs(block - 64) / 16 + 1.0)
        for block in (32, 64, 128)
    ]
    noise = os.environ.get("PYTEST_XDIST_WORKER", "") if os.environ.get("FAKE_KERNEL_NOISE") else ""
    seconds = 2.0 + (int(noise[2:]) + 1 if noise.startswith("gw") else 0)
    return entry_pb2.Entry(key=k.to_proto(), result=entry_pb2.Result(
        config=candidates[1].config, time_ms=candidates[1].time_ms, candidates=candidates,
        tuned_at="2026-11-30T12:00:00Z", tuner_version="0.1.0", tuning_seconds=seconds,
        timing_method="fake"))


def launch(kernel: str, n: int, device: Device = H200) -> int:
    """'Run' the kernel: the winning BLOCK size, from the cache or a fresh tuning."""
    cache = get_cache()
    k = key(kernel, n, device)
    entry = cache.lookup(k)
    if entry is None:
        with cache.tune_lock(k) as shared:
            entry = cache.refresh(k) if shared else None
            if entry is None:
                entry = tune(k)
                cache.record(entry, benchmarks=len(entry.result.candidates))
    return entry.result.config.params[0].int_value
