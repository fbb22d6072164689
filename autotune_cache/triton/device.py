"""Which device and toolchain a Triton kernel is being tuned for: the device part of the key."""

from __future__ import annotations

import functools
import re

from autotune_cache.foundation import env
from autotune_cache.foundation.key import Device

# The device key of results measured under TRITON_INTERPRET=1 (numpy on the CPU).
INTERPRETER_DEVICE = Device(name="cpu-interpreter", arch="interpreter", sm_count=0)


def interpreter_active() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    try:
        from triton import knobs

        return bool(knobs.runtime.interpret)
    except (ImportError, AttributeError):  # older Triton without knobs
        return env.triton_interpret()


@functools.cache
def _cuda_device(index: int) -> Device:
    import torch

    props = torch.cuda.get_device_properties(index)
    if getattr(torch.version, "hip", None):
        arch = str(getattr(props, "gcnArchName", f"gfx{props.major}{props.minor}")).split(":")[0]
    else:
        arch = f"sm_{props.major}{props.minor}"
    return Device(name=props.name, arch=arch, sm_count=int(props.multi_processor_count))


def current_device() -> Device:
    """The device the next launch runs on: the interpreter, or the current CUDA/HIP device."""
    if interpreter_active():
        return INTERPRETER_DEVICE
    import torch

    return _cuda_device(torch.cuda.current_device())


def device_identity() -> str:
    """A machine-local identity of the current physical device (UUID when known), used to name
    the device-wide benchmarking lock."""
    if interpreter_active():
        return "cpu-interpreter"
    import torch

    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    ident = str(uuid) if uuid else f"{props.name}-{getattr(props, 'pci_bus_id', index)}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", ident)


@functools.cache
def _ptxas_version(arch: int) -> str | None:
    """The version of the ptxas Triton compiles with (e.g. '12.8.93'), or None if unknown."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas_version

        text = get_ptxas_version(arch)
    except Exception:  # no NVIDIA backend, or ptxas missing: leave it out of the key
        return None
    match = re.search(r"V(\d+(?:\.\d+)+)", text) or re.search(r"release (\d+(?:\.\d+)+)", text)
    return match.group(1) if match else None


def cuda_arch(device: Device) -> int | None:
    """The compute capability of an NVIDIA device as Triton numbers it (`sm_90` is 90), else
    None (the interpreter, another backend)."""
    match = re.fullmatch(r"sm_(\d+)", device.arch)
    return int(match.group(1)) if match else None


def toolchain(device: Device) -> dict[str, str]:
    """Toolchain versions that decide whether a tuned result still holds: Triton's version, plus
    the ptxas version when compiling for an NVIDIA GPU (it changes the generated code)."""
    import triton

    versions = {"triton": triton.__version__}
    arch = cuda_arch(device)
    if arch is not None:
        ptxas = _ptxas_version(arch)
        if ptxas:
            versions["ptxas"] = ptxas
    return versions
