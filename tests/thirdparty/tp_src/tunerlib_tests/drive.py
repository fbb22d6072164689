"""A plain script using tunerlib; DRIVE_ORDER=library-first imports it before autotune_cache,
DRIVE_ORDER=package-first after it."""

import importlib
import os

import torch

order = os.environ.get("DRIVE_ORDER", "")
if order == "package-first":
    importlib.import_module("autotune_cache")
tunerlib = importlib.import_module("tunerlib")
if order == "library-first":
    importlib.import_module("autotune_cache")

x = torch.arange(200, dtype=torch.float32)
assert torch.equal(tunerlib.rownorm(x), x / 2)
assert torch.equal(tunerlib.shift(x), x + 1)
print("drive: ok")
