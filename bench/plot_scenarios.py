"""Plot bench/gpu_perf.py's scenario times, ours against Triton's, as one PNG.

    python bench/plot_scenarios.py RESULTS.json OUT.png

One horizontal bar per run (time inside the process, log scale), grouped by scenario, ours in
one colour and Triton's (and the winners-only floor) in another, each labelled with its
seconds; E (µs per launch) is a second panel.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

BARS = (  # (label, key in raw, ours?)
    ("C  Triton cold", "triton_cold", False),
    ("C  ours cold", "ours_cold", True),
    ("A  winners only (floor)", "winners_only", False),
    ("A  ours, results loaded", "ours_loaded", True),
    ("A2 ours, + shared compile cache", "ours_shared", True),
    ("B  Triton, both caches warm", "triton_warm", False),
    ("B  ours, both caches warm", "ours_warm", True),
)
OURS, THEIRS = "#1f77b4", "#ff7f0e"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
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


if __name__ == "__main__":
    sys.exit(main())
