"""Compile candidate configs in parallel before any of them is benchmarked.

`triton.autotune` compiles each candidate lazily, on its first benchmark launch, one after the
other (about 0.5 s each for the brief's matmul). We compile them all up front on a thread pool
through Triton's own `AsyncCompileMode` (triton-lang/triton#7306; present in 3.6):
`JITFunction.run(..., warmup=True)` specialises the kernel for the real arguments and the
config's constexprs / num_warps / num_stages, hands the compile to the pool and returns a
future; nothing is launched. Triton's
MLIR passes, LLVM and ptxas release the GIL, so threads scale with cores (measured: 2 threads
compile 8 sm_90 matmul variants in half the time of one). Compiled kernels land in the
JITFunction's in-memory cache and in TRITON_CACHE_DIR, so the benchmark launches that follow
start immediately.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

# Longest failure reason we record, so one ptxas dump cannot bloat a results file.
MAX_REASON_CHARS = 500

_PATH_RE = re.compile(r"(?:/[\w.@+-]+)+/([\w.@+-]+)")


def failure_reason(error: BaseException) -> str:
    """A one-line, machine-independent reason for a failed config: the exception type and its
    message with whitespace collapsed and absolute paths reduced to file names.

    Triton's compile errors put the location on the first line, then a source excerpt, then the
    error itself on the last line; for those we keep the first and last lines. Over-long reasons
    keep their end, where the error is."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if len(lines) > 2 and lines[0].startswith("at ") and lines[0].endswith(":"):
        lines = [lines[0], lines[-1]]
    text = _PATH_RE.sub(r"\1", " ".join(" ".join(lines).split()))
    head = f"{type(error).__name__}: "
    if not text:
        return type(error).__name__
    if len(head) + len(text) > MAX_REASON_CHARS:
        text = "..." + text[len(head) + len(text) + 3 - MAX_REASON_CHARS:]
    return head + text


def _launch_kwargs(kwargs: Mapping[str, Any], config: Any) -> dict[str, Any]:
    call = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}
    call.update(config.all_kwargs())
    return call


def precompile(kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any],
               configs: Sequence[Any], workers: int) -> dict[int, str]:
    """Compile every config in `configs` for these arguments without launching anything.

    `kernel` is what the autotuner wraps (a JITFunction, possibly under @triton.heuristics).
    Returns {index in configs: failure reason} for configs that failed to compile; the others are
    ready to launch. A no-op under the interpreter, where nothing is compiled.
    """
    from autotune_cache.triton.device import interpreter_active

    if interpreter_active() or not configs:
        return {}
    import triton

    failures: dict[int, str] = {}
    async_mode = getattr(triton, "AsyncCompileMode", None)
    workers = max(1, min(workers, len(configs)))
    if async_mode is None or workers == 1:
        for i, config in enumerate(configs):
            try:
                kernel.run(*args, grid=None, warmup=True, **_launch_kwargs(kwargs, config))
            except Exception as e:  # any compile error disqualifies only this config
                failures[i] = failure_reason(e)
        return failures

    futures: dict[int, Any] = {}
    with ThreadPoolExecutor(workers, thread_name_prefix="autotune-compile") as pool, \
            async_mode(pool, ignore_errors=True):
        for i, config in enumerate(configs):
            try:
                futures[i] = kernel.run(*args, grid=None, warmup=True,
                                        **_launch_kwargs(kwargs, config))
            except Exception as e:
                failures[i] = failure_reason(e)
        for i, future in futures.items():
            if hasattr(future, "result"):
                try:
                    future.result()
                except Exception as e:
                    failures[i] = failure_reason(e)
    return failures
