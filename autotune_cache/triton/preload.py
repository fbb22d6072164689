"""Compiling loaded winners in the background, before their first launch asks for them.

At a kernel's first launch of a new problem, the autotuner starts compiling, through Triton's own
`JITFunction.preload`, the winner of every loaded entry of the kernel that was tuned for the same
source, device and toolchain and records Triton's specialization data; a hit then awaits its
winner's compile instead of compiling it a second time.

A preload compiles exactly the recorded specialization and files it under the recorded JIT key,
so a launch with another specialization never uses it: it compiles as usual and the preload was
only wasted work. Any failure is logged at debug level and ignored. Only the kernel's entries are
read, and not at all when the loaded files hold more than PRELOAD_SCAN_LIMIT of them or more than
PRELOAD_SCAN_BYTES of their text is still unparsed (a canonical text file's entries are parsed on
first use: results_index); reading them would cost more than it saves. Keys whose winners record
the same specialization share one compile.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from autotune_cache.cache import Cache
from autotune_cache.errors import AutotuneCacheError
from autotune_cache.key import CacheKey
from autotune_cache.triton.compile import failure_reason

log = logging.getLogger(__name__)

# Scan the loaded files up to this many entries of the kernel, and up to this much text still to
# parse (protobuf's Python text parser reads about 1.3 MB/s on the CI machine, so 256 KiB bounds
# the parsing at about 0.2 s: a scenario-B file, 3 entries of 48 candidates, is 56 kB); preload
# at most this many winners.
PRELOAD_SCAN_LIMIT = 2000
PRELOAD_SCAN_BYTES = 256 * 1024
PRELOAD_MAX = 64


def start_preloads(fn: Any, like: CacheKey, cache: Cache) -> dict[str, Future[None]]:
    """Start compiling the loaded winners of `like`'s kernel tuned for its source, device and
    toolchain (any problem, any candidate list) into `fn`'s JIT function; the compiles' futures
    by key digest (empty when there is nothing to preload or no JIT function to preload into)."""
    jit_fn = fn
    while not hasattr(jit_fn, "preload") and hasattr(jit_fn, "fn"):
        jit_fn = jit_fn.fn
    if not hasattr(jit_fn, "preload"):
        return {}
    try:
        loaded = cache.loaded_entries(like.kernel, max_entries=PRELOAD_SCAN_LIMIT,
                                      max_unparsed_bytes=PRELOAD_SCAN_BYTES)
    except AutotuneCacheError as e:  # a damaged entry: the lookup that needs it says so
        log.debug("autotune_cache: no preload of %s: %s", like.kernel, e)
        return {}
    wanted = {key.digest(): entry.result.triton_specialization for key, entry in loaded
              if key.kernel == like.kernel and key.device == like.device
              and key.source_fingerprint == like.source_fingerprint
              and key.toolchain == like.toolchain and entry.result.triton_specialization}
    if not wanted:
        return {}
    _start_driver()
    pool = ThreadPoolExecutor(max(1, min(len(wanted), cache.settings.compile_workers)),
                              thread_name_prefix="autotune-preload")
    by_spec: dict[str, Future[None]] = {}
    preloads: dict[str, Future[None]] = {}
    for digest, spec in list(wanted.items())[:PRELOAD_MAX]:
        if spec not in by_spec:
            by_spec[spec] = pool.submit(_preload, jit_fn, spec)
        preloads[digest] = by_spec[spec]
    pool.shutdown(wait=False)
    return preloads


def _start_driver() -> None:
    """Create Triton's active GPU driver here, once, before the preload threads start: with an
    empty compile cache that builds its C driver stub (0.35-0.45 s on the H200 host), and each
    preload thread would otherwise race to build its own (bench/profile_sandbox_start.py showed
    three concurrent builds). A failure is left to the launch to report."""
    try:
        from triton.runtime import driver

        driver.active  # noqa: B018 (the property creates the driver)
    except Exception as e:
        log.debug("autotune_cache: starting Triton's driver failed: %s", failure_reason(e))


def _preload(jit_fn: Any, specialization: str) -> None:
    """Compile one recorded specialization into `jit_fn`'s kernel cache (never raises)."""
    try:
        jit_fn.preload(specialization)
    except Exception as e:  # a foreign or stale record: the launch compiles as usual
        log.debug("autotune_cache: preloading a winner of %s failed: %s",
                  getattr(jit_fn, "__name__", jit_fn), failure_reason(e))
