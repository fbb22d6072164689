"""The library's own autotuner: Triton's, plus configs the library ships as JSON files."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import triton
from triton.runtime.autotuner import Autotuner


def wall_clock(fn: Any, quantiles: Any = None, **_: Any) -> Any:
    """The library's benchmark (Triton's default one needs a GPU)."""
    start = time.perf_counter()
    fn()
    ms = (time.perf_counter() - start) * 1e3
    return [ms, ms, ms] if quantiles else ms


class CachedAutotuner(Autotuner):
    """Looks up the library's shipped config for a launch key before falling back to tuning."""

    def __init__(self, fn: Any, arg_names: list[str], configs: list[Any], key: list[str],
                 reset_to_zero: Any, restore_value: Any, **kwargs: Any) -> None:
        super().__init__(fn, arg_names, configs, key, reset_to_zero, restore_value, **kwargs)
        self.kernel_name = fn.fn.__name__ if hasattr(fn, "fn") else fn.__name__

    def run(self, *args: Any, **kwargs: Any) -> Any:
        shipped = os.environ.get("TUNERLIB_CONFIG_DIR")
        path = Path(shipped or ".") / f"{self.kernel_name}.json"
        if shipped and path.is_file():
            nargs = dict(zip(self.arg_names, args, strict=False))
            key = [nargs[k] for k in self.keys if k in nargs]
            key += [str(v.dtype) for v in nargs.values() if hasattr(v, "dtype")]
            self.cache[tuple(key)] = triton.Config(json.loads(path.read_text()), num_warps=4)
        return super().run(*args, **kwargs)


def lib_autotune(configs: list[Any], key: list[str], **kwargs: Any) -> Any:
    def decorator(fn: Any) -> CachedAutotuner:
        return CachedAutotuner(fn, fn.arg_names, configs, key, None, None, do_bench=wall_clock,
                               **kwargs)

    return decorator
