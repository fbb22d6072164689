"""How fast the workload's candidates compile on N threads of one process against N processes.

    python3 bench/compile_parallelism.py OUT_DIR [--workers 4,8,16] [--smoke]

Every compile ahead of a launch (a tuning's candidates, a dump run's deferred tunings, a loaded
file's warm-ups) runs on the compile scheduler's threads (autotune_cache/triton/scheduler.py) in
the process that launches. Part of Triton's compile is Python (the front end walks the kernel's
AST) and holds the GIL, so N threads may compile less than N times as fast as one. This measures
by how much: `triton.compile` of the gpu_perf workload's 48 matmul candidates
(bench/triton_matmul_workload.py, its first shape's specialisation) once on one thread, then on
N threads, then on N spawned processes, each mode into a fresh TRITON_CACHE_DIR. For processes
it also times the pool's start (interpreter, torch and Triton imported in every worker, and one
compile into a throwaway dir: Triton's one-time costs, which the parent has paid before it is
timed too) and what the parent then pays to take the 48 kernels from the cache dir they filled.

Then the product's own path, per N: the compile scheduler's N threads compiling the candidates
for a launch's arguments (`compile_candidates`), without and with the compile helper (processes
forked from a copy of this one compile first, decision 0029), each into a fresh cache dir.

Compiles for the current GPU, or without one for sm_90 (Triton's bundled ptxas), so it also runs
on a host with no GPU. Writes OUT_DIR/compile_parallelism.json and .md. `--smoke`: two
candidates, one and two workers (CI checks that the script runs, never its numbers).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Compiles only, never launches: always for a GPU, also under CI's TRITON_INTERPRET=1.
os.environ["TRITON_INTERPRET"] = "0"
if "--smoke" in sys.argv:
    os.environ["AUTOTUNE_BENCH_SMOKE"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parent))

import triton  # noqa: E402
import triton_matmul_workload as w  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

# The first shape's specialisation, as a launch with contiguous fp16 operands has it: the unit
# strides are constexprs, every other integer and pointer divisible by 16.
_UNIT = ("sak", "sbn", "scn")
_POINTERS = ("a", "b", "c")
_META = ("BM", "BN", "BK")
# Without a GPU: the H200's target.
_DEFAULT_TARGET = ("cuda", 90, 32)


def _gpu_target() -> GPUTarget | None:
    """The current GPU's target; None with no GPU driver here (then compile for the H200)."""
    try:
        return triton.runtime.driver.active.get_current_target()
    except Exception:  # noqa: BLE001 - no GPU driver here
        return None


def _source(config: Any) -> ASTSource:
    names = w.mm.arg_names
    signature = {n: ("*fp16" if n in _POINTERS else "constexpr" if n in _UNIT + _META else "i32")
                 for n in names}
    constexprs = {(names.index(n),): 1 for n in _UNIT}
    constexprs.update({(names.index(n),): config.kwargs[n] for n in _META})
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
             if signature[n] != "constexpr"}
    return ASTSource(w.mm, signature, constexprs, attrs)


def compile_one(index: int, target: tuple[str, int, int]) -> float:
    """Compile candidate `index` for `target`; its seconds (on whichever thread or process)."""
    config = w.CONFIGS[index]
    started = time.perf_counter()
    triton.compile(_source(config), target=GPUTarget(*target),
                   options={"num_warps": config.num_warps, "num_stages": config.num_stages})
    return time.perf_counter() - started


def _prime(target: tuple[str, int, int]) -> None:
    """Pay a process's one-time compile costs (Triton's own source hash, the backend's set-up)
    with one compile into a throwaway cache dir, so that no mode's first compile carries them."""
    measured = os.environ["TRITON_CACHE_DIR"]
    with tempfile.TemporaryDirectory(prefix="compile-prime-") as throwaway:
        os.environ["TRITON_CACHE_DIR"] = throwaway
        try:
            compile_one(0, target)
        finally:
            os.environ["TRITON_CACHE_DIR"] = measured


# The pool's start barrier (set in each worker by _join): no worker takes a second start task,
# so every one of them starts, and `--workers N` compiles on N processes. A pool of spawned
# processes starts them on demand: without it a worker that started early took two start
# tasks and the H200's run 1 compiled on 14 of 16.
_barrier: Any = None


def _join(barrier: Any) -> None:
    global _barrier
    _barrier = barrier


def _ready(target: tuple[str, int, int]) -> int:
    """A worker's start: primed, then waiting until every worker is."""
    _prime(target)
    _barrier.wait()
    return os.getpid()


def _fresh_cache(root: Path, name: str) -> None:
    path = root / name
    path.mkdir(parents=True)
    os.environ["TRITON_CACHE_DIR"] = str(path)  # read at each compile; inherited by spawned workers


def run_threads(workers: int, target: tuple[str, int, int]) -> dict[str, Any]:
    started = time.perf_counter()
    if workers == 1:
        each = [compile_one(i, target) for i in range(len(w.CONFIGS))]
    else:
        with cf.ThreadPoolExecutor(workers) as pool:
            each = list(pool.map(compile_one, range(len(w.CONFIGS)), [target] * len(w.CONFIGS)))
    return {"compile_s": time.perf_counter() - started, "each_s": sum(each)}


