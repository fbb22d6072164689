"""Subprocess body for test_offload.py: Triton's real compiler for sm_90 on a machine with no GPU
(compile_worker.py's stand-in driver), each compile's back end split off into a compile process
(autotune_cache/triton/offload.py) or not.

    python -m tests.triton.offload_probe identical DIR_SPLIT DIR_TRITON
    python -m tests.triton.offload_probe candidates on|off [queued]

Prints one JSON line.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime.driver import driver  # noqa: E402

from autotune_cache.triton import offload  # noqa: E402
from autotune_cache.triton.compile import compile_candidates  # noqa: E402
from tests.triton import kernels  # noqa: E402
from tests.triton.compile_worker import CompileOnlyDriver  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    pid_m, pid_n = pid // tl.cdiv(N, BN), pid % tl.cdiv(N, BN)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None] * stride_am + rk[None, :]
    b = b_ptr + rk[:, None] * stride_bk + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BK)):
        acc += tl.dot(tl.load(a), tl.load(b))
        a += BK
        b += BK * stride_bk
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc.to(tl.float16))


def _records() -> list[tuple[object, str]]:
    """Recorded specializations (Triton's preload JSON) of both kernels, from warm-ups whose
    compile Triton's hook skips."""
    found: list[tuple[object, str]] = []

    def hook(**kw: object) -> bool:
        found.append((kw["fn"].jit_function, kw["compile"]["specialization_data"]))  # type: ignore[attr-defined,index]
        return True

    triton.knobs.runtime.jit_cache_hook = hook
    try:
        x = torch.empty(1024)
        kernels.add_kernel.warmup(x, x, x, 1024, BLOCK_SIZE=128, grid=(1,))
        a = torch.empty(256, 256, dtype=torch.float16)
        for bm, warps, stages in ((64, 4, 3), (128, 8, 4)):
            matmul_kernel.warmup(a, a, a, 256, 256, 256, 256, 256, 256, BM=bm, BN=64, BK=32,
                                 num_warps=warps, num_stages=stages, grid=(1,))
    finally:
        triton.knobs.runtime.jit_cache_hook = None
    return found


def _files(root: Path) -> dict[str, bytes]:
    """Every file of a compile cache, by its path inside it (the groups' index files aside)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.startswith("__grp__")}


def identical(split_dir: Path, triton_dir: Path) -> dict[str, object]:
    # Set after Triton was imported: the options' default for it was read then, in this process
    # and not in a compile process started now, which must compile with this process's options.
    os.environ["PTXAS_OPTIONS"] = "-O0"  # changes every cubin
    filled, hits = [], []
    for jit_fn, spec in _records():
        src, options = offload.source_of(jit_fn, spec, TARGET)
        os.environ["TRITON_CACHE_DIR"] = str(split_dir)
        filled.append(offload.fill(src, TARGET, options))
        seen: list[bool] = []
        triton.knobs.compilation.listener = lambda seen=seen, **kw: seen.append(kw["cache_hit"])
        triton.compile(src, target=TARGET, options=options)
        triton.knobs.compilation.listener = None
        hits.append(seen == [True])
        os.environ["TRITON_CACHE_DIR"] = str(triton_dir)
        triton.compile(src, target=TARGET, options=options)  # Triton alone, on this thread
    split, alone = _files(split_dir), _files(triton_dir)
    return {"filled": filled, "hits": hits, "stats": vars(offload.stats()),
            "same_names": sorted(split) == sorted(alone),
            "different": sorted(n for n in split if alone.get(n) != split[n]),
            "exts": sorted({n.rsplit(".", 1)[-1] for n in split})}


def candidates(on: bool, queued: bool = False) -> dict[str, object]:
    """A tuning's candidates compiled at once (compile_candidates) or `queued` for a dump run's
    end (queue_candidates, then waited for as deferred.py does)."""
    from autotune_cache.cache import configure
    from autotune_cache.config.flags import Settings
    from autotune_cache.triton.compile import queue_candidates

    configure(Settings(compile_in_processes=on, compile_workers=2))
    x = torch.empty(256)
    args, kwargs = (x, x, x, 256), {"grid": None, "warmup": False}
    configs = kernels.configs(16, 24, 32, 64)
    if queued:
        compiles = queue_candidates(kernels.add_kernel, args, kwargs, configs,
                                    workers=2).wait(range(len(configs)))
    else:
        compiles = compile_candidates(kernels.add_kernel, args, kwargs, configs, workers=2)
    cubins = sorted(f"{p.parent.name} {hashlib.sha256(p.read_bytes()).hexdigest()}"
                    for p in Path(os.environ["TRITON_CACHE_DIR"]).rglob("*.cubin"))
    return {"failures": sorted(compiles.failures), "specs": sorted(compiles.specs),
            "stats": vars(offload.stats()), "cubins": cubins}


def main() -> None:
    driver.set_active(CompileOnlyDriver())
    if sys.argv[1] == "identical":
        out = identical(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        out = candidates(sys.argv[2] == "on", queued=sys.argv[3:] == ["queued"])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
