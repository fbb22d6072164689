"""Where the Triton examples run: a CUDA GPU when there is one, else Triton's CPU interpreter.

Import this before any kernel is decorated: it sets TRITON_INTERPRET=1 when no GPU is present
(Triton reads the variable when `@triton.jit` runs), and picks the torch device and problem
sizes to match.
"""

from __future__ import annotations

import os

import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

INTERPRET: bool = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
DEVICE: str = "cpu" if INTERPRET else "cuda"


def seeded(seed: int = 0) -> torch.Generator:
    """A torch generator on the example device, so inputs are the same on every run."""
    return torch.Generator(device=DEVICE).manual_seed(seed)


def this_shard(items: list) -> list:
    """The items this Bazel test shard should check (all of them outside a sharded test).

    Honours TEST_TOTAL_SHARDS / TEST_SHARD_INDEX and touches TEST_SHARD_STATUS_FILE, which tells
    Bazel the test supports sharding."""
    total = int(os.environ.get("TEST_TOTAL_SHARDS", "1") or 1)
    index = int(os.environ.get("TEST_SHARD_INDEX", "0") or 0)
    status = os.environ.get("TEST_SHARD_STATUS_FILE")
    if status:
        with open(status, "a"):
            pass
    return [item for i, item in enumerate(items) if i % total == index]
