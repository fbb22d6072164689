"""Subprocess body: plain @triton.jit warm-ups with Triton's real compiler, for sm_90, no GPU.

`dump PATH`: a process dumping to PATH warms up (compiles, never launches: a compile-only
driver) two specializations of a plain kernel, one of a kernel our tuner drives and the
candidates of one of Triton's own autotuners; prints the dump's entries.
`load PATH`: a fresh process (its own empty compile cache) loads PATH; its first compile (of
another kernel) queues the recorded specializations on the compile-ahead pool; once those
finished, the plain kernel's own compiles find them. `load-held PATH`: the same while no pool
thread may start (a tuning benchmarks), so each of those compiles runs its queued warm-up itself,
once. `regen PATH`: `load` in a process that also dumps (to PATH.regen.textproto: a regeneration
in place), which compiles the warm-ups ahead into the compile cache only, so its launches still
compile them (compile-cache hits) and its dump records them. Prints which thread ran ptxas for
which kernel.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import sys
import tempfile
import threading
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.nvidia import compiler as nvidia  # noqa: E402
from triton.runtime.driver import driver  # noqa: E402

from autotune_cache import Device, Settings, configure, get_cache  # noqa: E402
from autotune_cache.formats import load_results  # noqa: E402
from autotune_cache.foundation.key import CacheKey, is_warmup  # noqa: E402
from autotune_cache.triton import (  # noqa: E402
    autotune,
    offload,
    preload,
    scheduler,
    warmups,
)
from tests.triton import kernels  # noqa: E402
from tests.triton.compile_worker import CompileOnlyDriver  # noqa: E402

FAKE_GPU = Device(name="Fake H100", arch="sm_90", sm_count=132)


def do_bench(kernel_call, quantiles):  # times without launching: there is no GPU
    return [1.0] * len(quantiles)


class PtxasRuns:
    """(kernel, where) of every real compile's ptxas step from now on (a compile-cache hit runs
    none): a thread's name ("pool" for the compile scheduler's), or "child" for any other
    process (there must be none: the engine forks nothing)."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp()) / "ptxas.jsonl"
        main_pid, original, path = os.getpid(), nvidia.CUDABackend.make_cubin, self.path

        def make_cubin(self, src, metadata, opt, capability):
            thread = threading.current_thread().name
            where = ("child" if os.getpid() != main_pid else
                     "pool" if thread.startswith("autotune-compile") else thread)
            with path.open("a") as f:
                f.write(json.dumps([metadata["name"], where]) + "\n")
            return original(self, src, metadata, opt, capability)

        nvidia.CUDABackend.make_cubin = make_cubin

    def sorted(self) -> list[list[str]]:
        """The runs of the test's kernels."""
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        return sorted(map(json.loads, lines))


def main() -> None:
    phase, path = sys.argv[1], sys.argv[2]
    driver.set_active(CompileOnlyDriver())
    warmups.current_device = lambda: FAKE_GPU
    x = torch.empty(256)
    if phase == "dump":
        configure(Settings(dump_to=path))
        for block in (64, 128):
            kernels.add_kernel.warmup(x, x, x, 256, BLOCK_SIZE=block, grid=(1,))
        autotune(configs=kernels.configs(32), key=["n"], do_bench=do_bench)(
            kernels.accumulate_kernel)
        kernels.accumulate_kernel.warmup(x, x, 256, BLOCK_SIZE=32, grid=(1,))
        triton.autotune(configs=kernels.configs(16, 32), key=["n"], do_bench=do_bench)(
            kernels.double_in_place_kernel).warmup(x, 256, grid=(1,))
        written = get_cache().finish_dump()
        keys = [CacheKey.from_proto(e.key) for e in load_results(path)]
        print(json.dumps({
            "written": written,
            "warmups": sorted(k.kernel for k in keys if is_warmup(k)),
            "with_specs": all(e.result.triton_specialization for e in load_results(path)),
            "recorded": get_cache().stats.warmups_recorded,
        }))
        return
    if os.environ.get("WARMUP_TEST_SOURCE"):  # the kernel was edited since the dump
        warmups.source_fingerprint = lambda fn: os.environ["WARMUP_TEST_SOURCE"]
    regen = f"{path}.regen.textproto" if phase == "regen" else None
    # Where the pool's compiles run their back end (offload.py): a compile process's ptxas is
    # not seen by PtxasRuns, which records this process's; "0" keeps it on the pool's threads.
    configure(Settings(load_from=(path,), dump_to=regen, compile_workers=2,
                       compile_in_processes=os.environ.get("WARMUP_TEST_PROCESSES") == "1"))
    runs = PtxasRuns()
    waited = phase in ("load-waited", "regen")
    with contextlib.ExitStack() as stack:
        holding = stack.enter_context(contextlib.ExitStack())
        if phase == "load-held" or waited:  # no pool thread starts: each launch runs its own
            holding.enter_context(scheduler.scheduler().held())
        kernels.double_in_place_kernel.warmup(x, 256, BLOCK_SIZE=16, grid=(1,))  # first compile
        ahead = preload.ahead()
        queued = list(ahead.compiles.values()) if ahead else []
        if phase == "load":  # the workers' compiles, while this thread does not wait for them
            concurrent.futures.wait(queued, timeout=300)
        if waited:  # the workers' compiles, started while this thread waits for them (as a
            # launch or a dump run's end does, through CompileJob.result)
            holding.close()
            concurrent.futures.wait(queued, timeout=300)
        compiled = [kernels.add_kernel.warmup(x, x, x, 256, BLOCK_SIZE=block, grid=(1,))
                    is not None for block in (64, 128)]
    stats = get_cache().stats
    if regen is not None:
        written = get_cache().finish_dump()
        print(json.dumps({
            "ptxas": runs.sorted(), "written": written,
            "warmups": sorted(CacheKey.from_proto(e.key).kernel for e in load_results(regen)
                              if is_warmup(CacheKey.from_proto(e.key))),
            "fingerprints": sorted({e.key.source_fingerprint for e in load_results(regen)
                                    if e.key.kernel.endswith("add_kernel")}),
            "queued_ok": [p.result() if p.done() else None for p in queued],
            "warmups_ahead": stats.warmups_ahead, "recorded": stats.warmups_recorded,
        }))
        return
    print(json.dumps({
        "queued_ok": [p.result() if p.done() else None for p in queued],
        "launch_compiles": compiled,
        "ptxas": runs.sorted(),
        "warmups_ahead": stats.warmups_ahead,
        "split": offload.stats().split,
        "summary_mentions": "queued 2 plain @triton.jit" in stats.summary_line(),
    }))


if __name__ == "__main__":
    main()
