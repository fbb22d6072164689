"""bucketlib's tuner, shaped like an operator library's own: a subclass of Triton's Autotuner
whose `run()` replaces Triton's and never calls it. It keys launches by its own strategies (a
size rounded up to a power of two, or to a multiple of 32, plus the dtypes), picks by its own
policy over `self._bench`, keeps its picks in a persistent database (sqlite, at BUCKETLIB_DB)
behind `self.cache`, and its timings in `self.configs_timings`. BUCKETLIB_EXTRA_CONFIG=N adds a
candidate BLOCK_SIZE=N (a library upgrade that changes the candidate list)."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import triton
from triton.runtime.autotuner import Autotuner

STRATEGIES: dict[str, Callable[[int], int]] = {
    "log2": lambda v: 2 ** math.ceil(math.log2(max(int(v), 1))),
    "align32": lambda v: -(-int(v) // 32) * 32,
}


def wall_clock(fn: Any, quantiles: Any = None, **_: Any) -> Any:
    """The library's benchmark (Triton's default one needs a GPU)."""
    start = time.perf_counter()
    fn()
    ms = (time.perf_counter() - start) * 1e3
    return [ms, ms, ms] if quantiles else ms


def database() -> Path:
    return Path(os.environ.get("BUCKETLIB_DB") or Path(tempfile.gettempdir()) / "bucketlib.db")


class ConfigDB:
    """The library's picks, by kernel and key, in sqlite: what `self.cache` is here."""

    def __init__(self, path: Path, table: str) -> None:
        self.path, self.table = path, table
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE IF NOT EXISTS picks (kernel TEXT, key TEXT, config TEXT, "
                       "PRIMARY KEY (kernel, key))")

    def get(self, key: tuple, default: Any = None) -> Any:
        with sqlite3.connect(self.path) as db:
            row = db.execute("SELECT config FROM picks WHERE kernel = ? AND key = ?",
                             (self.table, json.dumps(key))).fetchone()
        if row is None:
            return default
        saved = json.loads(row[0])
        return triton.Config(saved["kwargs"], num_warps=saved["num_warps"])

    def __contains__(self, key: tuple) -> bool:
        return self.get(key) is not None

    def __getitem__(self, key: tuple) -> Any:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __setitem__(self, key: tuple, config: Any) -> None:
        saved = json.dumps({"kwargs": config.kwargs, "num_warps": config.num_warps})
        with sqlite3.connect(self.path) as db:
            db.execute("INSERT OR REPLACE INTO picks VALUES (?, ?, ?)",
                       (self.table, json.dumps(key), saved))


def fastest(bench: Callable[[Any], list[float]], configs: Iterable[Any]) -> tuple[Any, dict]:
    """The default policy: every config timed, the fastest median kept."""
    timings = {config: bench(config) for config in configs}
    return min(timings, key=lambda c: timings[c][0]), timings


class BucketTuner(Autotuner):
    """See the module docstring."""

    def __init__(self, fn: Any, configs: list[Any], key: list[str], strategy: list[str],
                 policy: Callable[..., tuple[Any, dict]] = fastest) -> None:
        super().__init__(fn, fn.arg_names, configs, key, None, None, do_bench=wall_clock)
        self.strategy = [STRATEGIES[s] for s in strategy]
        self.policy = policy
        self.cache = ConfigDB(database(), fn.__name__)

    def get_key(self, nargs: dict[str, Any]) -> tuple:
        key = tuple(rule(nargs[name]) for rule, name in zip(self.strategy, self.keys,
                                                             strict=True))
        return key + tuple(str(v.dtype) for v in nargs.values() if hasattr(v, "dtype"))

    def run(self, *args: Any, **kwargs: Any) -> Any:
        self.nargs = dict(zip(self.arg_names, args, strict=False))
        key = self.get_key(self.nargs)
        if key not in self.cache:
            def bench(config: Any) -> list[float]:
                return self._bench(*args, config=config, **kwargs)

            best, timings = self.policy(bench, self.prune_configs(kwargs))
            self.cache[key] = best
            self.configs_timings = timings
        config = self.cache[key]
        self.best_config = config
        self.nargs = None
        return self.fn.run(*args, **kwargs, **config.all_kwargs())


def configs() -> list[Any]:
    blocks = [16, 32, 64, 128]
    if os.environ.get("BUCKETLIB_EXTRA_CONFIG"):
        blocks.append(int(os.environ["BUCKETLIB_EXTRA_CONFIG"]))
    return [triton.Config({"BLOCK_SIZE": b}, num_warps=4) for b in blocks]


def bucket_tune(key: list[str], strategy: list[str]) -> Callable[[Any], BucketTuner]:
    def decorator(fn: Any) -> BucketTuner:
        return BucketTuner(fn, configs(), key, strategy)

    return decorator
