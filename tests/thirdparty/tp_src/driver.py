"""A plain `python driver.py` process: two of tp_kernels' kernels here, two in a subprocess it
starts; each process prints one JSON line (its cache stats, whether its kernels are ours)."""

from __future__ import annotations

import json
import subprocess
import sys

import torch
import tp_kernels
from tp_kernels import ops


def main() -> None:
    child = sys.argv[1:] == ["child"]
    x = torch.arange(100, dtype=torch.float32)
    if child:
        torch.testing.assert_close(tp_kernels.square(x), x * x)
        torch.testing.assert_close(tp_kernels.negate(x), -x)
        kernels = [ops.square_kernel, ops.negate_kernel]
    else:
        torch.testing.assert_close(tp_kernels.scale(x), x * 2)
        torch.testing.assert_close(tp_kernels.add(x, x), x + x)
        kernels = [ops.scale_kernel, ops.add_kernel]
    from autotune_cache import get_cache  # only now: the library was imported first
    from autotune_cache.triton import Autotuner

    print(json.dumps({"process": "child" if child else "parent",
                      "ours": [isinstance(k, Autotuner) for k in kernels],
                      "stats": get_cache().stats.as_dict()}), flush=True)
    if not child:
        subprocess.run([sys.executable, __file__, "child"], check=True)


if __name__ == "__main__":
    main()
