"""A pytest plugin that bench/suite_perf.py loads into every pass (`-p suite_probe`).

It records, for the pass's one pytest process, without changing what runs:
  - each test's outcome and duration (setup + call + teardown);
  - where the time went, as consecutive segments of the process: start-up until pytest loads
    this plugin (from the `SUITE_PROBE_T0` the runner sets just before it starts the process),
    plugins and their configure (ours installs the routing there), the CUDA driver's start-up
    (timed once at session start: the first test would pay it otherwise), collection (imports
    of the library, its kernels decorated), the tests, and (added by the runner) the exit;
  - timers inside those: `triton.compile` (calls, seconds; a call served by the compile cache
    is counted too),
    launcher builds (Triton's `compile_module_from_src`: the C launcher and cuda_utils built
    with the host compiler, or loaded from the compile cache), Triton's own autotuner
    benchmarks (configs timed, seconds), our cache's lookups (calls, seconds), our tunings
    (keys, seconds), and inside them the compiles (from the first start to the last finish)
    and each key's slowest compile (a key's tuning cannot end before it does);
  - our cache's stats, when autotune_cache was used;
  - a timeline of our compile jobs (triton/scheduler.py's `CompileJob`): each job's label, the
    thread that ran it, when it was queued, started and ended; and each wait of the main thread
    for a job still compiling. Patched right after the program's `import triton` when our
    plugin's early start waits for that import (so its jobs during conftest.py imports are in
    it), else at configure. A wait is any `result()` of a job not done yet: one a worker runs,
    or one the waiting thread then runs itself. Times are seconds since `SUITE_PROBE_T0`, as is
    each test's start.

It writes them as JSON to `SUITE_PROBE_OUT` at the end of the session. Timers are wall-clock
sums over calls, and calls on background threads (our early compiles of loaded winners) are
summed too, so they can add up to more than the session.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

_T_IMPORTED = time.time()  # pytest imports this plugin early, while it loads its plugins
_lock = threading.Lock()
TIMERS: dict[str, list[float]] = {}  # name -> [calls, seconds]
TESTS: dict[str, dict[str, Any]] = {}
MARKS: dict[str, float] = {}
EVENTS: list[list[Any]] = []  # [kind, label, thread, queued|None, start, end]; time.time()


def _add(name: str, seconds: float) -> None:
    with _lock:
        entry = TIMERS.setdefault(name, [0, 0.0])
        entry[0] += 1
        entry[1] += seconds


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    if getattr(fn, "_suite_probe", False):
        return fn

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _add(name, time.perf_counter() - start)

    wrapper._suite_probe = True  # type: ignore[attr-defined]
    return wrapper


def _patch(module: Any, attribute: str, name: str) -> None:
    original = getattr(module, attribute, None)
    if original is not None:
        setattr(module, attribute, _timed(name, original))


def _instrument() -> None:
    """Wrap Triton's and our entry points; each is optional (versions differ)."""
    try:
        import triton
        import triton.compiler.compiler as compiler
        from triton.runtime import autotuner as triton_autotuner
    except ImportError:
        return
    # One wrapper wherever the function is reachable: JITFunction imports it from
    # triton.compiler when it first runs, our compile workers from where they import it.
    wrapped = _timed("triton_compile", compiler.compile)
    import triton.compiler as compiler_package

    for module in (compiler, compiler_package, triton):
        if getattr(module, "compile", None) is not None:
            module.compile = wrapped
    _patch(triton_autotuner.Autotuner, "_bench", "triton_autotuner_bench")
    try:
        import triton.backends.nvidia.driver as nvidia_driver
        _patch(nvidia_driver, "compile_module_from_src", "launcher_build")
    except ImportError:
        pass
    try:
        from autotune_cache.cache import Cache
        _patch(Cache, "lookup", "ours_lookup")
        from autotune_cache.triton.progress import Progress
        from autotune_cache.triton.tune import KernelTuning
    except ImportError:
        return
    _patch(KernelTuning, "__call__", "ours_tuning")
    from autotune_cache.triton import deferred
    _patch(deferred, "finish_all", "ours_deferred_end")
    reported = Progress.compiled

    def compiled(self: Any, count: int, failed: int, seconds: float,
                 slowest: tuple[str, float] | None = None) -> None:
        _add("ours_compile_wall", seconds)
        if slowest is not None:
            _add("ours_slowest_compile", slowest[1])
        reported(self, count, failed, seconds, slowest)

    Progress.compiled = compiled  # type: ignore[method-assign]


