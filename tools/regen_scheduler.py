"""One dump job per GPU: GPU discovery and the per-GPU slot lock used by //tools:regen_cache.

regen_cache runs every `.dump` target in one `bazel test` with `--local_test_jobs=<GPUs>` and
`--run_under=<python> regen_gpu_pin.py --lock-dir=D --gpus=0,1,...`. Each dump process starts
inside the pin wrapper, which takes the first free per-GPU lock (flock on `D/gpu-<id>.lock`),
sets `CUDA_VISIBLE_DEVICES` to that one GPU and runs the test. The lock is held until the test
exits, so two jobs never share a GPU, and Bazel's job limit keeps every GPU busy.

Standard library only: it runs inside `bazel run` and inside test sandboxes.
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

_NVIDIA_SMI_LINE = re.compile(r"^GPU (\d+):", re.MULTILINE)


class SchedulerError(Exception):
    """A GPU list or lock directory that cannot be used; the message says what to fix."""


def parse_visible_devices(value: str) -> list[str]:
    """Splits a CUDA_VISIBLE_DEVICES value into device ids (indices, GPU-/MIG- UUIDs).

    CUDA stops at the first invalid entry (e.g. "-1"), so we do too.
    """
    devices: list[str] = []
    for raw in value.split(","):
        item = raw.strip()
        if not item or item.startswith("-"):
            break
        devices.append(item)
    return devices


def run_nvidia_smi() -> str | None:
    """Returns `nvidia-smi -L` output, or None when nvidia-smi is missing or fails."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def detect_gpus(
    env: Mapping[str, str], nvidia_smi: Callable[[], str | None] = run_nvidia_smi
) -> list[str]:
    """Returns the GPU ids dump jobs may use; [] means no GPU (one CPU job).

    A set CUDA_VISIBLE_DEVICES wins (its ids are what the jobs get); otherwise the GPUs that
    `nvidia-smi -L` lists, by index.
    """
    if "CUDA_VISIBLE_DEVICES" in env:
        return parse_visible_devices(env["CUDA_VISIBLE_DEVICES"])
    listing = nvidia_smi()
    if not listing:
        return []
    return _NVIDIA_SMI_LINE.findall(listing)


def parse_gpu_flag(value: str) -> list[str]:
    """Parses regen_cache's `--gpus=` value: explicit ids ("0,1,3") or "none" (one CPU job)."""
    if value.strip().lower() in ("none", "cpu", ""):
        return []
    devices = parse_visible_devices(value)
    if not devices or len(set(devices)) != len(devices):
        raise SchedulerError(
            f"--gpus={value!r}: give distinct comma-separated GPU ids (e.g. --gpus=0,1), "
            "or --gpus=none for one CPU job."
        )
    return devices


@dataclass(frozen=True)
class Plan:
    """How regen_cache runs the dumps: job count and the extra `bazel test` flags."""

    gpus: tuple[str, ...]
    jobs: int
    bazel_flags: tuple[str, ...]
    # The user's flags that hand the scheduling to Bazel (remote execution, --jobs).
    delegated_to: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for the progress output."""
        if self.delegated_to:
            return (f"Bazel schedules the dumps ({' '.join(self.delegated_to)}): no local GPU "
                    "pinning")
        if not self.gpus:
            return "no GPU found: 1 dump job at a time, not pinned"
        return (
            f"{len(self.gpus)} GPU(s) [{','.join(self.gpus)}]: {self.jobs} dump job(s) at a time, "
            "each pinned with CUDA_VISIBLE_DEVICES"
        )


def lock_path(lock_dir: Path, gpu: str) -> Path:
    """The lock file of one GPU (ids may be UUIDs, so keep only safe characters)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", gpu)
    return lock_dir / f"gpu-{safe}.lock"


# `bazel test` flags that mean "Bazel decides where and how many dumps run": with any of them,
# regen_cache does not pin local GPUs (a remote-execution pool runs the dumps on its own GPUs).
DELEGATING_FLAGS = ("--remote_executor", "--jobs", "-j")


