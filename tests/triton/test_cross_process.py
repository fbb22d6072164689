"""Processes sharing a cache directory that miss the same key tune it exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

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
