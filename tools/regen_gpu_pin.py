"""`--run_under` wrapper of //tools:regen_cache: runs one dump test pinned to one free GPU.

Usage (regen_cache builds this line; it is not meant to be typed):

    python regen_gpu_pin.py --lock-dir=DIR --gpus=0,1,2,3 TEST_COMMAND...
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from regen_scheduler import SchedulerError, parse_gpu_flag, run_pinned


def main(argv: list[str] | None = None) -> int:
    """Parses the options, takes a GPU slot and runs the rest of the command line on it."""
    parser = argparse.ArgumentParser(
        prog="regen_gpu_pin", description="Run a command pinned to one free GPU."
    )
    parser.add_argument("--lock-dir", type=Path, required=True, help="regen_cache's lock dir")
    parser.add_argument("--gpus", required=True, help="comma-separated GPU ids to choose from")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the test command")
    args = parser.parse_args(argv)
    try:
        gpus = parse_gpu_flag(args.gpus)
        if not gpus:
            raise SchedulerError("regen_gpu_pin: --gpus lists no GPU to pin to")
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        return run_pinned(args.lock_dir, gpus, command)
    except SchedulerError as e:
        print(f"regen_gpu_pin: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
