"""The `report` verb of `autotune-cache`; cli.py only adds this parser."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from autotune_cache.errors import AutotuneCacheError
from autotune_cache.foundation.atomic import write_atomic

if TYPE_CHECKING:
    from autotune_cache.foundation.verbs import AddVerb, Out


def cmd_report(args: argparse.Namespace, out: Out) -> int:
    from autotune_cache.report import charts
    from autotune_cache.report.model import build_reports, shown
    from autotune_cache.report.page import render_html

    if args.output is None and args.png is None:
        raise AutotuneCacheError("report: give -o REPORT.html, --png DIR, or both")
    report = build_reports(args.paths, args.baseline)
    if args.output is not None:
        write_atomic(args.output, render_html(report, progress=out.note).encode("utf-8"))
        out.set(html=str(args.output))
        out.line(f"wrote {shown(args.output)}: {len(report.sections)} entries from "
                 f"{len(report.files)} inputs")
    if args.png is not None:
        written = charts.png_per_kernel(report.sections, args.png)
        out.set(png=[str(w) for w in written])
        out.line(f"wrote {len(written)} charts to {shown(args.png)}"
                 + ("" if written else " (no input records candidate timings)"))
    out.set(entries=len(report.sections), inputs=len(report.files))
    if report.baselines:  # the line `diff` prints on the same pair
        out.set(comparison=report.summary)
    return 0


def add_report_parser(sub: argparse._SubParsersAction, add_verb: AddVerb) -> None:
    """Add `report` to the CLI's subcommands (with cli.add_verb, which gives every verb its
    example and --json)."""
    s = add_verb(sub, "report", cmd_report, "HTML page (and PNG charts) of every candidate's time",
                 "autotune-cache report kernels/*.autotune.textproto -o report.html "
                 "--baseline old.textproto")
    s.add_argument("paths", nargs="+", type=Path, help="results files or cache directories")
    s.add_argument("-o", "--output", type=Path, help="write the self-contained HTML page here")
    s.add_argument("--baseline", action="append", type=Path, default=[], metavar="OLD",
                   help="compare with OLD (repeatable): which winners changed and by how much")
    s.add_argument("--png", type=Path, metavar="DIR", help="write one PNG chart per kernel")
