"""One compile ahead: what a compile-ahead job (preload.py) runs on a pool thread.

Three ways, by what the process knows when the job is queued:

* `preload_into`: the kernel compiled through Triton's own `JITFunction.preload` into the JIT
  function's memory, where its launch finds it, with its launcher built;
* the same into Triton's compile cache only (`compile_cache_only`, a dump run: decision 0024),
  so that the launch still goes through Triton's compile path, where the dump records it;
* `compile_detached`: before the first launch (early.py), for the target the loaded entries
  name, without the GPU driver (detached.py), into the compile cache only.

A job never raises: a record that does not fit is compiled by its launch as usual.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from autotune_cache.foundation import compile_helpers
from autotune_cache.triton import hooks, offload
from autotune_cache.triton.compile import failure_reason

log = logging.getLogger(__name__)

# Whether the calling thread is compiling a job now (`in_preload`).
_local = threading.local()


def in_preload() -> bool:
    """Whether the calling thread is compiling a preload now."""
    return getattr(_local, "preloading", False)


def work(jit_fn: Any, specialization: str, compile_cache_only: bool,
               speculative: bool = False, target: Any = None) -> Callable[[], bool]:
    """The job's work: `_preload` of this specialization into `jit_fn`, or with a `target`
    (an early start: early.py) its compile for that target into Triton's compile cache only,
    without the GPU driver (detached.py). A speculative one (no launch awaits it) that a
    compile helper planned is left to the helper altogether: it only fills the compile cache,
    which the helper does, and waiting for it would hold a pool thread that a tuning's
    candidates may need."""
    def work() -> bool:
        if speculative and compile_helpers.planned(specialization):
            return False
        if target is not None:
            return compile_detached(jit_fn, specialization, target)
        return preload_into(jit_fn, specialization, compile_cache_only)

    return work


# The JIT key a compile-cache-only preload is filed under in the JIT function's in-memory cache
# for the moment it is there: no launch ever looks it up.
_APART = "autotune_cache:compile-cache-only:"


def preload_into(jit_fn: Any, specialization: str, compile_cache_only: bool = False) -> bool:
    """Compile one recorded specialization into `jit_fn`'s kernel cache, and build its launcher;
    whether it compiled (never raises).

    `compile_cache_only`: the kernel ends up in Triton's compile cache (TRITON_CACHE_DIR) only.
    It is compiled under a JIT key no launch looks up and then dropped from the JIT function's
    memory, so no launch can take it from there unseen, not even one racing this thread: the
    launch that needs it misses in memory, Triton calls its jit_cache_hook (where a dump run
    records the warm-up) and compiles it, a compile-cache hit (no code generation, no ptxas)."""
    apart = _filed_apart(specialization) if compile_cache_only else None
    if compile_cache_only and apart is None:
        log.debug("autotune_cache: no preload of %s: its specialization data is not a JSON "
                  "object", getattr(jit_fn, "__name__", jit_fn))
        return False
    # A compile helper with this specialization in its plan compiles it into the compile cache
    # (foundation/compile_helpers.py): wait for it, and the preload below is a compile-cache hit.
    compile_helpers.settle(specialization)
    local = _local
    local.preloading = True
    try:
        # Compiled here and now, even on a thread inside an AsyncCompileMode (a launch in a
        # candidate's pre_hook that runs a queued preload itself): its FutureKernel would be
        # filed into the JIT function's memory at the mode's end, after `_forget`.
        # Its back end split off into a compile process (offload.py) from Triton's own hook,
        # right before Triton's compile, which is then a compile-cache hit: what Triton's
        # `preload` decoded is what is split, whatever its release.
        with _no_async_compile(), hooks.recording(_split_now):
            kernel = jit_fn.preload(specialization if apart is None else apart[0])
    except Exception as e:  # a foreign or stale record: the launch compiles as usual
        log.debug("autotune_cache: preloading %s failed: %s",
                  getattr(jit_fn, "__name__", jit_fn), failure_reason(e))
        return False
    finally:
        local.preloading = False
        if apart is not None:
            _forget(jit_fn, apart[1])
    build_launcher(kernel)
    return True


def compile_detached(jit_fn: Any, specialization: str, target: Any) -> bool:
    """`detached.compile_specialization` for the early start; whether it compiled (never
    raises: a record that does not fit is compiled by its launch, as usual)."""
    from autotune_cache.triton import detached

    detached.prime(target)
    local = _local
    local.preloading = True
    try:
        detached.compile_specialization(jit_fn, specialization, target)
    except Exception as e:  # noqa: BLE001 - a foreign or stale record
        log.debug("autotune_cache: compiling %s ahead failed: %s",
                  getattr(jit_fn, "__name__", jit_fn), failure_reason(e))
        return False
    finally:
        local.preloading = False
    return True


def _split_now(hook_kwargs: dict[str, Any]) -> None:
    """The compile Triton is about to start on this thread, its back end in a compile
    process first (offload.py; a compile not split is Triton's alone, as before)."""
    split = offload.split_of(hook_kwargs)
    if split is not None:
        split()


@contextlib.contextmanager
def _no_async_compile() -> Iterator[None]:
    """No AsyncCompileMode on this thread for the duration (a Triton without it: nothing)."""
    try:
        from triton.runtime import _async_compile
    except ImportError:
        yield
        return
    token = _async_compile.active_mode.set(None)
    try:
        yield
    finally:
        _async_compile.active_mode.reset(token)


def _filed_apart(specialization: str) -> tuple[str, str] | None:
    """The specialization data with its JIT key replaced by one no launch looks up, and that
    key; None when the data is not a JSON object (its preload fails and says why)."""
    try:
        data = json.loads(specialization)
    except (ValueError, TypeError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    data["key"] = apart = _APART + json.dumps(data.get("key"))
    return json.dumps(data), apart


def _forget(jit_fn: Any, jit_key: str) -> None:
    """Drop what `jit_fn` filed under `jit_key` from its in-memory kernel caches (every
    device's: Triton keeps one per device)."""
    try:
        for caches in list(jit_fn.device_caches.values()):
            caches[0].pop(jit_key, None)
    except (AttributeError, TypeError, IndexError, KeyError) as e:  # another Triton's layout
        log.debug("autotune_cache: dropping a compile-cache-only preload: %s", e)


def build_launcher(kernel: Any) -> None:
    """Build the compiled kernel's launcher, which Triton otherwise builds at its first launch,
    on the launching thread: a C module compiled with the host compiler (about 0.2 s per kernel
    signature on the H200 host with an empty compile cache: 2.4 s of a loaded FLA suite's tests)
    and filed in TRITON_CACHE_DIR, where the first launch finds it. Only the build: the
    kernel's own handles (its module loaded on the GPU) are left to that launch, so nothing
    here touches the device. Never raises."""
    try:
        if kernel is None or getattr(kernel, "_run", None) is not None:
            return
        from triton.runtime import driver

        driver.active.launcher_cls(kernel.src, kernel.metadata)
    except Exception as e:  # another Triton's internals: the first launch builds it
        log.debug("autotune_cache: building a launcher ahead failed: %s", failure_reason(e))
