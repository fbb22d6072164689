"""A library's own tuner, shaped like flash-linear-attention's `fla_cache_autotune`: it never
calls `triton.autotune`, it constructs a subclass of Triton's `Autotuner` whose `run()` first
consults the library's own config files (TP_CONFIG_DIR, like FLA_CACHE_MODE) and then calls
`super().run()`. `PrunedTuner` overrides a method on Triton's tuning path too."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl
from triton.runtime.autotuner import Autotuner

CONFIGS = [triton.Config({"BLOCK_SIZE": b}) for b in (16, 32, 64, 128)]


class CachedAutotuner(Autotuner):
    """Loads the best config from the library's directory before falling back to tuning."""

    def __init__(self, fn: Any, arg_names: list[str], configs: list[Any], key: list[str],
                 reset_to_zero: Any, restore_value: Any, **kwargs: Any) -> None:
        super().__init__(fn, arg_names, configs, key, reset_to_zero, restore_value, **kwargs)
        self.kernel_name = fn.fn.__name__ if hasattr(fn, "fn") else fn.__name__

    def run(self, *args: Any, **kwargs: Any) -> Any:
        directory = os.environ.get("TP_CONFIG_DIR")
        if directory and (Path(directory) / f"{self.kernel_name}.json").is_file():
            nargs = dict(zip(self.arg_names, args, strict=False))
            key = [nargs[k] for k in self.keys if k in nargs]
            key += [str(v.dtype) for v in nargs.values() if hasattr(v, "dtype")]
            saved = json.loads((Path(directory) / f"{self.kernel_name}.json").read_text())
            self.cache[tuple(key)] = triton.Config(saved["kwargs"], num_warps=4)
        return super().run(*args, **kwargs)


class PrunedTuner(Autotuner):
    """Overrides prune_configs, which a routed tuner would not run."""

    def prune_configs(self, kwargs: dict, nargs: Any = None) -> list[Any]:
        return self.configs[:2]


def lib_autotune(configs: list[Any], key: list[str], tuner: type = CachedAutotuner,
                 **kwargs: Any) -> Any:
    def decorator(fn: Any) -> Any:
        return tuner(fn, fn.arg_names, configs, key, None, None, **kwargs)

    return decorator


@lib_autotune(configs=CONFIGS, key=["n"])
@triton.jit
def own_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3, mask=mask)


@lib_autotune(configs=CONFIGS, key=["n"], tuner=PrunedTuner)
@triton.jit
def pruned_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) - 1, mask=mask)


def _grid(n: int) -> Any:
    return lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)


def own(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    own_kernel[_grid(x.numel())](x, out, x.numel())
    return out


def pruned(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    pruned_kernel[_grid(x.numel())](x, out, x.numel())
    return out


class BenchingTuner(Autotuner):
    """Overrides `_bench`: times each config itself through Triton's benchmarker (issue 49)."""

    def _bench(self, *args: Any, config: Any, **meta: Any) -> list[float]:
        current = dict(meta, **config.all_kwargs())

        def call() -> None:
            self.fn.run(*args, **current)

        return self.do_bench(call, quantiles=(0.5, 0.2, 0.8))


class PolicyTuner(Autotuner):
    """Like a library's tuner with its own `run()` and policy (issue 50's shape): it never
    calls `super().run()` nor `_bench`, and times each config through `self.do_bench`."""

    def run(self, *args: Any, **kwargs: Any) -> Any:
        nargs = dict(zip(self.arg_names, args, strict=False))
        key = tuple(nargs[k] for k in self.keys if k in nargs)
        if key not in self.cache:
            times = {}
            for config in self.configs:
                def call(config: Any = config) -> None:
                    self.fn.run(*args, **kwargs, **config.all_kwargs())
                times[config] = self.do_bench(call, quantiles=(0.5, 0.2, 0.8))[0]
            self.cache[key] = min(times, key=times.__getitem__)
        return self.fn.run(*args, **kwargs, **self.cache[key].all_kwargs())


@lib_autotune(configs=CONFIGS, key=["n"], tuner=BenchingTuner)
@triton.jit
def benching_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 5, mask=mask)


@lib_autotune(configs=CONFIGS, key=["n"], tuner=PolicyTuner)
@triton.jit
def policy_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 7, mask=mask)


class MemolessTuner(Autotuner):
    """A tuner the cache cannot seed: its `run()` benchmarks every launch through
    `self.do_bench` without asking its memo first."""

    def run(self, *args: Any, **kwargs: Any) -> Any:
        times = {}
        for config in self.configs:
            def call(config: Any = config) -> None:
                self.fn.run(*args, **kwargs, **config.all_kwargs())
            times[config] = self.do_bench(call, quantiles=(0.5, 0.2, 0.8))[0]
        best = min(times, key=times.__getitem__)
        return self.fn.run(*args, **kwargs, **best.all_kwargs())


def _timed(fn: Any, quantiles: Any = None, **_: Any) -> Any:
    fn()
    return [1.0, 1.0, 1.0] if quantiles else 1.0


@lib_autotune(configs=CONFIGS, key=["n"], tuner=MemolessTuner, do_bench=_timed)
@triton.jit
def memoless_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 9, mask=mask)


def launch(kernel: Any, x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    kernel[_grid(x.numel())](x, out, x.numel())
    return out