def run_processes(workers: int, target: tuple[str, int, int]) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    started = time.perf_counter()
    with cf.ProcessPoolExecutor(workers, mp_context=context, initializer=_join,
                                initargs=(context.Barrier(workers, timeout=600),)) as pool:
        pids = set(pool.map(_ready, [target] * workers))
        ready = time.perf_counter()
        each = list(pool.map(compile_one, range(len(w.CONFIGS)), [target] * len(w.CONFIGS)))
        compiled = time.perf_counter()
    load_started = time.perf_counter()
    for i in range(len(w.CONFIGS)):  # the parent takes them from the cache dir the pool filled
        compile_one(i, target)
    return {"start_s": ready - started, "processes": len(pids),
            "compile_s": compiled - ready, "each_s": sum(each),
            "parent_load_s": time.perf_counter() - load_started}


class _CompileOnlyDriver:
    """Enough of a Triton driver to specialise and compile (never launch) without a GPU: the
    product's pool modes go through `JITFunction.run(warmup=True)`, which asks it for the
    target, device and stream."""

    def __init__(self, target: GPUTarget) -> None:
        self.target = target

    def get_current_target(self) -> GPUTarget:
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def launcher_cls(self, src: Any, metadata: Any) -> None:
        return None


def run_pool(workers: int, helper: bool) -> dict[str, Any]:
    """The product's own path: the compile scheduler's threads compiling the candidates for a
    launch's arguments (`compile_candidates`), with the compile helper (forked processes first,
    decision 0029) or without. The kernel's in-memory cache is emptied first, so every candidate
    compiles; the helper's server, forked at the first mode that uses it, is kept (as in a user's
    process)."""
    import torch

    from autotune_cache import Settings, configure
    from autotune_cache.triton import compile_helper
    from autotune_cache.triton.compile import compile_candidates

    configure(Settings(compile_workers=workers, compile_helper=helper))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    m, n, k = w.SHAPES[0]
    a = torch.empty((m, k), dtype=torch.float16, device=device)
    b = torch.empty((k, n), dtype=torch.float16, device=device)
    c = torch.empty((m, n), dtype=torch.float16, device=device)
    args = (a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
            c.stride(1))
    w.mm.device_caches.clear()
    before = compile_helper.helper().prefilled
    started = time.perf_counter()
    compiles = compile_candidates(w.mm, args, {"grid": None, "warmup": True}, w.CONFIGS, workers)
    wall = time.perf_counter() - started
    assert not compiles.failures, compiles.failures
    return {"compile_s": wall, "each_s": sum(compiles.seconds.values()),
            "helper_compiles": compile_helper.helper().prefilled - before}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--workers", default="4,8,16")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    counts = [2] if args.smoke else [int(n) for n in args.workers.split(",")]
    gpu = _gpu_target()
    target = gpu or GPUTarget(*_DEFAULT_TARGET)
    target_t = (target.backend, target.arch, target.warp_size)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="compile-parallelism-") as tmp:
        root = Path(tmp)
        _fresh_cache(root, "serial")
        _prime(target_t)
        rows.append({"mode": "threads", "workers": 1, **run_threads(1, target_t)})
        for n in counts:
            _fresh_cache(root, f"threads{n}")
            rows.append({"mode": "threads", "workers": n, **run_threads(n, target_t)})
            _fresh_cache(root, f"processes{n}")
            rows.append({"mode": "processes", "workers": n, **run_processes(n, target_t)})
        if gpu is None:
            triton.runtime.driver.set_active(_CompileOnlyDriver(target))
        for n in counts:
            for helper in (False, True):
                _fresh_cache(root, f"pool{n}{'helper' if helper else ''}")
                rows.append({"mode": "pool, helper" if helper else "pool", "workers": n,
                             **run_pool(n, helper)})
    serial = rows[0]["compile_s"]
    for row in rows:
        row.update({k: round(v, 3) for k, v in row.items() if isinstance(v, float)})
        row["speedup"] = round(serial / row["compile_s"], 2) if row["compile_s"] else None
    result = {"candidates": len(w.CONFIGS), "target": list(target_t), "cpus": os.cpu_count(),
              "triton": triton.__version__, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compile_parallelism.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"{len(w.CONFIGS)} candidates of the gpu_perf workload's matmul, target "
             f"{target_t}, {os.cpu_count()} CPUs, Triton {triton.__version__}.", "",
             "| mode | workers | pool start s | compile wall s | x of one thread | "
             "compile seconds summed | parent's load from the cache s | compiled by the helper |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        lines.append(f"| {row['mode']} | {row['workers']} | {row.get('start_s', '')} | "
                     f"{row['compile_s']} | {row['speedup']} | {row['each_s']} | "
                     f"{row.get('parent_load_s', '')} | {row.get('helper_compiles', '')} |")
    (args.out / "compile_parallelism.md").write_text("\n".join(lines) + "\n")
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