def delegating_flags(bazel_flags: Sequence[str]) -> tuple[str, ...]:
    """The user's --bazel_flag values that hand the dump scheduling to Bazel."""
    return tuple(
        flag for flag in bazel_flags
        if flag.split("=", 1)[0] in DELEGATING_FLAGS and not flag.endswith("=")
    )


def delegated_plan(flags: Sequence[str]) -> Plan:
    """The plan when the user's flags hand scheduling to Bazel: no --run_under pinning and no
    --local_test_jobs cap; the dumps' exec_properties pick the remote pool."""
    return Plan(gpus=(), jobs=0, bazel_flags=(), delegated_to=tuple(flags))


def make_plan(gpus: Sequence[str], lock_dir: Path, python: str, pin_script: Path) -> Plan:
    """Builds the plan for `gpus`, creating the lock files the pin wrapper will take.

    The lock files are made here, outside any sandbox; the wrapper only opens them read-only,
    which flock allows, so it also works when the test sandbox mounts /tmp read-only.
    """
    if not gpus:
        return Plan(gpus=(), jobs=1, bazel_flags=("--local_test_jobs=1",))
    for path in (python, str(lock_dir), str(pin_script)):
        if any(c.isspace() for c in path):
            raise SchedulerError(
                f"{path!r} contains whitespace, which Bazel's --run_under cannot carry; "
                "move the workspace, interpreter or TMPDIR to a path without spaces."
            )
    lock_dir.mkdir(parents=True, exist_ok=True)
    for gpu in gpus:
        lock_path(lock_dir, gpu).touch()
    run_under = " ".join(
        [python, str(pin_script), f"--lock-dir={lock_dir}", f"--gpus={','.join(gpus)}"]
    )
    return Plan(
        gpus=tuple(gpus),
        jobs=len(gpus),
        bazel_flags=(f"--local_test_jobs={len(gpus)}", f"--run_under={run_under}"),
    )


@contextmanager
def gpu_slot(
    lock_dir: Path, gpus: Sequence[str], poll_seconds: float = 0.1, wait_note_seconds: float = 60
) -> Iterator[str]:
    """Holds the first free GPU's lock for the duration of the block; yields its id.

    Blocks (polling) while every GPU is taken, printing a note now and then so a stuck
    regen is visible in the test log.
    """
    if not gpus:
        raise SchedulerError("gpu_slot: no GPUs given (pass --gpus=0,1,...)")
    started = time.monotonic()
    next_note = started + wait_note_seconds
    while True:
        for gpu in gpus:
            path = lock_path(lock_dir, gpu)
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                raise SchedulerError(
                    f"GPU lock file {path} is missing; regen_cache creates it. Run the dumps "
                    "through bazel run //tools:regen_cache, not by hand."
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield gpu
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            return
        now = time.monotonic()
        if now >= next_note:
            print(
                f"regen_cache: waiting {now - started:.0f} s for a free GPU among "
                f"{','.join(gpus)}",
                file=sys.stderr,
                flush=True,
            )
            next_note = now + wait_note_seconds
        time.sleep(poll_seconds)


def run_pinned(lock_dir: Path, gpus: Sequence[str], command: Sequence[str]) -> int:
    """Runs `command` with CUDA_VISIBLE_DEVICES set to one free GPU; returns its exit code."""
    if not command:
        raise SchedulerError("regen_gpu_pin: no command to run after the options")
    with gpu_slot(lock_dir, gpus) as gpu:
        env = dict(os.environ)
        env["CUDA_VISIBLE_DEVICES"] = gpu
        print(
            f"regen_cache: {shlex.join(command[:1])}... pinned to CUDA_VISIBLE_DEVICES={gpu}",
            file=sys.stderr,
            flush=True,
        )
        return subprocess.run(list(command), env=env, check=False).returncode
