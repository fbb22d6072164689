"""The page's candidate-time charts: a small SVG per entry, written from the data.

One horizontal bar per candidate, fastest on top, the winner green and labelled, the
baseline's winner (when it lost) hatched, then the candidates whose time is not a time (a
damaged entry) and the failed ones as text rows with their reason: the same picture as the
matplotlib chart of `--png` (charts.py), at a fraction of its cost: a few hundred bytes of SVG
a candidate, with its text kept as text (small, searchable, selectable); why the page does not
use matplotlib: docs/decisions/0027-report-charts-from-data.md. Output is deterministic (no
ids, no dates, fixed number formats).
"""

from __future__ import annotations

import math
from html import escape

from autotune_cache.report.model import Candidate, Section

WINNER = "#2ca02c"
OTHER = "#7f9fc4"
FAILED = "#d62728"
ROW = 16  # px per candidate
LABEL = 300  # px of the config labels, left of the bars
BARS = 300  # px of the longest bar
NOTE = 200  # px right of the bars for the time and ratio
MAX_LABEL = 48  # characters of a config label
_MAX_PLOTTED_MS = 1e12  # as charts.py: a damaged or forged time is listed, never drawn

# The bars' look, in the page's <style>.
CSS = (f"svg.bars text {{ font: 11px ui-monospace, monospace; }} svg.bars .c {{ text-anchor: "
       f"end; }} svg.bars rect {{ stroke: #333; stroke-width: 0.4; }} svg.bars .w {{ fill: "
       f"{WINNER}; }} svg.bars .o {{ fill: {OTHER}; }} svg.bars .h {{ fill: url(#hatch); "
       f"fill-opacity: 0.5; }} svg.bars .f {{ fill: {FAILED}; }} svg.bars .axis {{ fill: #555; }}")

# The hatch of the baseline's winner: one pattern, defined in the page's first chart.
HATCH = ('<pattern id="hatch" width="4" height="4" patternUnits="userSpaceOnUse" '
         'patternTransform="rotate(45)"><rect width="2" height="4" fill="#555"/></pattern>')


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _short(text: str, limit: int = MAX_LABEL) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plottable(time_ms: float | None) -> bool:
    """Whether a chart can place this time: a damaged or forged entry may hold NaN,
    infinities, negative or astronomically large times, which are listed as text instead."""
    return time_ms is not None and math.isfinite(time_ms) and 0 <= time_ms <= _MAX_PLOTTED_MS


def rows_of(section: Section) -> tuple[list[Candidate], list[Candidate], list[Candidate]]:
    """A chart's rows, top to bottom, for both drawings (this one and charts.py's): the
    timed candidates fastest first, those whose time is not a time, the failed ones."""
    ok = sorted((c for c in section.candidates if not c.failure and plottable(c.time_ms)),
                key=lambda c: c.time_ms or 0.0)
    odd = [c for c in section.candidates if not c.failure and c.time_ms is not None
           and not plottable(c.time_ms)]
    return ok, odd, [c for c in section.candidates if c.failure]


def bar_note(c: Candidate, best: float) -> str:
    """The text beside a candidate's bar: its time, its ratio to the best, and its role."""
    note = f"{c.time_ms:.4g} ms"
    if best:
        note += f"  {(c.time_ms or 0.0) / best:.2f}×"
    if c.winner:
        note += "  winner"
    elif c.baseline_winner:
        note += "  baseline winner"
    return note


def svg(section: Section, *, define_hatch: bool = False) -> str:
    """The chart of one entry as an inline <svg> element (`define_hatch`: carry the hatch
    pattern's definition; the page gives it to its first chart, the others refer to it)."""
    ok, odd, failed = rows_of(section)
    rows = len(ok) + len(odd) + len(failed)
    width, height = LABEL + BARS + NOTE, ROW * rows + 22
    top = max((c.time_ms or 0.0 for c in ok), default=0.0)
    best = min((c.time_ms or 0.0 for c in ok), default=0.0)
    method = f", {section.timing_method}" if section.timing_method else ""
    title = f"{section.row.kernel} [{section.row.problem}]: time per launch (ms{method})"
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class=bars width="{width}" '
           f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="{_e(title)}"><title>{_e(title)}</title>']
    if define_hatch:
        out.append(f"<defs>{HATCH}</defs>")
    for i, c in enumerate(ok):
        out.append(_bar(i, c, top, best))
    for i, c in enumerate(odd, start=len(ok)):
        out.append(_text_row(i, c.config, f"time {c.time_ms!r} ms: not a time a benchmark "
                             "measures (damaged entry?)"))
    for i, c in enumerate(failed, start=len(ok) + len(odd)):
        out.append(_text_row(i, c.config, f"failed: {_short(c.failure or '', 90)}"))
    out.append(f'<text x="{LABEL}" y="{height - 6}" class=axis>time per launch '
               f"(ms{_e(method)}), longest bar {top:.4g} ms</text></svg>")
    return "".join(out)


def _bar(i: int, c: Candidate, top: float, best: float) -> str:
    y = ROW * i
    length = BARS * (c.time_ms or 0.0) / top if top > 0 else 0.0
    fill = WINNER if c.winner else OTHER
    note = bar_note(c, best)
    hatch = (f'<rect x="{LABEL}" y="{y + 2}" width="{length:.1f}" height="{ROW - 4}" '
             'class=h />' if c.baseline_winner else "")
    # Colours, strokes and anchors come from the page's CSS (CSS below): a few hundred bytes
    # a bar, so that 2,000 entries stay a page of a few MB.
    return (f'<text x="{LABEL - 6}" y="{y + ROW - 4}" class=c>{_e(_short(c.config))}</text>'
            f'<rect x="{LABEL}" y="{y + 2}" width="{length:.1f}" height="{ROW - 4}" '
            f'class={"w" if fill == WINNER else "o"} />{hatch}'
            f'<text x="{LABEL + length + 4:.1f}" y="{y + ROW - 4}" class=n>{_e(note)}</text>')


def _text_row(i: int, config: str, text: str) -> str:
    y = ROW * i + ROW - 4
    return (f'<text x="{LABEL - 6}" y="{y}" class="c f">{_e(_short(config))}</text>'
            f'<text x="{LABEL}" y="{y}" class="n f">{_e(text)}</text>')
