"""A tuner process for the stress run (`python -m tests.reliability.stress_worker DIR DUMP SEED`).

It tunes a random share of a common pool of keys through one cache directory and one dump file,
like a test process of a suite that shares both, and prints `RECORDED <digest>` once a result it
tuned is stored (and `USED <digest>` for a hit, which reaches the dump at exit). The stress test
SIGKILLs these at random moments.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

from autotune_cache import Cache, Settings
from tests.cachetools import fake_tune, make_key

POOL = 48
PER_WORKER = 24


def pool_key(i: int):
    # Keys share problem groups in fours, so near-miss scans read each other's entries too.
    return make_key(problem={"M": i // 4, "N": i % 4}, source=f"src{i % 2}")


def main(directory: str, dump: str, seed: int) -> None:
    rng = random.Random(seed)
    cache = Cache(Settings(cache_dir=Path(directory), dump_to=Path(dump)))
    for i in rng.sample(range(POOL), PER_WORKER):
        key = pool_key(i)
        if cache.lookup(key) is not None:
            print("USED", key.digest(), flush=True)
            continue
        with cache.tune_lock(key) as shared:
            entry = cache.refresh(key) if shared else None
            if entry is None:
                time.sleep(rng.uniform(0.0, 0.03))  # "benchmarking"
                cache.record(fake_tune(key))
                print("RECORDED", key.digest(), flush=True)
            else:
                print("USED", key.digest(), flush=True)
    cache.close()
    print("DONE", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
