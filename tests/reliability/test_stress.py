"""The stress run of issue 11: 16 tuner processes share one cache directory and one dump file
while at least 50 of them are SIGKILLed at random moments (each replaced by a fresh one).

It ends with every key a process reported present (recorded keys in the directory and the dump;
hits of processes that exited normally in the dump), nothing partial, and `verify` clean.
Its size is fixed (no timing assertions); on 2 cores it takes well under a minute.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time

import pytest

from autotune_cache.cli import main as cli_main
from autotune_cache.formats import load_results
from autotune_cache.foundation.key import CacheKey
from autotune_cache.store.dirstore import DirectoryStore
from autotune_cache.store.dumpfile import DumpFile
from tests.reliability.conftest import ROOT, child_env

PROCESSES = 16
KILLS = 50


def spawn(directory, dump, seed: int, run: DumpFile) -> subprocess.Popen:
    """A worker of the test's dump run (`run` is its root, as a test starting workers is)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.stress_worker", str(directory), str(dump),
         str(seed)], cwd=ROOT, env=child_env({"AUTOTUNE_DUMP_RUN": str(run.run_dir)}),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def reported(out: str) -> tuple[set[str], set[str], bool]:
    recorded, used, done = set(), set(), False
    for line in out.splitlines():
        word, _, digest = line.partition(" ")
        if word == "RECORDED":
            recorded.add(digest)
        elif word == "USED":
            used.add(digest)
        elif word == "DONE":
            done = True
    return recorded, used, done


@pytest.mark.slow
def test_sixteen_tuners_one_directory_one_dump_fifty_sigkills(tmp_path):
    directory, dump = tmp_path / "cache", tmp_path / "dump.textproto"
    rng = random.Random(20261130)
    seeds = iter(range(10_000))
    run = DumpFile(dump)
    running = [spawn(directory, dump, next(seeds), run) for _ in range(PROCESSES)]
    finished: list[tuple[str, str, int, bool]] = []  # (stdout, stderr, rc, killed)
    kills = 0
    while kills < KILLS:
        time.sleep(rng.uniform(0.02, 0.25))
        victim = rng.choice(running)
        killed = victim.poll() is None
        if killed:
            victim.send_signal(signal.SIGKILL)
            kills += 1
        out, err = victim.communicate()
        finished.append((out, err, victim.returncode, killed))
        running.remove(victim)
        running.append(spawn(directory, dump, next(seeds), run))
    for proc in running:
        out, err = proc.communicate(timeout=300)
        finished.append((out, err, proc.returncode, False))
    run.close([])

    assert kills >= KILLS
    assert len(finished) >= PROCESSES + KILLS
    recorded_all: set[str] = set()
    dumped_expected: set[str] = set()
    for out, err, rc, killed in finished:
        assert "Traceback" not in err, err
        recorded, used, done = reported(out)
        recorded_all |= recorded
        dumped_expected |= recorded
        if not killed:
            assert rc == 0 and done, err
            dumped_expected |= used
    assert recorded_all, "no process recorded anything"

    store = DirectoryStore(directory)
    in_dir = {}
    for path, entry, problem in store.scan():
        assert entry is not None, f"partial or damaged entry {path}: {problem}"
        in_dir[CacheKey.from_proto(entry.key).digest()] = entry
    assert recorded_all <= set(in_dir), "a recorded entry is missing from the directory"
    in_dump = {CacheKey.from_proto(e.key).digest() for e in load_results(dump)}
    assert dumped_expected <= in_dump, f"{len(dumped_expected - in_dump)} reported keys are " \
                                       "missing from the dump"
    assert cli_main(["verify", str(directory), str(dump)]) == 0