def _patch_jobs() -> None:
    """Record our compile jobs (see the module docstring); once, where scheduler.py is loaded."""
    scheduler = sys.modules.get("autotune_cache.triton.scheduler")
    job = getattr(scheduler, "CompileJob", None)
    if job is None or getattr(job, "_suite_probe", False):
        return
    init, run, result = job.__init__, job.run, job.result

    def queued(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self._probe_queued = time.time()

    def ran(self: Any) -> bool:
        start = time.time()
        did = run(self)
        if did:
            with _lock:
                EVENTS.append(["job", str(self.label)[:160], threading.current_thread().name,
                               getattr(self, "_probe_queued", None), start, time.time()])
        return did

    def waited(self: Any, timeout: float | None = None) -> Any:
        if self.done():
            return result(self, timeout)
        start = time.time()
        try:
            return result(self, timeout)
        finally:
            with _lock:
                EVENTS.append(["wait", str(self.label)[:160], threading.current_thread().name,
                               None, start, time.time()])

    job.__init__, job.run, job.result = queued, ran, waited
    job._suite_probe = True


def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """After our plugin's own hook (tryfirst) asked for its early start, before conftest.py
    files import: patch the jobs right after the program's `import triton`, after that start
    (its first job, the ready-up, may be missed). Only where an early start waits for that
    import: any other pass (P and W too) keeps Triton's import as it is."""
    hook = sys.modules.get("autotune_cache.foundation.import_hook")
    if hook is not None and getattr(hook, "_pending", None):
        hook.when_triton_imported(_patch_jobs)


def _cuda_start() -> None:
    """Time the CUDA driver's start-up once, where there is a GPU."""
    try:
        import torch
    except ImportError:
        return
    if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
        return
    start = time.perf_counter()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    MARKS["cuda_init_s"] = time.perf_counter() - start


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    MARKS["imported_at"] = _T_IMPORTED
    _instrument()
    _patch_jobs()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Every plugin has configured (ours installed the routing): start the CUDA driver."""
    MARKS["session_start_at"] = time.time()
    _cuda_start()


def pytest_collection_finish(session: pytest.Session) -> None:
    MARKS["collected_at"] = time.time()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Iterator[None]:
    start, at = time.perf_counter(), time.time()
    try:
        return (yield)
    finally:
        test = TESTS.setdefault(item.nodeid, {})
        test["seconds"] = round(time.perf_counter() - start, 4)
        test["start"] = round(at - _t0(), 4)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    test = TESTS.setdefault(report.nodeid, {"outcome": "passed"})
    if report.when == "call" or report.outcome != "passed":
        if report.outcome == "skipped" and hasattr(report, "wasxfail"):
            outcome = "xfailed"
        elif report.outcome == "failed" and report.when != "call":
            outcome = "error"
        else:
            outcome = report.outcome
        if test.get("outcome") in (None, "passed") or outcome in ("failed", "error"):
            test["outcome"] = outcome
        if report.outcome == "failed":
            text = str(report.longrepr or "")
            test["failure"] = text.strip().splitlines()[-1][:300] if text.strip() else ""


def _our_stats() -> dict[str, Any] | None:
    if "autotune_cache.cache" not in sys.modules:
        return None
    from autotune_cache.cache import get_cache

    found = get_cache().stats.as_dict()
    if "autotune_cache.triton.offload" in sys.modules:  # compiles split into processes
        from autotune_cache.triton import offload

        found["offload"] = vars(offload.stats())
    return found


def _census() -> list[dict[str, Any]]:
    """Every Triton autotuner alive at the end of the session: its class, its kernel, whose it
    is (autotune_cache / routed / triton) and whether it ran. Passes that never import our
    package (P, W) are censused from the garbage collector here, every tuner Triton's."""
    import gc

    if "autotune_cache.triton.classroute" in sys.modules:
        from dataclasses import asdict

        from autotune_cache.triton.classroute import census

        return [asdict(t) for t in census()]
    module = sys.modules.get("triton.runtime.autotuner")
    if module is None:
        return []
    rows = []
    for obj in gc.get_objects():
        kind = type(obj)
        try:
            if not issubclass(kind, module.Autotuner):
                continue
            fn = obj.base_fn
            rows.append({"kind": f"{kind.__module__}.{kind.__qualname__}",
                         "kernel": f"{fn.__module__}.{fn.__qualname__}", "owner": "triton",
                         "ran": "best_config" in vars(obj)})
        except Exception:  # noqa: BLE001, S112 - a half-built object is left out
            continue
    return sorted(rows, key=lambda r: (r["owner"], r["kernel"]))


def _t0() -> float:
    return float(os.environ.get("SUITE_PROBE_T0") or _T_IMPORTED)


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get("SUITE_PROBE_OUT")
    if not out:
        return
    marks = dict(MARKS, finished_at=time.time())
    t0 = _t0()
    if "session_start_at" in marks and "collected_at" in marks:
        # Segments of the process, one after another (the runner adds the exit after this).
        marks["startup_s"] = marks["imported_at"] - t0
        marks["plugins_configure_s"] = marks["session_start_at"] - marks["imported_at"]
        marks["collection_s"] = (marks["collected_at"] - marks["session_start_at"]
                                 - marks.get("cuda_init_s", 0.0))
        marks["tests_s"] = marks["finished_at"] - marks["collected_at"]
    data = {
        "marks": {k: round(v, 4) for k, v in marks.items()},
        "timers": {k: {"calls": int(c), "seconds": round(s, 4)} for k, (c, s) in TIMERS.items()},
        "tests": TESTS,
        "ours": _our_stats(),
        "census": _census(),
        "events": [[kind, label, thread, None if queued is None else round(queued - t0, 4),
                    round(start - t0, 4), round(end - t0, 4)]
                   for kind, label, thread, queued, start, end in EVENTS],
        "exitstatus": int(session.exitstatus),
    }
    with open(out, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
