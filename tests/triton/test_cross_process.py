"""Processes sharing a cache directory that miss the same key tune it exactly once, and a process
that waited on a peer's tuning lock launches the peer's result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from autotune_cache import CacheKey
from tests.triton import kernels
from tests.triton.kernels import TABLE

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 3


@pytest.mark.slow
def test_concurrent_processes_tune_one_key_once(tmp_path: Path) -> None:
    log = tmp_path / "bench.log"
    env = dict(os.environ)
    env["AUTOTUNE_FLAGS"] = f"--autotune_cache_dir={tmp_path / 'cache'}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton")
    start_at = time.time() + 6.0  # after every worker has imported torch and triton
    procs = [subprocess.Popen([sys.executable, "-m", "tests.triton.tune_worker", str(log),
                               str(start_at)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(WORKERS)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))

    lines = log.read_text().splitlines()
    tuners = {line.split()[0] for line in lines}
    assert len(tuners) == 1, f"more than one process benchmarked: {lines}"
    assert sorted(int(line.split()[1]) for line in lines) == [16, 32, 64, 128]
    assert [r["best"] for r in results] == [64] * WORKERS
    assert all(r["correct"] for r in results)
    # Every process missed (they raced), one tuned, the others waited on the lock and read it.
    assert [r["misses"] for r in results] == [1] * WORKERS
    assert sorted(r["tuned"] for r in results) == [0] * (WORKERS - 1) + [1]
    assert sum(r["benchmarks"] for r in results) == 4
    assert len(list((tmp_path / "cache").rglob("*.textproto"))) == 1


def test_waiting_on_a_remote_only_lock_reads_the_peers_result(use_cache, fake,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    import contextlib

    use_cache()
    fake(TABLE)
    peer = kernels.tuned_add()
    kernels.launch_add(peer, n=55)  # the peer's tuning, recorded on "the remote server"
    peer_entry = peer.last_entry

    cache = use_cache()  # this process: no directory, nothing in memory
    assert not any(t.name == "directory" for t in cache.tiers)
    refreshed: list[CacheKey] = []

    @contextlib.contextmanager
    def remote_lock(key: CacheKey, timeout: float = 0.0):
        yield True  # held on the remote server after the peer released it

    def refresh(key: CacheKey, candidates=None):
        refreshed.append(key)
        return peer_entry

    monkeypatch.setattr(cache, "tune_lock", remote_lock)
    monkeypatch.setattr(cache, "refresh", refresh)
    bench = fake({})  # any benchmark would raise
    kernel = kernels.tuned_add()
    out, expected = kernels.launch_add(kernel, n=55)
    torch.testing.assert_close(out, expected)
    assert bench.calls == [] and kernel.last_entry is peer_entry
    assert [k.digest() for k in refreshed] == [CacheKey.from_proto(peer_entry.key).digest()]
    assert kernel.best_config is kernel.configs[2]
