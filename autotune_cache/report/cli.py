"""The `report` verb of `autotune-cache`; cli.py only adds this parser."""

from __future__ import annotations

import argparse
from pathlib import Path

from autotune_cache.atomic import write_atomic
from autotune_cache.errors import AutotuneCacheError


def cmd_report(args: argparse.Namespace) -> int:
    from autotune_cache.report import charts
    from autotune_cache.report.model import build_reports, shown
    from autotune_cache.report.page import render_html

    if args.output is None and args.png is None:
        raise AutotuneCacheError("report: give -o REPORT.html, --png DIR, or both")
    report = build_reports(args.paths, args.baseline)
    if args.output is not None:
        write_atomic(args.output, render_html(report).encode("utf-8"))
        print(f"wrote {shown(args.output)}: {len(report.sections)} entries from "
              f"{len(report.files)} inputs")
    if args.png is not None:
        written = charts.png_per_kernel(report.sections, args.png)
        print(f"wrote {len(written)} charts to {shown(args.png)}"
              + ("" if written else " (no input records candidate timings)"))
    return 0


def add_report_parser(sub: argparse._SubParsersAction) -> None:
    """Add `report` to the CLI's subcommands."""
    s = sub.add_parser("report", help="HTML page (and PNG charts) of every candidate's time")
    s.add_argument("paths", nargs="+", type=Path, help="results files or cache directories")
    s.add_argument("-o", "--output", type=Path, help="write the self-contained HTML page here")
    s.add_argument("--baseline", action="append", type=Path, default=[], metavar="OLD",
                   help="compare with OLD (repeatable): which winners changed and by how much")
    s.add_argument("--png", type=Path, metavar="DIR", help="write one PNG chart per kernel")
    s.set_defaults(func=cmd_report)
