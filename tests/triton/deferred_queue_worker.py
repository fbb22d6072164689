"""Subprocess body: queue two tunings' candidate compiles (compile.queue_candidates, what
deferred.py uses) for sm_90 on a machine with no GPU, without waiting, then wait for them.

Prints one JSON line: whether add() returned before the compiles ended, the failures and
recorded specializations of each, which compiles each one's pool timed (a binary the first
already queued is not compiled again for the second), and the JIT cache size once finished."""

from __future__ import annotations

import json
import os
import time

os.environ["TRITON_INTERPRET"] = "0"

import torch  # noqa: E402
from triton.runtime.driver import driver  # noqa: E402

import autotune_cache.triton  # noqa: E402, F401  (compiling applies the sandbox default)
from autotune_cache.triton.compile import forget_queued, queue_candidates  # noqa: E402
from tests.triton import kernels  # noqa: E402
from tests.triton.compile_worker import CompileOnlyDriver  # noqa: E402


def main() -> None:
    driver.set_active(CompileOnlyDriver())
    configs = kernels.configs(16, 24, 32, 64)
    x = torch.empty(512)
    started = time.perf_counter()
    # Two keys (n=256 and n=512) that specialise alike: one compile per binary between them.
    first = queue_candidates(kernels.add_kernel, (x, x, x, 256), {"grid": None}, configs, 2,
                             skip=[0])
    between = time.perf_counter()
    second = queue_candidates(kernels.add_kernel, (x, x, x, 512), {"grid": None}, configs, 2)
    returned = time.perf_counter()
    done_at_return = sum(1 for q in (first, second) for k in q.kernels.values()
                         if hasattr(k, "future") and k.future.done())
    one = first.wait([1, 2, 3])
    two = second.wait([0, 1, 2, 3])
    forget_queued()
    print(json.dumps({
        "first_add_s": between - started,
        "second_add_s": returned - between,
        "compile_s": time.perf_counter() - started,
        "first_timed": sorted(first.seconds),
        "second_timed": sorted(second.seconds),
        "done_at_return": done_at_return,
        "first_failures": sorted(one.failures),
        "second_failures": sorted(two.failures),
        "first_specs": sorted(one.specs),
        "second_specs": sorted(two.specs),
        "jit_cache_size": len(kernels.add_kernel.device_caches[0][0]),
    }))


if __name__ == "__main__":
    main()
