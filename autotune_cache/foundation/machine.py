"""What this machine has, found without starting anything: a GPU's device node.

Whether compiling ahead can help (a compile for a GPU this machine cannot have is wasted CPU
time) is decided before the program has used the GPU, so nothing here loads a driver or asks
CUDA: the kernel driver's device node is looked for on the filesystem. Imports nothing beyond
`os`, so start-up and a process that has dropped its privileges can call it.
"""

from __future__ import annotations

import os

# NVIDIA's control node, AMD's compute node: present when the kernel driver is.
GPU_NODES = ("/dev/nvidiactl", "/dev/kfd")


def gpu_node_present(nodes: tuple[str, ...] = GPU_NODES) -> bool:
    """Whether any of `nodes` exists."""
    return any(os.path.exists(p) for p in nodes)
