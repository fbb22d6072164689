"""`--profile`: each child of a benchmark run under py-spy, for where a missed target's time went.

`py-spy record` samples every thread of the child (`--threads`), waiting ones too (`--idle`,
so a launch blocked on a compile shows as the wait it is), 100 times a second, and writes
collapsed stacks (`--format raw`: one line per distinct stack, with its sample count) that
`summarize` reads back. Sampling costs the child little, but a profiled run is for finding
where time goes, not for the reported figures. py-spy comes from PyPI (`py-spy`), on PATH or
as a wheel carried in `.whl/` (the carried files of docs/benchmarks.md's "Machines").
"""

from __future__ import annotations

import collections
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RATE_HZ = 100


def py_spy(work: Path) -> str:
    """The py-spy binary: on PATH, else installed from a carried wheel into `work`."""
    found = shutil.which("py-spy")
    if found:
        return found
    wheels = sorted((ROOT / ".whl").rglob("py_spy-*.whl"))
    if not wheels:
        raise SystemExit("--profile needs py-spy: `pip install py-spy`, or carry its wheel "
                         "in .whl/ (python3 -m pip download --no-deps py-spy -d .whl/tools)")
    target = work / "py-spy"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--target", str(target), str(wheels[-1])], check=True)
    return str(target / "bin" / "py-spy")


def wrap(binary: str, cmd: list[str], out: Path) -> list[str]:
    """`cmd` run under py-spy, its profile written to `out`."""
    return [binary, "record", "--format", "raw", "--threads", "--idle", "--rate", str(RATE_HZ),
            "--output", str(out), "--", *cmd]


def summarize(profile: Path, top: int = 25) -> list[tuple[str, float]]:
    """The `top` functions by inclusive seconds summed over threads: (frame, seconds)."""
    inclusive: collections.Counter[str] = collections.Counter()
    for line in profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        for frame in set(stack.split(";")):
            inclusive[frame] += int(count)
    return [(frame, n / RATE_HZ) for frame, n in inclusive.most_common(top)]


if __name__ == "__main__":
    for frame, seconds in summarize(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2
                                    else 25):
        print(f"{seconds:8.2f} s  {frame}")
