"""Plot the benchmarks' results as PNGs.

    python bench/plot.py scenarios RESULTS.json OUT.png
    python bench/plot.py suite OUT.png RESULTS.json [RESULTS.json ...]

`scenarios`: bench/gpu_perf.py's runs, one horizontal bar each (time inside the process, log
scale), grouped by scenario, ours in one colour and Triton's (and the winners-only floor) in
another, each labelled with its seconds; E (µs per launch) is a second panel.

`suite`: bench/suite_perf.py's passes, one panel per library suite, one bar per pass (process
wall time), plain Triton's passes in one colour and ours in another, each labelled with its
seconds and its ratio to P or W; passes that did not run are left out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

OURS, THEIRS = "#1f77b4", "#ff7f0e"
BARS = (  # (label, key in raw, ours?)
    ("C  Triton cold", "triton_cold", False),
    ("C  ours cold", "ours_cold", True),
    ("A  winners only (floor)", "winners_only", False),
    ("A  ours, results loaded", "ours_loaded", True),
    ("A2 ours, + shared compile cache", "ours_shared", True),
    ("B  Triton, both caches warm", "triton_warm", False),
    ("B  ours, both caches warm", "ours_warm", True),
)
ORDER = ("P", "W", "S-cold", "S-load", "S-fill", "S-shared", "S-regen")

def scenarios(args: argparse.Namespace) -> int:
    """bench/gpu_perf.py's scenario times, ours against Triton's."""
    result = json.loads(args.results.read_text())
    raw = result["raw"]
    bars = [(label, raw[key]["workload_s"], ours) for label, key, ours in BARS
            if key in raw and "error" not in raw[key] and raw[key].get("workload_s")]
    launch = raw.get("launch", {}).get("us_per_launch", {})
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2),
                                      gridspec_kw={"width_ratios": [3, 1.3]})
    labels = [b[0] for b in bars][::-1]
    values = [b[1] for b in bars][::-1]
    colours = [OURS if b[2] else THEIRS for b in bars][::-1]
    left.barh(labels, values, color=colours)
    left.set_xscale("log")
    left.set_xlabel("seconds inside the process (log scale)")
    for y, v in enumerate(values):
        left.text(v * 1.05, y, f"{v:.2f} s", va="center", fontsize=8)
    left.set_xlim(right=max(values) * 4 if values else 1)
    names = [n for n in ("plain_jit", "triton_autotune", "ours") if n in launch]
    pretty = {"plain_jit": "plain\n@triton.jit", "triton_autotune": "triton.\nautotune",
              "ours": "ours"}
    right.bar([pretty[n] for n in names], [launch[n] for n in names],
              color=[THEIRS if n != "ours" else OURS for n in names])
    right.set_ylabel("µs per launch")
    right.set_title("E  hit path, 1024-element add", fontsize=9)
    for x, n in enumerate(names):
        right.text(x, launch[n], f"{launch[n]:.1f}", ha="center", va="bottom", fontsize=8)
    env = result.get("env", {})
    fig.suptitle(f"48-config fp16 matmul, 3 shapes: ours (blue) vs Triton (orange) — "
                 f"{env.get('gpu', '')}", fontsize=9)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    return 0


def _first_ratio(suite: dict, name: str) -> dict | None:
    """The first target ratio of pass `name` (keyed by pass in results written before S-regen
    had two targets, by "PASS vs BASE" since)."""
    for key, ratio in suite.get("ratios", {}).items():
        if ratio.get("pass", key) == name:
            return ratio
    return None


def suite(args: argparse.Namespace) -> int:
    """bench/suite_perf.py's passes, one panel per library suite."""
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
            ratio = _first_ratio(suite, name)
            label = f"{wall:.1f} s" + (f"  ({ratio['ratio']:.2f}x {ratio['vs']})" if ratio else "")
            ax.text(wall, i, " " + label, va="center", fontsize=8)
        ax.set_xlim(0, max(walls) * 1.45)
        ax.set_title(f"{suite['library']}: {sum(totals['P']['outcomes'].values())} tests, "
                     f"{suite.get('meta', {}).get('when', '')}", fontsize=9)
        ax.set_xlabel("process wall time, s (orange: plain Triton, blue: ours)", fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    one = verbs.add_parser("scenarios", help="bench/gpu_perf.py's scenarios")
    one.add_argument("results", type=Path)
    one.add_argument("out", type=Path)
    one.set_defaults(func=scenarios)
    many = verbs.add_parser("suite", help="bench/suite_perf.py's passes")
    many.add_argument("out", type=Path)
    many.add_argument("results", type=Path, nargs="+")
    many.set_defaults(func=suite)
    args = parser.parse_args()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
