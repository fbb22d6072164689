"""Plot bench/suite_perf.py's passes, one panel per library suite, as one PNG.

    python bench/plot_suite.py OUT.png RESULTS.json [RESULTS.json ...]

One horizontal bar per pass (process wall time, seconds), plain Triton's passes in one colour
and ours in another, each labelled with its seconds and its ratio to P or W; passes that did
not run are left out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ORDER = ("P", "W", "S-cold", "S-load", "S-fill", "S-shared")
OURS, THEIRS = "#1f77b4", "#ff7f0e"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("results", type=Path, nargs="+")
    args = parser.parse_args()
    suites = [json.loads(p.read_text()) for p in args.results]
    fig, axes = plt.subplots(len(suites), 1, figsize=(8, 2.2 * len(suites) + 0.6), squeeze=False)
    for ax, suite in zip(axes[:, 0], suites, strict=True):
        totals = suite["totals"]
        names = [n for n in ORDER if "wall_s" in totals.get(n, {})]
        walls = [totals[n]["wall_s"] for n in names]
        colours = [THEIRS if n in ("P", "W") else OURS for n in names]
        ax.barh(range(len(names)), walls, color=colours)
        ax.set_yticks(range(len(names)), names)
        ax.invert_yaxis()
        for i, (name, wall) in enumerate(zip(names, walls, strict=True)):
            ratio = suite.get("ratios", {}).get(name)
            label = f"{wall:.1f} s" + (f"  ({ratio['ratio']:.2f}x {ratio['vs']})" if ratio else "")
            ax.text(wall, i, " " + label, va="center", fontsize=8)
        ax.set_xlim(0, max(walls) * 1.45)
        ax.set_title(f"{suite['library']}: {sum(totals['P']['outcomes'].values())} tests",
                     fontsize=9)
        ax.set_xlabel("process wall time, s (orange: plain Triton, blue: ours)", fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
