"""Subprocess body: compile add_kernel candidates in parallel for sm_90 on a machine with no GPU.

Triton's JIT path needs an active driver only to name the target, device and stream; a stand-in
driver that names an H100-class target lets the real compiler (MLIR, LLVM, ptxas) run on a CPU.
Prints one JSON line: the failures by block size, how many kernels the JIT cache holds, the
TRITON_CACHE_DIR in effect and the compiled artefacts found there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"

import torch  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime.driver import driver  # noqa: E402

import autotune_cache.triton  # noqa: E402, F401  (compiling applies the sandbox default)
from autotune_cache.triton.compile import compile_candidates  # noqa: E402
from tests.triton import kernels  # noqa: E402


class CompileOnlyDriver:
    """Enough of a Triton driver for compiling (never launching) on a CPU-only machine."""

    def get_current_target(self) -> GPUTarget:
        return GPUTarget("cuda", 90, 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def launcher_cls(self, src: object, metadata: object) -> None:
        """Stands in for building a launcher (a C module): records which kernel, on which
        thread; nothing is ever launched here."""
        import threading

        LAUNCHERS.append((getattr(getattr(src, "fn", None), "__name__", "?"),
                          threading.current_thread().name))


LAUNCHERS: list[tuple[str, str]] = []


def main() -> None:
    driver.set_active(CompileOnlyDriver())
    blocks = (16, 24, 32, 64)
    x = torch.empty(256)
    failures = compile_candidates(kernels.add_kernel, (x, x, x, 256),
                                  {"grid": None, "warmup": False}, kernels.configs(*blocks),
                                  workers=2).failures
    warmed = kernels.tuned_add(blocks=(128, 256)).warmup(torch.float32, torch.float32,
                                                         torch.float32, 256, grid=(1,))
    cache_dir = Path(os.environ["TRITON_CACHE_DIR"])
    print(json.dumps({
        "failures": {str(blocks[i]): reason for i, reason in failures.items()},
        "jit_cache_size": len(kernels.add_kernel.device_caches[0][0]),
        "warmed": [type(k).__name__ for k in warmed],
        "triton_cache_dir": str(cache_dir),
        "cubins": sorted(p.name for p in cache_dir.rglob("*.cubin")),
    }))


if __name__ == "__main__":
    main()
