"""The `autotune-cache` command line: inspect, convert, merge, diff, prune and verify caches."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from autotune_cache.errors import AutotuneCacheError
from autotune_cache.readers import ResultSet, Row, is_directory_path, load_any


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
        by_device = Counter(r.device for r in rows)
        by_toolchain = Counter(r.toolchain for r in rows)
        report.append((path, rs, rows, by_device, by_toolchain))
    if args.json:
        out = [{
            "path": str(path), "format": rs.format_name,
            "entries": [{k: v for k, v in r.__dict__.items() if k != "payload"} for r in rows],
            "per_device": dict(by_device), "per_toolchain": dict(by_toolchain),
            "problems": rs.problems(),
        } for path, rs, rows, by_device, by_toolchain in report]
        print(json.dumps(out, indent=2, sort_keys=True))
        return 1 if any(rs.problems() for _, rs, *_ in report) else 0
    for path, rs, rows, by_device, by_toolchain in report:
        print(f"{path} ({rs.format_name}): {len(rows)} entries")
        if rows:
            table = [["KERNEL", "PROBLEM", "DEVICE", "TOOLCHAIN", "CONFIG", "TIME_MS"]]
            table += [[r.kernel, r.problem, r.device, r.toolchain, r.config, _fmt_time(r.time_ms)]
                      for r in rows]
            print(_table(table))
        for title, counts in (("device", by_device), ("toolchain", by_toolchain)):
            print(f"per {title}:")
            for name, n in sorted(counts.items()):
                print(f"  {n:5d}  {name or '(none)'}")
        for problem in rs.problems():
            print(f"DAMAGED: {problem}")
    return 1 if any(rs.problems() for _, rs, *_ in report) else 0


def cmd_convert(args: argparse.Namespace) -> int:
    rs = load_any(args.src)
    rs.save(args.dst)
    kind = "directory" if is_directory_path(args.dst) else "file"
    print(f"wrote {len(rs.rows())} entries from {args.src} to {kind} {args.dst}")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    sets = [load_any(p) for p in args.srcs]
    formats = {rs.format_name for rs in sets}
    if len(formats) > 1:
        raise AutotuneCacheError(
            f"merge: inputs are of different formats ({', '.join(sorted(formats))}); "
            "convert them to one format first"
        )
    merged: ResultSet = sets[0]
    winner: dict[str, Row] = {r.id: r for r in sets[0].rows()}
    conflicts = []
    for path, rs in zip(args.srcs[1:], sets[1:], strict=True):
        prefer: set[str] = set()
        for row in rs.rows():
            old = winner.get(row.id)
            if old is None:
                winner[row.id] = row
                continue
            if old.payload == row.payload:
                continue
            if args.on_conflict == "error":
                conflicts.append(f"  {row.kernel} [{row.problem}] on {row.device} (in {path})")
                continue
            if args.on_conflict == "newest":
                take = row.tuned_at >= old.tuned_at
            else:
                take = (row.time_ms if row.time_ms is not None else float("inf")) < (
                    old.time_ms if old.time_ms is not None else float("inf"))
            if take:
                prefer.add(row.id)
                winner[row.id] = row
        merged = merged.merge(rs, prefer)
    if conflicts:
        print("merge: conflicting entries (use --on-conflict=newest or fastest):", file=sys.stderr)
        print("\n".join(conflicts), file=sys.stderr)
        return 1
    merged.save(args.output)
    print(f"wrote {len(winner)} entries to {args.output}")
    return 0


def diff_rows(a: list[Row], b: list[Row]) -> tuple[list[Row], list[Row], list[Row]]:
    """Entries added in b, removed from a, and changed between them."""
    ia, ib = {r.id: r for r in a}, {r.id: r for r in b}
    added = [r for r in b if r.id not in ia]
    removed = [r for r in a if r.id not in ib]
    changed = [r for r in b if r.id in ia and ia[r.id].payload != r.payload]
    return added, removed, changed


def cmd_diff(args: argparse.Namespace) -> int:
    a, b = load_any(args.a).rows(), load_any(args.b).rows()
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


def _tuned_epoch(row: Row) -> float | None:
    if not row.tuned_at:
        return None
    try:
        ts = datetime.fromisoformat(row.tuned_at.replace("Z", "+00:00"))
    except ValueError:
        return None
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=timezone.utc)
    return ts.timestamp()


def cmd_prune(args: argparse.Namespace) -> int:
    if not (args.keep_device or args.keep_toolchain or args.older_than is not None):
        print("prune: nothing to prune by; only removing leftover temp, lock and damaged files",
              file=sys.stderr)
    rs = load_any(args.path)
    now = time.time()
    keep, drop = [], []
    unknown_device = 0
    for row in rs.rows():
        reasons = []
        if args.keep_device and not row.device:
            unknown_device += 1  # e.g. XLA's legacy per-fusion files do not record the device
        elif args.keep_device and not any(
                d.lower() in row.device.lower() for d in args.keep_device):
            reasons.append("device")
        if args.keep_toolchain and not any(
                t.lower() in row.toolchain.lower() for t in args.keep_toolchain):
            reasons.append("toolchain")
        tuned = _tuned_epoch(row)
        if args.older_than is not None and tuned is not None and now - tuned > args.older_than:
            reasons.append("age")
        (drop if reasons else keep).append((row, reasons))
    verb = "would remove" if args.dry_run else "removed"
    for row, reasons in drop:
        print(f"{verb} {row.kernel} [{row.problem}] on {row.device} ({', '.join(reasons)})")
    if unknown_device:
        print(f"prune: kept {unknown_device} entries whose device is not recorded in {args.path}; "
              "--keep-device cannot judge them", file=sys.stderr)
    temps = rs.leftovers() if args.path.is_dir() else []
    for t in temps:
        print(f"{verb} leftover file {t}")
    if not args.dry_run:
        if args.path.is_dir():
            for row, _ in drop:
                if row.source:
                    Path(row.source).unlink(missing_ok=True)
            for t in temps:
                t.unlink(missing_ok=True)
        elif drop:
            rs.select({r.id for r, _ in keep}).save(args.path)
    print(f"{verb} {len(drop)} entries and {len(temps)} leftover files (temp, lock, damaged); "
          f"{len(keep)} entries kept")
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
    s.add_argument("--on-conflict", choices=("newest", "fastest", "error"), default="error")
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
