"""The HTML page: one self-contained file (inline CSS, inline SVG charts, no script, no URL).

Structure, which tests/report/ checks: a header with the inputs and their devices and
toolchains; an index of the kernels (how many entries each, a link to each entry); with a
baseline, the comparison's line (as `diff` prints it), a "Changes" table of every winner that
changed (old and new config, old and new time, and how much slower the old winner is in the new
tuning) and one of the entries under a new key; then, per input, one <details> per
kernel holding one <section class="entry"> per entry, with a <dl> of its key, the chart
(<figure>, bars.py: SVG written from the data) and a table of failed candidates with their
reasons. Past LAZY_ENTRIES entries the kernels' <details> start closed, so a browser lays out
only what is opened. Entries of XLA's formats, which record only the winner, are a table.
Nothing depends on the time of generation, so the same inputs give the same bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from html import escape
from itertools import groupby

from autotune_cache.report import bars
from autotune_cache.report.model import FileReport, Report, Section
from autotune_cache.resultsets.base import REKEYED

LAZY_ENTRIES = 200  # more entries than this: each kernel's part of the page starts closed
PROGRESS_EVERY_S = 2.0  # a long page says how far it got this often

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1100px; padding: 1em;
       color: #1d1d1d; }
h1 { font-size: 1.5em; } h2 { margin-top: 2em; border-bottom: 1px solid #ccc; }
code, .mono { font-family: ui-monospace, monospace; font-size: 0.92em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 2px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td { overflow-wrap: anywhere; }
section.entry { border: 1px solid #ddd; border-radius: 6px; padding: 0.2em 1em 0.8em;
                margin: 1.2em 0; }
section.entry h3 { margin: 0.5em 0; }
dl { display: grid; grid-template-columns: max-content auto; gap: 0 1em; margin: 0.4em 0; }
dt { color: #555; } dd { margin: 0; }
figure { margin: 0.5em 0; } figure svg { max-width: 100%; height: auto; }
.winner { color: #1e7b1e; font-weight: 600; } .failed { color: #b11; }
.changed { background: #fff4d6; } .faster { color: #1e7b1e; } .slower { color: #b11; }
.note { color: #555; }
details.kernel > summary { font-weight: 600; margin: 0.6em 0; cursor: pointer; }
nav.index td { padding: 1px 6px; } nav.index a { margin-right: 0.4em; }
"""


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g} ms"


def _pct(value: float | None) -> str:
    if value is None:
        return "—"
    cls = "faster" if value < 0 else "slower" if value > 0 else ""
    return f'<span class="{cls}">{value:+.1f}%</span>'


def _counts(title: str, counts: dict) -> str:
    rows = "".join(f"<tr><td>{n}</td><td class=mono>{_e(name or '(none)')}</td></tr>"
                   for name, n in sorted(counts.items()))
    return f"<table class=counts><tr><th>entries</th><th>{_e(title)}</th></tr>{rows}</table>"


def _header(report: Report) -> str:
    parts = ["<header><h1>Autotune results</h1><table class=inputs><tr><th>input</th>"
             "<th>format</th><th>entries</th></tr>"]
    for f in report.files:
        parts.append(f"<tr><td class=mono>{_e(f.path)}</td><td>{_e(f.format_name)}</td>"
                     f"<td>{len(f.sections)}</td></tr>")
    parts.append("</table>")
    if report.baselines:
        parts.append("<p>Baseline: " + ", ".join(f"<code>{_e(b)}</code>"
                                                 for b in report.baselines) + "</p>")
    parts.append("</header>")
    return "".join(parts)


