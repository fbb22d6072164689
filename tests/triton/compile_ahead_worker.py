"""Subprocess body: compile-ahead with Triton's real compiler, for sm_90, on a machine with no GPU.

`tune PATH`: two kernels (add, accumulate) are tuned through `Autotuner._select` as on a GPU (a
compile-only driver names the target, the device is stubbed, a `do_bench` that does not launch),
and their entries, with the winners' recorded specializations, saved to PATH.
`load PATH`: a fresh process loads them; the first kernel's hit starts compiling the second
kernel's winner through `JITFunction.preload`; the second kernel's hit then compiles nothing.
A third argument `qualified` names the kernels `module.qualname` in their keys.
`early PATH`: the compile-ahead from the start (triton/early.py) on PATH's winners, then a launch.
`launchers PATH`: each of PATH's winners compiled for sm_90 as the early start does, and its
launcher built from the record alone (detached.py `build_launcher_of`); prints the C sources
each way (a GPU-less machine cannot link them: the build is stopped at the source).
`helper DIR`: a compile helper (autotune_cache/triton/compile_helper.py) run on DIR's job, with
the same compile-only driver and device; prints its markers ({digest: "" compiled, "-" left}).
Prints one JSON line of counts.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "0"

import torch  # noqa: E402
from triton.runtime.driver import driver  # noqa: E402

import autotune_cache.triton.autotuner as autotuner_module  # noqa: E402
import autotune_cache.triton.tune as tune_module  # noqa: E402
from autotune_cache import Device, Settings, configure, get_cache  # noqa: E402
from autotune_cache.formats import save_results  # noqa: E402
from autotune_cache.triton import autotune, preload, preload_job  # noqa: E402
from tests.triton import kernels  # noqa: E402
from tests.triton.compile_worker import LAUNCHERS, CompileOnlyDriver  # noqa: E402

FAKE_GPU = Device(name="Fake H100", arch="sm_90", sm_count=132)


def do_bench(kernel_call, quantiles):  # times without launching: there is no GPU
    return [1.0] * len(quantiles)


def counting(jit) -> list[int]:
    """Count the compiles Triton starts for `jit` (the preload's and the launch's)."""
    calls: list[int] = []
    original = jit._do_compile

    def wrapper(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    jit._do_compile = wrapper
    return calls


def select(tuner, args):
    tuner.nargs = dict(zip(tuner.arg_names, args, strict=False))
    kwargs = {"grid": (1,), "warmup": False}
    best, tuned = tuner._select(args, kwargs, {**tuner.nargs, **kwargs})
    return best, tuned


def helper(directory: str) -> None:
    from pathlib import Path

    import autotune_cache.triton.device as device_module
    from autotune_cache.triton import compile_helper

    driver.set_active(CompileOnlyDriver())
    device_module.current_device = lambda: FAKE_GPU
    assert compile_helper.run(Path(directory), 0) is not None
    markers = {p.name: p.read_text() for p in Path(directory).iterdir()
               if len(p.name) == 32}
    print(json.dumps({"markers": markers, "launchers": sorted(n for n, _ in LAUNCHERS)}))


def early(path: str) -> None:
    """The compile-ahead from the start (autotune_cache/triton/early.py), asked for directly (a
    CPU machine has no GPU device node): the loaded winners compile for the device the file
    names as the tuners are decorated, without the GPU driver (here none could start); then
    the first launch, with the driver up, confirms the device and loads each binary from the
    compile cache."""
    import threading

    from autotune_cache.triton import detached, early, scheduler

    ahead_launchers: list[str] = []
    built = threading.Condition()

    def build(launcher: str) -> bool:  # no libcuda here to link one: recorded instead
        with built:
            ahead_launchers.append(launcher)
            built.notify_all()
        return True

    intervals: list[float] = []
    original = preload_job.compile_detached

    def watched(*args, **kwargs):  # the switch interval while a job compiles
        intervals.append(sys.getswitchinterval())
        return original(*args, **kwargs)

    preload_job.compile_detached = watched
    detached.build_launcher_of = build
    early.start(Settings(load_from=(path,), compile_workers=2))
    with built:  # before any kernel is decorated (Triton 3.6: none per signature in 3.9)
        built.wait_for(lambda: len(ahead_launchers) >= 2,
                       timeout=120 if detached.per_signature_launchers() else 0)
    launchers_before_kernels = len(ahead_launchers)
    add, acc = (autotune(configs=kernels.configs(32, 64), key=["n"], do_bench=do_bench)(
        fn, kernel_name=f"{fn.__module__}.{fn.__name__}")
        for fn in (kernels.add_kernel, kernels.accumulate_kernel))
    jobs = [j for t in (add, acc) for j in (preload.started(t) or {}).values()]
    concurrent.futures.wait(jobs, timeout=120)  # the pool runs them all (no waiter runs one)
    compiled = [j.result() for j in jobs]
    pool = scheduler.scheduler()
    with pool._cond:
        pool._cond.wait_for(lambda: not any(pool._running.values()), timeout=60)
    driver_before = driver._default is not None or driver._active is not None
    ahead = preload.ahead()
    guessed = str(ahead.device) if ahead is not None and ahead.device is not None else None
    driver.set_active(CompileOnlyDriver())
    autotuner_module.current_device = lambda: FAKE_GPU
    tune_module.device_identity = lambda: "fake-gpu"
    configure(Settings(load_from=(path,), require_complete=True, compile_workers=2))
    x = torch.empty(256)
    add_compiles = counting(kernels.add_kernel)
    best, tuned = select(add, (x, x, x, 256))
    add.fn.run(x, x, x, 256, grid=None, warmup=True, **add.launch_kwargs_of(best))  # the launch
    ahead = preload.ahead()
    print(json.dumps({
        "jobs": len(jobs), "compiled": compiled, "driver_before_launch": driver_before,
        "guessed": guessed, "interval_while_compiling": sorted(set(intervals)),
        "interval_after": sys.getswitchinterval(), "confirmed": not ahead.early,
        "tuned": tuned, "launch_compiles": len(add_compiles),
        "launchers_before_kernels": launchers_before_kernels,
        "launcher_names": sorted(",".join(json.loads(t)) for t in ahead_launchers)}))


def launchers(path: str) -> None:
    """The launcher a record describes without its kernel, against the kernel's own: Triton's
    NVIDIA launcher class builds both; its C source is caught where it is compiled and cached
    (`compile_module_from_src`, keyed by the source), with the library lookup that needs
    libcuda stubbed."""
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia import driver as nvidia

    from autotune_cache.formats import load_results
    from autotune_cache.triton import detached

    sources: list[str] = []

    class Caught(Exception):
        pass

    def caught(src: str, **_: object) -> None:
        sources.append(src)
        raise Caught  # no libcuda to link against here

    nvidia.compile_module_from_src = caught
    nvidia.library_dirs = lambda: []
    functions = {f._fn_name: f for f in (kernels.add_kernel, kernels.accumulate_kernel)}
    pairs = []
    for entry in load_results(path):
        spec = entry.result.triton_specialization
        kernel = functions[json.loads(spec)["name"]]
        del sources[:]
        detached.compile_specialization(kernel, spec, GPUTarget("cuda", 90, 32))
        built = detached.build_launcher_of(detached.launcher_of(spec) or "")
        pairs.append({"kernel": kernel.__name__, "sources": list(sources), "built": built})
    print(json.dumps({"pairs": pairs}))


def main() -> None:
    phase, path = sys.argv[1], sys.argv[2]
    if phase == "launchers":
        launchers(path)
        return
    if phase == "helper":
        helper(path)
        return
    if phase == "early":
        early(path)
        return
    driver.set_active(CompileOnlyDriver())
    autotuner_module.current_device = lambda: FAKE_GPU
    tune_module.device_identity = lambda: "fake-gpu"
    x = torch.empty(256)
    # `qualified`: the keys name the kernels `module.qualname`, as routed kernels' keys do (the
    # names compile helpers can import); else the function's name, the decorator's default.
    qualified = sys.argv[3:] == ["qualified"]
    add, acc = (autotune(configs=kernels.configs(32, 64), key=["n"], do_bench=do_bench)(
        fn, kernel_name=f"{fn.__module__}.{fn.__name__}" if qualified else None)
        for fn in (kernels.add_kernel, kernels.accumulate_kernel))
    add_args, acc_args = (x, x, x, 256), (x, x, 256)
    if phase == "tune":
        configure(Settings(compile_workers=2))
        entries = []
        for tuner, args in ((add, add_args), (acc, acc_args)):
            select(tuner, args)
            entries.append(tuner.last_entry)
        save_results(path, entries)
        print(json.dumps({"specs": [bool(e.result.triton_specialization) for e in entries]}))
        return
    configure(Settings(load_from=(path,), require_complete=True, compile_workers=2))
    acc_compiles = counting(kernels.accumulate_kernel)
    select(add, add_args)  # the first launch: starts the compile-ahead
    started = dict(preload.started(acc) or {})
    for p in started.values():
        preload.wait(p)
    ahead = len(acc_compiles)
    best, tuned = select(acc, acc_args)
    acc.fn.run(*acc_args, grid=None, warmup=True, **acc.launch_kwargs_of(best))  # the launch
    print(json.dumps({
        "acc_preloads": len(started),
        "acc_preload_ok": [p.result() for p in started.values()],
        "compiles_ahead": ahead,
        "compiles_after_hit": len(acc_compiles) - ahead,
        "tuned": tuned,
        "benchmarks": get_cache().stats.benchmarks,
        "pool": preload.ahead() is not None,
        # Nothing launches here: every launcher build is a preload's.
        "launchers_built_ahead": sorted({name for name, _ in LAUNCHERS}),
    }))


if __name__ == "__main__":
    main()
