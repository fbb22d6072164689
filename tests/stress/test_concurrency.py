"""Many processes share one cache directory: nothing lost, nothing partial, even under SIGKILL."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune_cache.cli import main as cli_main
from autotune_cache.store.dirstore import DirectoryStore
from tests.stress.worker import SHARED_KEYS, big_entry, keys_for

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.stress.worker", *args], cwd=ROOT,
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_eight_processes_write_and_read_one_directory(tmp_path):
    workers, per_worker = 8, 15
    procs = [spawn("write_and_read", str(tmp_path), str(w), str(per_worker))
             for w in range(workers)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    store = DirectoryStore(tmp_path)
    expected = {k.digest() for w in range(workers) for k in keys_for(w, per_worker)}
    assert len(expected) == workers * per_worker + SHARED_KEYS
    found = {p.name.removesuffix(".textproto").split("-")[1] for p in store.entry_files()}
    assert found == expected, "entries were lost"
    assert all(entry is not None for _, entry, _ in store.scan()), "a corrupt entry was left"
    assert list(tmp_path.glob(".tmp-*")) == []


@pytest.mark.slow
def test_sigkill_mid_write_never_exposes_a_partial_entry(tmp_path):
    DirectoryStore(tmp_path).put(big_entry(-1))
    readers = [spawn("reader", str(tmp_path), "6") for _ in range(2)]
    rng = random.Random(1234)
    kills = 0
    deadline = time.time() + 5
    while time.time() < deadline:
        writer = spawn("writer_forever", str(tmp_path))
        time.sleep(rng.uniform(0.3, 0.9))
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        kills += 1
    for r in readers:
        out, err = r.communicate(timeout=60)
        assert r.returncode == 0, f"a reader saw a partial entry:\n{err}"
        assert int(out.strip()) > 0, "the reader never saw the entry"
    assert kills >= 5
    store = DirectoryStore(tmp_path)
    assert all(entry is not None for _, entry, _ in store.scan())
    # Killed writers leave temp files behind: readers ignore them, prune removes them.
    leftovers = list(tmp_path.glob(".tmp-*"))
    for t in leftovers:
        os.utime(t, (time.time() - 3600,) * 2)
    assert cli_main(["prune", str(tmp_path)]) == 0
    assert list(tmp_path.glob(".tmp-*")) == []