def _changes(report: Report) -> str:
    if not report.baselines:
        return ""
    changed = report.changes("winner changed")
    retimed = report.changes("re-timed")
    moved = [s for s in report.sections if s.change is not None and s.change.rekeyed]
    out = [f'<h2 id="changes">Changes against the baseline</h2><p class=summary>'
           f"{_e(report.summary)}.</p>"]
    if changed:
        out.append("<table class=winners-changed><tr><th>kernel [problem]</th><th>device</th>"
                   "<th>old winner</th><th>new winner</th><th>old time</th><th>new time</th>"
                   "<th>change</th><th>old winner now</th></tr>")
        for s in changed:
            c = s.change
            assert c is not None
            if c.old_winner_now_ms is None:
                now = "not benchmarked"
            elif c.old_winner_reused:
                now = (f"{_ms(c.old_winner_now_ms)}: the baseline's timing, reused by the "
                       "incremental re-tune, not re-measured")
            else:
                now = (f"{_ms(c.old_winner_now_ms)} ({_pct(c.old_winner_slower_percent)} vs "
                       "new, measured in the same run)")
            out.append(
                f"<tr class=changed>{_kernel_cell(s)}<td>{_e(s.row.device)}</td>"
                f"<td class=mono>{_e(c.old_config)}</td><td class=mono>{_e(s.row.config)}</td>"
                f"<td>{_ms(c.old_time_ms)}</td><td>{_ms(c.new_time_ms)}</td>"
                f"<td>{_pct(c.percent)}</td><td>{now}</td></tr>")
        out.append("</table>")
    if retimed:
        out.append("<details><summary>Re-timed (same winner)</summary><table class=retimed>"
                   "<tr><th>kernel [problem]</th><th>old</th><th>new</th><th>change</th></tr>")
        for s in retimed:
            c = s.change
            assert c is not None
            out.append(f"<tr>{_kernel_cell(s)}<td>{_ms(c.old_time_ms)}</td>"
                       f"<td>{_ms(c.new_time_ms)}</td><td>{_pct(c.percent)}</td></tr>")
        out.append("</table></details>")
    if moved:
        out.append(f"<details open><summary>{len(moved)} {_e(REKEYED)}</summary>"
                   "<table class=rekeyed><tr><th>kernel [problem]</th><th>device</th>"
                   "<th>what changed</th><th>winner</th></tr>")
        for s in moved:
            c = s.change
            assert c is not None
            out.append(f"<tr>{_kernel_cell(s)}<td>{_e(s.row.device)}</td>"
                       f"<td>{_e(_key_change(s))}</td>"
                       f"<td>{_e(c.kind)}</td></tr>")
        out.append("</table></details>")
    if report.removed:
        out.append("<details><summary>Removed (in the baseline only)</summary>"
                   "<table class=removed><tr><th>kernel [problem]</th><th>device</th>"
                   "<th>toolchain</th><th>winner</th></tr>")
        for r in report.removed:
            out.append(f"<tr><td>{_e(r.kernel)} <span class=mono>[{_e(r.problem)}]</span></td>"
                       f"<td>{_e(r.device)}</td><td class=mono>{_e(r.toolchain)}</td>"
                       f"<td class=mono>{_e(r.config)}</td></tr>")
        out.append("</table></details>")
    return "".join(out)


def _kernel_id(kernel: str) -> str:
    return "kernel-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in kernel)


def _index(report: Report) -> str:
    """The kernels of every input, each with its entry count and a link to each entry."""
    by_kernel: dict[str, list[Section]] = {}
    for f in report.files:
        for s in f.sections:
            by_kernel.setdefault(s.row.kernel, []).append(s)
    if not by_kernel:
        return ""
    rows = []
    for kernel, sections in sorted(by_kernel.items()):
        links = " ".join(f'<a href="#{s.anchor}">{_e(s.row.problem)}</a>' for s in sections)
        rows.append(f'<tr><td class=mono><a href="#{_kernel_id(kernel)}">{_e(kernel)}</a></td>'
                    f"<td>{len(sections)}</td><td class=mono>{links}</td></tr>")
    return (f'<nav class=index><h2 id="index">Kernels ({len(by_kernel)})</h2><table>'
            "<tr><th>kernel</th><th>entries</th><th>problems</th></tr>"
            + "".join(rows) + "</table></nav>")


def _kernel_cell(s: Section) -> str:
    """The table cell naming a section's kernel (a link to its section) and its problem."""
    return (f'<td><a href="#{s.anchor}">{_e(s.row.kernel)}</a> '
            f"<span class=mono>[{_e(s.row.problem)}]</span></td>")


def _key_change(s: Section) -> str:
    """What moved a matched entry to a new key, as far as the two files tell."""
    c = s.change
    assert c is not None
    parts = []
    if c.newly_timed:
        parts.append(f"{len(c.newly_timed)} newly timed candidate(s): "
                     + "; ".join(c.newly_timed))
    if c.old_toolchain and c.old_toolchain != s.row.toolchain:
        parts.append(f"toolchain {c.old_toolchain} → {s.row.toolchain}")
    return ", ".join(parts) or "candidate list or kernel source"


