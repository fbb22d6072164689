"""The `--png` charts, drawn by matplotlib (nothing is drawn by hand).

One horizontal bar per candidate, fastest on top, the winner in green and labelled, the
baseline's winner (when it lost) hatched, failed candidates as bar-less rows at the bottom with
their reason; one PNG per kernel, an axes per entry. The HTML page draws the same picture as
SVG written from the data (bars.py): a matplotlib figure per entry cost 270 s for 2,000 entries.
Output is deterministic: a fixed SVG hash salt and no date metadata.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

from autotune_cache.errors import AutotuneCacheError
from autotune_cache.report.bars import FAILED, OTHER, WINNER, bar_note, rows_of
from autotune_cache.report.model import Section

# Names are data, never math: `$` in a kernel or problem name is drawn as a dollar sign.
_RC = {"svg.hashsalt": "autotune-cache-report", "svg.fonttype": "none", "font.size": 8,
       "axes.titlesize": 9, "text.parse_math": False}
_ROW_INCHES = 0.24
_MAX_LABEL = 70


def _matplotlib():  # noqa: ANN202 - the module
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError as e:
        raise AutotuneCacheError(
            "autotune-cache report draws its charts with matplotlib, which is not installed: "
            "pip install 'matplotlib>=3.8' (what the package's [report] extra adds)"
        ) from e
    return matplotlib, Figure


def _short(text: str, limit: int = _MAX_LABEL) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@contextlib.contextmanager
def _quiet_glyphs() -> Iterator[None]:
    """Names are drawn as given: a character the font lacks shows as a box, and a name too
    long for the layout is cut at the edge, without a warning on the user's terminal."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from font")
        warnings.filterwarnings("ignore", message="constrained_layout not applied")
        yield


def _rows(section: Section) -> int:
    return max(1, len(section.candidates))


def draw(ax: object, section: Section, title: str | None = None) -> None:
    """Draw `section`'s candidates on the matplotlib axes `ax`."""
    ok, odd, failed = rows_of(section)
    labels = [_short(c.config) for c in (*ok, *odd, *failed)]
    y = list(range(len(labels)))
    times = [c.time_ms for c in ok]
    colors = [WINNER if c.winner else OTHER for c in ok]
    bars = ax.barh(y[: len(ok)], times, color=colors, edgecolor="#333333", linewidth=0.4)
    best = min(times) if times else 0.0
    for bar, cand in zip(bars, ok, strict=True):
        if cand.baseline_winner:
            bar.set_hatch("///")
        note = " " + bar_note(cand, best)
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, note, va="center",
                fontsize=7, color="#111111")
    for i, cand in enumerate(odd, start=len(ok)):
        ax.text(0, i, f" time {cand.time_ms!r} ms: not a time a benchmark measures (damaged "
                "entry?)", va="center", fontsize=7, color=FAILED)
    for i, cand in enumerate(failed, start=len(ok) + len(odd)):
        ax.text(0, i, f" failed: {_short(cand.failure, 90)}", va="center", fontsize=7,
                color=FAILED)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontfamily="monospace")
    for tick, label_index in zip(ax.get_yticklabels(), y, strict=True):
        if label_index >= len(ok):
            tick.set_color(FAILED)
    ax.set_ylim(len(labels) - 0.5, -0.5)  # fastest on top, no empty rows
    top = max(times) if times else 0.0
    ax.set_xlim(0, top * 1.35 if top > 0 else 1.0)
    method = f", {section.timing_method}" if section.timing_method else ""
    ax.set_xlabel(f"time per launch (ms{method})")
    ax.set_title(title or f"{section.row.kernel} [{section.row.problem}]", loc="left")
    ax.grid(axis="x", linewidth=0.3, alpha=0.6)
    ax.set_axisbelow(True)


def png_per_kernel(sections: Sequence[Section], directory: Path) -> list[Path]:
    """One PNG per kernel (an axes per problem, device and toolchain) in `directory`."""
    matplotlib, figure = _matplotlib()
    directory.mkdir(parents=True, exist_ok=True)
    by_kernel: dict[str, list[Section]] = {}
    for s in sections:
        if s.charted:
            by_kernel.setdefault(s.row.kernel, []).append(s)
    written = []
    for kernel, group in sorted(by_kernel.items()):
        heights = [0.9 + _ROW_INCHES * _rows(s) for s in group]
        with matplotlib.rc_context(_RC), _quiet_glyphs():
            fig = figure(figsize=(9.5, sum(heights)), layout="constrained")
            axes = fig.subplots(len(group), 1, squeeze=False,
                                gridspec_kw={"height_ratios": heights})[:, 0]
            for ax, s in zip(axes, group, strict=True):
                draw(ax, s, f"{s.row.kernel} [{s.row.problem}]\n{s.row.device}  {s.row.toolchain}")
            name = _file_name(kernel)
            while directory / f"{name}.png" in written:  # two names that sanitise alike
                name += "_"
            path = directory / f"{name}.png"
            fig.savefig(path, format="png", dpi=110, metadata={"Software": None})
        written.append(path)
    return written


def _file_name(kernel: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in kernel) or "kernel"
