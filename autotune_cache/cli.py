"""The `autotune-cache` command line: inspect, convert, merge, diff, prune and verify caches."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from autotune_cache import __version__
from autotune_cache.errors import AutotuneCacheError
from autotune_cache.formats import RESULTS_EXTENSIONS, TEXT_EXTENSIONS
from autotune_cache.resultsets.base import (
    CONFLICT_POLICIES,
    apply_prune,
    diff_rows,
    is_directory_path,
    merge_sets,
    prune_plan,
    superseded_ids,
)
from autotune_cache.resultsets.registry import load_any


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
    return "\n".join(line.rstrip() for line in lines)


def _fmt_time(t: float | None) -> str:
    return "-" if t is None else f"{t:.4g}"


def cmd_inspect(args: argparse.Namespace) -> int:
    report = []
    for path in args.paths:
        rs = load_any(path)
        rows = rs.rows()
        old = superseded_ids(rows)
        by_device = Counter(r.device for r in rows)
        by_toolchain = Counter(r.toolchain for r in rows)
        report.append((path, rs, rows, by_device, by_toolchain, old))
    if args.json:
        out = [{
            "path": str(path), "format": rs.format_name,
            "entries": [{**{k: v for k, v in r.__dict__.items() if k != "payload"},
                         "live": r.id not in old} for r in rows],
            "per_device": dict(by_device), "per_toolchain": dict(by_toolchain),
            "problems": rs.problems(),
        } for path, rs, rows, by_device, by_toolchain, old in report]
        print(json.dumps(out, indent=2, sort_keys=True))
        return 1 if any(rs.problems() for _, rs, *_ in report) else 0
    for path, rs, rows, by_device, by_toolchain, old in report:
        print(f"{path} ({rs.format_name}): {len(rows)} entries")
        if rows:
            table = [["KERNEL", "PROBLEM", "DEVICE", "TOOLCHAIN", "CONFIG", "TIME_MS", "LIVE"]]
            table += [[r.kernel, r.problem, r.device, r.toolchain, r.config, _fmt_time(r.time_ms),
                       "superseded" if r.id in old else "live"] for r in rows]
            print(_table(table))
        if old:
            print(f"{len(old)} entries are superseded by newer ones for the same kernel, problem, "
                  f"device and toolchain; drop them with: autotune-cache prune --superseded "
                  f"{path}")
        for title, counts in (("device", by_device), ("toolchain", by_toolchain)):
            print(f"per {title}:")
            for name, n in sorted(counts.items()):
                print(f"  {n:5d}  {name or '(none)'}")
        for problem in rs.problems():
            print(f"DAMAGED: {problem}")
    return 1 if any(rs.problems() for _, rs, *_ in report) else 0


def cmd_convert(args: argparse.Namespace) -> int:
    suffix = args.dst.suffix.lower()
    if not is_directory_path(args.dst) and suffix not in RESULTS_EXTENSIONS:
        raise AutotuneCacheError(
            f"convert: {args.dst}: {suffix!r} is not a results-file extension; use a text one "
            f"({', '.join(TEXT_EXTENSIONS)}), a binary one (.pb, .binpb), or no extension for a "
            "cache directory")
    rs = load_any(args.src)
    problems = rs.problems()
    for problem in problems:
        print(f"convert: skipped damaged: {problem}", file=sys.stderr)
    into_dir = is_directory_path(args.dst)
    before: set[str] = set()
    if into_dir and args.dst.is_dir() and any(args.dst.iterdir()):
        before = {r.id for r in load_any(args.dst).rows()}
    rs.save(args.dst)
    kind = "directory" if into_dir else "file"
    print(f"wrote {len(rs.rows())} entries from {args.src} to {kind} {args.dst}")
    if before:
        replaced = len(before & {r.id for r in rs.rows()})
        print(f"convert: {args.dst} already held {len(before)} entries; the converted entries "
              f"were added to them ({replaced} replaced)", file=sys.stderr)
    if problems:
        print(f"convert: {len(problems)} damaged entries of {args.src} were not converted "
              "(see above)", file=sys.stderr)
        return 1
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    outcome = merge_sets([(p, load_any(p)) for p in args.srcs], args.on_conflict)
    if outcome.conflicts:
        print("merge: conflicting entries (use --on-conflict=newest or fastest):", file=sys.stderr)
        print("\n".join(outcome.conflicts), file=sys.stderr)
        return 1
    outcome.result.save(args.output)
    print(f"wrote {outcome.count} entries to {args.output}")
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    set_a, set_b = load_any(args.a), load_any(args.b)
    if set_a.format_name != set_b.format_name:
        raise AutotuneCacheError(
            f"diff: {args.a} is in the {set_a.format_name} format and {args.b} in the "
            f"{set_b.format_name} format, whose entries cannot be compared; convert one to the "
            "other's format first (`autotune-cache convert`)")
    a, b = set_a.rows(), set_b.rows()
    added, removed, changed = diff_rows(a, b)
    old = {r.id: r for r in a}
    for sign, rows in (("+", added), ("-", removed)):
        for r in rows:
            print(f"{sign} {r.kernel} [{r.problem}] on {r.device} ({r.toolchain}): {r.config}")
    for r in changed:
        o = old[r.id]
        what = (f"config {o.config} -> {r.config}" if o.config != r.config
                else f"timing {_fmt_time(o.time_ms)} -> {_fmt_time(r.time_ms)} ms")
        print(f"~ {r.kernel} [{r.problem}] on {r.device}: {what}")
    print(f"{len(added)} added, {len(removed)} removed, {len(changed)} changed")
    return 1 if added or removed or changed else 0


_AGE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_age(text: str) -> float:
    """Seconds in an age such as 90m, 12h or 30d."""
    m = _AGE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"--older-than={text}: use a number and s, m, h, d or w")
    return float(m.group(1)) * _UNIT[m.group(2)]


def cmd_prune(args: argparse.Namespace) -> int:
    if not (args.keep_device or args.keep_toolchain or args.older_than is not None
            or args.superseded):
        print("prune: nothing to prune by; only removing leftover temp, lock and damaged files",
              file=sys.stderr)
    rs = load_any(args.path)
    plan = prune_plan(rs.rows(), keep_device=args.keep_device,
                      keep_toolchain=args.keep_toolchain, older_than=args.older_than,
                      now=time.time(), superseded=args.superseded)
    verb = "would remove" if args.dry_run else "removed"
    for row, reasons in plan.drop:
        print(f"{verb} {row.kernel} [{row.problem}] on {row.device} ({', '.join(reasons)})")
    if plan.unknown_device:
        print(f"prune: kept {plan.unknown_device} entries whose device is not recorded in "
              f"{args.path}; --keep-device cannot judge them", file=sys.stderr)
    temps = rs.leftovers() if args.path.is_dir() else []
    for t in temps:
        print(f"{verb} leftover file {t}")
    if not args.dry_run:
        for held in apply_prune(rs, args.path, plan, temps):  # a running tuning holds it
            print(f"kept lock file {held}: a running process holds it")
            temps.remove(held)
    print(f"{verb} {len(plan.drop)} entries and {len(temps)} leftover files (temp, lock, "
          f"damaged); {len(plan.keep)} entries kept")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    bad = 0
    for path in args.paths:
        try:
            rs = load_any(path)
        except (AutotuneCacheError, OSError) as e:
            print(f"FAIL {path}: {e}")
            bad += 1
            continue
        problems = rs.problems()
        for p in problems:
            print(f"FAIL {p}")
        bad += bool(problems)
        status = "FAIL" if problems else "ok"
        print(f"{status} {path}: {rs.format_name}, {len(rs.rows())} entries")
    return 1 if bad else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="autotune-cache",
        description="Inspect and maintain autotune results files and cache directories "
                    "(autotune_cache's own and XLA's).",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("inspect", help="table of entries with per-device/toolchain counts")
    s.add_argument("paths", nargs="+", type=Path)
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=cmd_inspect)
    s = sub.add_parser("convert", help="between text file, binary file and cache directory")
    s.add_argument("src", type=Path)
    s.add_argument("dst", type=Path, help="text by extension (.textproto…), directory if no "
                   "extension or trailing /, else binary")
    s.set_defaults(func=cmd_convert)
    s = sub.add_parser("merge", help="merge several files or directories of one format")
    s.add_argument("srcs", nargs="+", type=Path)
    s.add_argument("-o", "--output", type=Path, required=True)
    s.add_argument("--on-conflict", choices=CONFLICT_POLICIES, default="error")
    s.set_defaults(func=cmd_merge)
    s = sub.add_parser("diff", help="added/removed/changed entries; exit 1 when they differ")
    s.add_argument("a", type=Path)
    s.add_argument("b", type=Path)
    s.set_defaults(func=cmd_diff)
    s = sub.add_parser("prune", help="drop entries by device/toolchain/age; remove leftover files")
    s.add_argument("path", type=Path)
    s.add_argument("--keep-device", action="append", default=[],
                   help="keep entries whose device contains this text (repeatable)")
    s.add_argument("--keep-toolchain", action="append", default=[],
                   help="keep entries whose toolchain contains this text, e.g. triton=3.6.0")
    s.add_argument("--older-than", type=parse_age, default=None, help="drop entries tuned "
                   "longer ago than this (90m, 12h, 30d); entries without a date are kept")
    s.add_argument("--superseded", action="store_true", help="drop entries superseded by a newer "
                   "one for the same kernel, problem, device and toolchain (inspect marks them)")
    s.add_argument("--dry-run", action="store_true")
    s.set_defaults(func=cmd_prune)
    s = sub.add_parser("verify", help="parse, check versions, report damaged files")
    s.add_argument("paths", nargs="+", type=Path)
    s.set_defaults(func=cmd_verify)
    from autotune_cache.report.cli import add_report_parser  # matplotlib is imported only on use

    add_report_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except AutotuneCacheError as e:
        print(f"autotune-cache {args.command}: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"autotune-cache {args.command}: {e}", file=sys.stderr)
        return 2