def _entry(s: Section, first_chart: bool = False) -> str:
    change = ""
    if s.change is not None and s.change.kind != "unchanged":
        c = s.change
        if c.kind == "winner changed":
            change = (f"<p class=changed>Winner changed: was <code>{_e(c.old_config)}</code> "
                      f"at {_ms(c.old_time_ms)}; now {_ms(c.new_time_ms)} ({_pct(c.percent)})."
                      "</p>")
        elif c.kind == "re-timed":
            change = (f"<p>Same winner, re-timed: {_ms(c.old_time_ms)} → {_ms(c.new_time_ms)} "
                      f"({_pct(c.percent)}).</p>")
        else:
            change = "<p>New: not in the baseline.</p>"
    if s.change is not None and s.change.rekeyed:
        change += f"<p>Under a new key: {_e(_key_change(s))}.</p>"
    details = [("device", s.row.device), ("toolchain", s.row.toolchain),
               ("winner", f"{s.row.config}  ({_ms(s.row.time_ms)})")]
    if s.timing_method:
        details.append(("timing", s.timing_method))
    if s.row.tuned_at:
        details.append(("tuned at", s.row.tuned_at))
    if s.tuning_seconds:
        details.append(("tuning took", f"{s.tuning_seconds:.2f} s"))
    dl = "".join(f"<dt>{_e(k)}</dt><dd class=mono>{_e(v)}</dd>" for k, v in details)
    chart = f"<figure>{bars.svg(s, define_hatch=first_chart)}</figure>" if s.charted else (
        "<p class=note>No candidate timings recorded.</p>")
    failed = ""
    if s.failed:
        rows = "".join(f"<tr><td class=mono>{_e(c.config)}</td><td class=failed>{_e(c.failure)}"
                       "</td></tr>" for c in s.failed)
        failed = (f"<table class=failures><tr><th>failed config</th><th>reason</th></tr>{rows}"
                  "</table>")
    return (f'<section class=entry id="{s.anchor}" data-kernel="{_e(s.row.kernel)}" '
            f'data-winner="{_e(s.row.config)}"><h3>{_e(s.row.kernel)} <span class=mono>'
            f"[{_e(s.row.problem)}]</span></h3>{change}<dl>{dl}</dl>{chart}{failed}</section>")


def _xla_table(f: FileReport) -> str:
    rows = []
    for s in f.sections:
        changed = s.change is not None and s.change.kind == "winner changed"
        was = (f"<br><span class=note>was {_e(s.change.old_config)}</span>"
               if changed and s.change is not None else "")
        rows.append(f'<tr id="{s.anchor}"{" class=changed" if changed else ""}>'
                    f"<td class=mono>{_e(s.row.kernel)}</td>"
                    f"<td class=mono>{_e(s.row.problem)}</td>"
                    f"<td class=mono>{_e(s.row.config)}{was}</td>"
                    f"<td>{_ms(s.row.time_ms)}</td></tr>")
    return ("<p class=note>This format records only the winning config of each fusion, not "
            "every candidate's time, so there is no chart.</p><table class=xla-entries><tr>"
            "<th>fusion</th><th>problem</th><th>winner</th><th>time</th></tr>"
            + "".join(rows) + "</table>")


def _file(f: FileReport, state: _Progress) -> str:
    out = [f'<h2 class=file>{_e(f.path)} <small>({_e(f.format_name)}, {len(f.sections)} '
           "entries)</small></h2>", '<div class="device-toolchain">',
           _counts("device", f.devices), _counts("toolchain", f.toolchains), "</div>"]
    if not f.candidate_timings:
        out.append(_xla_table(f))
        state.advance(len(f.sections))
        return "".join(out)
    opened = " open" if state.total <= LAZY_ENTRIES else ""
    for kernel, group in groupby(sorted(f.sections, key=lambda s: s.row.kernel),
                                 key=lambda s: s.row.kernel):
        sections = list(group)
        out.append(f'<details class=kernel id="{_kernel_id(kernel)}"{opened}><summary>'
                   f"{_e(kernel)} ({len(sections)} entries)</summary>")
        for s in sections:
            out.append(_entry(s, first_chart=state.take_hatch(s)))
            state.advance(1)
        out.append("</details>")
    return "".join(out)


class _Progress:
    """How far the page got (reported every PROGRESS_EVERY_S), and whether the hatch pattern
    has been defined yet (in the first chart)."""

    def __init__(self, total: int, say: Callable[[str], None] | None) -> None:
        self.total, self.done, self.say = total, 0, say
        self.started = self.last = time.monotonic()
        self.hatch_defined = False

    def take_hatch(self, section: Section) -> bool:
        if self.hatch_defined or not section.charted:
            return False
        self.hatch_defined = True
        return True

    def advance(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if self.say is not None and now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            self.say(f"report: {self.done} of {self.total} entries written "
                     f"({now - self.started:.0f} s)")


def _files(report: Report, state: _Progress) -> Iterator[str]:
    for f in report.files:
        yield _file(f, state)


def render_html(report: Report, progress: Callable[[str], None] | None = None) -> str:
    """The whole page; `progress(line)` hears how far a long one got."""
    state = _Progress(sum(len(f.sections) for f in report.files), progress)
    body = (_header(report) + _index(report) + _changes(report)
            + "".join(_files(report, state)))
    return ("<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
            "<meta name=viewport content=\"width=device-width, initial-scale=1\">"
            "<title>Autotune results</title><style>" + _CSS + bars.CSS + "</style></head><body>"
            + body + "</body></html>\n")
