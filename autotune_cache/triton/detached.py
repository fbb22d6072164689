"""Compiling a recorded specialization without the GPU: for the compile-ahead at start (early.py).

Triton's own way in, `JITFunction.preload`, asks the active driver for the current device and
its target, which starts the GPU driver (CUDA's, through torch). Before the program first uses
the GPU that must not happen: a conftest.py may still set CUDA_VISIBLE_DEVICES, and a process
that forks after CUDA has started cannot use the GPU in the child. So the compile here is
`JITFunction.preload`'s own steps with the target given instead of asked for:

* the target is the one the loaded entries' device names: `sm_90` is `GPUTarget("cuda", 90,
  32)` (NVIDIA only; other arches are left to the launch). `pick` chooses that device among
  the NVIDIA models the kernel driver lists in /proc/driver/nvidia/gpus, a file read that
  starts nothing;
* `triton.compile(ASTSource(jit_fn, ...), target=..., options=...)` fills Triton's compile cache
  under the key a launch computes for the same specialization on that target, and nothing
  else: the kernel is not filed in the JIT function's memory, so the launch that needs it
  misses there, runs Triton's compile (its hooks too) and loads the binary from the compile
  cache, as Triton's best case, a warm compile cache, does;
* the launcher (the C module each kernel signature needs) and Triton's CUDA utilities module
  are built into the compile cache too, by the backend's own classes (loading them starts
  nothing on the GPU).

A wrong guess costs only CPU time: a binary for another target, or under environment variables
the program changes later, is never found by a launch, which compiles as usual.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import threading
from collections.abc import Iterable
from typing import Any

from autotune_cache.foundation.key import Device
from autotune_cache.triton import offload, process
from autotune_cache.triton.device import cuda_arch
from autotune_cache.triton.scheduler import prime_triton

log = logging.getLogger(__name__)

# The kernel driver's list of NVIDIA GPUs: one directory per GPU, with a `Model:` line.
PROC_GPUS = "/proc/driver/nvidia/gpus"


class _Primed:
    """The targets (by arch) whose CUDA utilities module was built in this process (process.py)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.arches: set[int] = set()


def visible_models(root: str = PROC_GPUS) -> set[str] | None:
    """The NVIDIA GPU models the kernel driver lists (`NVIDIA H100 80GB HBM3`), or None when it
    lists none or cannot be read (a container without /proc/driver/nvidia)."""
    models: set[str] = set()
    for info in glob.glob(os.path.join(root, "*", "information")):
        try:
            with open(info, encoding="utf-8", errors="replace") as f:
                for line in f:
                    name, sep, value = line.partition(":")
                    if sep and name.strip() == "Model":
                        models.add(value.strip())
        except OSError:
            continue
    return models or None


def target_of(device: Device) -> Any | None:
    """Triton's compile target for a recorded NVIDIA device (`sm_90`), else None."""
    arch = cuda_arch(device)
    if arch is None:
        return None
    try:
        from triton.backends.compiler import GPUTarget
    except ImportError:
        return None
    return GPUTarget("cuda", arch, 32)


def pick(devices: Iterable[Device], models: set[str] | None) -> Device | None:
    """The one NVIDIA device among `devices` (the loaded entries') this machine may run, or
    None when there is none or more than one: a device must be one of `models` when the kernel
    driver lists any; a file of several devices on a machine that lists none is left to the
    first launch."""
    found = {d for d in devices if cuda_arch(d) is not None
             and (models is None or d.name in models)}
    return found.pop() if len(found) == 1 else None


def prime(target: Any) -> None:
    """Once per target and process: Triton primed for `target` (scheduler.py `prime_triton`),
    and Triton's CUDA utilities module built into the compile cache (the driver builds it when
    it starts: about 0.4 s with an empty cache)."""
    prime_triton(target)
    arch = getattr(target, "arch", 0)
    primed = process.current().made("detached", _Primed)
    if arch in primed.arches:
        return
    with primed.lock:
        if arch in primed.arches:
            return
        try:
            _nvidia_driver_module().CudaUtils()
        except Exception as e:  # noqa: BLE001 - only a head start; the launch says what fails
            log.debug("autotune_cache: building Triton's CUDA utilities for %s failed: %s",
                      target, e)
        finally:
            primed.arches.add(arch)


def _nvidia_driver_module() -> Any:
    from triton.backends.nvidia import driver

    return driver


def compile_specialization(jit_fn: Any, specialization: str, target: Any) -> Any:
    """Compile the recorded `specialization` (Triton's preload JSON) of `jit_fn` for `target`
    into Triton's compile cache (its back end in a compile process: offload.py), and build its
    launcher there; the compiled kernel. Raises what Triton raises (a record of another
    kernel, a compile error)."""
    import triton

    source, options = offload.source_of(jit_fn, specialization, target)
    offload.fill(source, target, options)
    kernel = triton.compile(source, target=target, options=options)
    build_launcher(kernel)
    return kernel


def per_signature_launchers() -> bool:
    """Whether this Triton builds a C launcher per kernel signature, from its source alone
    (3.6: `make_launcher` and `compile_module_from_src` in the NVIDIA driver module). Triton
    3.9 has one generic launcher, and its `CudaLauncher` asks the active driver for it, which
    starts the GPU driver: nothing is built ahead there."""
    try:
        module = _nvidia_driver_module()
    except Exception:  # noqa: BLE001 - no NVIDIA backend
        return False
    return hasattr(module, "make_launcher") and hasattr(module, "compile_module_from_src")


def launcher_of(specialization: str) -> str | None:
    """What the launcher of a recorded specialization is built from: its signature, as text
    in the arguments' order (equal texts, one launcher; Triton 3.6 ignores the constexprs'
    values there), or None for a record whose launcher the kernel's compile must describe
    (tensor descriptors) or that does not parse."""
    try:
        signature = json.loads(specialization)["signature"]
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(signature, dict) or "tensordesc" in json.dumps(signature):
        return None
    return json.dumps(signature)


def build_launcher_of(launcher: str) -> bool:
    """Build the launcher `launcher_of` described into the compile cache, without the kernel
    or the driver: the NVIDIA backend's own class, given the record's signature where it reads
    it from a compiled kernel, so its source and the cache entry are those a launch of that
    specialization builds (tests/triton/test_early.py compares them). Metadata it reads after
    the build get neutral values. Only where `per_signature_launchers`; whether it built (a
    failure is left to the kernel's own compile)."""
    from types import SimpleNamespace

    if not per_signature_launchers():
        return False
    try:
        signature = {key: offload.tuples(value) for key, value in json.loads(launcher).items()}
        source = SimpleNamespace(constants={}, signature=signature,
                                 fn=SimpleNamespace(arg_names=list(signature)))
        _nvidia_driver_module().CudaLauncher(source, SimpleNamespace(
            tensordesc_meta=None, num_ctas=1, global_scratch_size=0, global_scratch_align=1,
            profile_scratch_size=0, profile_scratch_align=1, launch_cooperative_grid=False,
            launch_pdl=False))
    except Exception as e:  # noqa: BLE001 - only a head start
        log.debug("autotune_cache: building a launcher ahead failed: %s", e)
        return False
    return True


def build_launcher(kernel: Any) -> None:
    """Build `kernel`'s launcher into the compile cache with the NVIDIA backend's own class,
    without the driver (only where `per_signature_launchers`); a failure is left to the first
    launch."""
    if not per_signature_launchers():
        return
    with contextlib.suppress(Exception):
        _nvidia_driver_module().CudaLauncher(kernel.src, kernel.metadata)
