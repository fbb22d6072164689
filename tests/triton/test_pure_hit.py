"""A process whose launches all hit the loaded results does nothing beyond the lookup.

Measured on a pure-hit run (a results file dumped first, then loaded under require-complete by
new tuners of the same kernel), counting everything the engine could do besides launching:
children forked or spawned, tuning objects built, key computations, threads started. On the
interpreter (and so wherever nothing is compiled ahead) that is no child, no tuning object, one
key per problem and no thread at all. Where the loaded winners are compiled ahead (a GPU; here
with a fake compile), the only threads are the one compile pool's.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections import Counter
from typing import Any

import pytest

from autotune_cache import get_cache
from autotune_cache.formats import load_results, serialize_results
from autotune_cache.triton import autotuner as autotuner_module
from autotune_cache.triton import engine, preload, preload_job
from tests.triton import kernels

TABLE = {16: 4.0, 32: 2.0, 64: 1.5, 128: 3.0}
PROBLEMS = (100, 300, 1000)


@pytest.fixture
def counted(monkeypatch) -> Counter[str]:
    """Counts of what the engine does: forks, spawned children, tuning objects, keys, threads
    (by name)."""
    counts: Counter[str] = Counter()

    def counting(name: str, original: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return original(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(os, "fork", counting("fork", os.fork))
    monkeypatch.setattr(subprocess.Popen, "__init__",
                        counting("spawn", subprocess.Popen.__init__))
    monkeypatch.setattr(engine, "KernelTuning", counting("tuning", engine.KernelTuning))
    monkeypatch.setattr(autotuner_module.Autotuner, "cache_key",
                        counting("key", autotuner_module.Autotuner.cache_key))
    start = threading.Thread.start

    def thread_start(self: threading.Thread) -> None:
        counts["thread " + self.name.split("_")[0].rstrip("-0123456789")] += 1
        start(self)

    monkeypatch.setattr(threading.Thread, "start", thread_start)
    return counts


def _dump(use_cache, fake, path, *, specialized: bool = False) -> None:
    """Dump the kernel's entries for PROBLEMS; `specialized`: each with the specialization data
    a GPU's dump records for its winner (the interpreter compiles nothing, so records none)."""
    use_cache(dump_to=path)
    fake(TABLE)
    kernel = kernels.tuned_add()
    for n in PROBLEMS:
        kernels.launch_add(kernel, n=n)
    assert get_cache().finish_dump() == len(PROBLEMS)
    if specialized:
        entries = load_results(path)
        for i, entry in enumerate(entries):
            entry.result.triton_specialization = json.dumps({"key": f"winner {i}"})
        path.write_bytes(serialize_results(entries, text=True))


def _launch_all(kernel) -> None:
    for _ in range(3):
        for n in PROBLEMS:
            out, expected = kernels.launch_add(kernel, n=n)
            assert out.tolist() == expected.tolist()


def test_a_pure_hit_run_builds_nothing_and_starts_nothing(use_cache, fake, tmp_path, counted):
    results = tmp_path / "hits.textproto"
    _dump(use_cache, fake, results)
    bench = fake(TABLE)
    use_cache(load_from=(results,), require_complete=True)
    kernel = kernels.tuned_add()  # a new tuner: Triton's memo is empty
    counted.clear()
    _launch_all(kernel)
    assert bench.calls == []
    assert dict(counted) == {"key": len(PROBLEMS)}  # no fork, spawn, tuning object or thread
    stats = get_cache().stats
    assert stats.benchmarks == 0 and stats.misses == 0


def test_compiling_the_winners_ahead_uses_only_the_compile_pool(use_cache, fake, tmp_path,
                                                                counted, monkeypatch):
    """As on a GPU: the first launch queues the loaded winners' compiles on the pool (the
    compile itself is faked: the interpreter compiles nothing)."""
    results = tmp_path / "hits.textproto"
    _dump(use_cache, fake, results, specialized=True)
    compiled: list[str] = []

    def fake_compile(jit_fn: Any, specialization: str, compile_cache_only: bool = False) -> bool:
        compiled.append(specialization)
        return True

    monkeypatch.setattr(engine, "interpreter_active", lambda: False)
    monkeypatch.setattr(preload_job, "preload_into", fake_compile)
    # The interpreter's JIT function cannot preload; a GPU's can.
    monkeypatch.setattr(preload, "jit_function", lambda fn: kernels.add_kernel)
    use_cache(load_from=(results,), require_complete=True, compile_workers=2)
    kernel = kernels.tuned_add()
    counted.clear()
    _launch_all(kernel)
    preload_threads = {k: v for k, v in counted.items() if k.startswith("thread")}
    assert set(preload_threads) <= {"thread autotune-compile"}
    assert counted["fork"] == counted["spawn"] == counted["tuning"] == 0
    assert counted["key"] == len(PROBLEMS)
    assert get_cache().stats.benchmarks == 0
    assert sorted(compiled) == sorted(json.dumps({"key": f"winner {i}"})
                                      for i in range(len(PROBLEMS)))
