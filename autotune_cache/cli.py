"""The `autotune-cache` command line: inspect, convert, merge, diff, prune, verify and report.

Every verb prints for people by default and, with `--json`, one JSON object on stdout for
scripts (`{"command": VERB, "exit": STATUS, ...}`; notes still go to stderr). Exit statuses are
the same for every verb (EXIT_STATUSES, documented in docs/reference.md#cli-autotune-cache).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune_cache.errors import AutotuneCacheError
from autotune_cache.formats import RESULTS_EXTENSIONS, TEXT_EXTENSIONS
from autotune_cache.foundation.verbs import Out, add_verb
from autotune_cache.resultsets.base import (
    CHANGE_KINDS,
    CONFLICT_POLICIES,
    Row,
    apply_prune,
    comparison_line,
    diff_rows,
    is_directory_path,
    merge_sets,
    prune_plan,
    rekeyed,
    superseded_ids,
)
from autotune_cache.resultsets.registry import load_any
from autotune_cache.version import __version__

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what `cat` reports when `| head` stops reading
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_STATUSES = {
    EXIT_OK: "success: nothing to report, or the check passed",
    EXIT_CHECK_FAILED: "the check failed: `diff` found differences, `verify` or `inspect` found "
                       "damaged entries, `merge` found conflicts, `convert` skipped damaged "
                       "entries",
    EXIT_BAD_INPUT: "bad input: a wrong option, or a path that is missing, unreadable or not a "
                    "results file (for `verify`: missing or unreadable; a damaged file is 1), or "
                    "criteria that `prune` refuses; nothing was written",
    EXIT_BROKEN_PIPE: "the reader of stdout went away (`| head`); quietly, without a traceback",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C); files are written whole or not at all",
}


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
    return "\n".join(line.rstrip() for line in lines)


def _fmt_time(t: float | None) -> str:
    return "-" if t is None else f"{t:.4g}"


def _row_json(row: Row, **extra: Any) -> dict[str, Any]:
    return {**{k: v for k, v in row.__dict__.items() if k != "payload"}, **extra}


def one_line(text: str) -> str:
    """`text` with its control characters escaped (`\\n`, `\\x1b`), so that a file name, a
    kernel name or a message can never start a line of its own, move the cursor or recolour the
    terminal: a name with a newline in it cannot forge an `ok` verdict or a table row."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def write_target(path: Path) -> Path:
    """Where to write `path`: a symbolic link to a file is written through, as the dump writes
    one (its target is replaced, the link stays); anything else is written as named."""
    if not is_directory_path(path) and path.is_symlink():
        return Path(os.path.realpath(path))
    return path


def cmd_inspect(args: argparse.Namespace, out: Out) -> int:
    files = []
    damaged = False
    for path in args.paths:
        rs = load_any(path)
        rows = rs.rows()
        old = superseded_ids(rows)
        by_device = Counter(r.device for r in rows)
        by_toolchain = Counter(r.toolchain for r in rows)
        problems = rs.problems()
        damaged |= bool(problems)
        files.append({
            "path": str(path), "format": rs.format_name,
            "entries": [_row_json(r, live=r.id not in old) for r in rows],
            "per_device": dict(by_device), "per_toolchain": dict(by_toolchain),
            "problems": problems,
        })
        out.line(one_line(f"{path} ({rs.format_name}): {len(rows)} entries"))
        if rows:
            table = [["KERNEL", "PROBLEM", "DEVICE", "TOOLCHAIN", "CONFIG", "TIME_MS", "LIVE"]]
            table += [[*map(one_line, (r.kernel, r.problem, r.device, r.toolchain, r.config)),
                       _fmt_time(r.time_ms), "superseded" if r.id in old else "live"]
                      for r in rows]
            out.line(_table(table))
            out.line("LIVE: `live` is the newest entry for its kernel, problem, device and "
                     "toolchain; `superseded` an older one (prune --superseded drops them)")
        if old:
            out.line(one_line(f"{len(old)} entries are superseded by newer ones for the same "
                              f"kernel, problem, device and toolchain; drop them with: "
                              f"autotune-cache prune --superseded {path}"))
        seeded = _seeded_kernels(rows)
        if seeded:
            out.line("seeded (picked by the library's own tuner, given back through its memo; "
                     "the others are tuned by autotune_cache):")
            for kernel, tuner in sorted(seeded.items()):
                out.line(one_line(f"  {kernel}: {tuner}"))
        for title, counts in (("device", by_device), ("toolchain", by_toolchain)):
            out.line(f"per {title}:")
            for name, n in sorted(counts.items()):
                out.line(f"  {n:5d}  {one_line(name or '(none)')}")
        for problem in problems:
            out.line(one_line(f"DAMAGED: {problem}"))
    out.set(files=files)
    return EXIT_CHECK_FAILED if damaged else EXIT_OK


def _seeded_kernels(rows: list[Row]) -> dict[str, str]:
    """{kernel: its library's tuner class} for the entries a library's own tuner picked
    (triton/seeding.py names the tuner in the timing method: tuning.library_tuner)."""
    from autotune_cache.proto import autotune_results_pb2 as pb
    from autotune_cache.store.tuning import library_tuner

    found = {}
    for row in rows:
        entry = pb.Entry()
        try:
            entry.ParseFromString(row.payload)
        except Exception:  # noqa: BLE001, S112 - another format's payload
            continue
        tuner = library_tuner(entry.result.timing_method)
        if tuner is not None:
            found[row.kernel] = tuner
    return found


def cmd_convert(args: argparse.Namespace, out: Out) -> int:
    suffix = args.dst.suffix.lower()
    if not is_directory_path(args.dst) and suffix not in RESULTS_EXTENSIONS:
        raise AutotuneCacheError(
            f"convert: {args.dst}: {suffix!r} is not a results-file extension; use a text one "
            f"({', '.join(TEXT_EXTENSIONS)}), a binary one (.pb, .binpb), or no extension for a "
            "cache directory")
    rs = load_any(args.src)
    problems = rs.problems()
    for problem in problems:
        out.note(f"convert: skipped damaged: {problem}")
    into_dir = is_directory_path(args.dst)
    before: set[str] = set()
    if into_dir and args.dst.is_dir() and any(args.dst.iterdir()):
        before = {r.id for r in load_any(args.dst).rows()}
    rs.save(write_target(args.dst))
    kind = "directory" if into_dir else "file"
    written = len(rs.rows())
    replaced = len(before & {r.id for r in rs.rows()})
    out.set(source=str(args.src), destination=str(args.dst), kind=kind, written=written,
            already_there=len(before), replaced=replaced, skipped_damaged=problems)
    out.line(f"wrote {written} entries from {args.src} to {kind} {args.dst}")
    if before:
        out.note(f"convert: {args.dst} already held {len(before)} entries; the converted entries "
                 f"were added to them ({replaced} replaced)")
    if problems:
        out.note(f"convert: {len(problems)} damaged entries of {args.src} were not converted "
                 "(see above)")
        return EXIT_CHECK_FAILED
    return EXIT_OK


def cmd_merge(args: argparse.Namespace, out: Out) -> int:
    outcome = merge_sets([(p, load_any(p)) for p in args.srcs], args.on_conflict)
    out.set(sources=[str(p) for p in args.srcs], output=str(args.output),
            conflicts=outcome.conflicts)
    if outcome.conflicts:
        out.note("merge: conflicting entries (use --on-conflict=newest or fastest):")
        out.note("\n".join(outcome.conflicts))
        return EXIT_CHECK_FAILED
    outcome.result.save(write_target(args.output))
    out.set(written=outcome.count)
    out.line(f"wrote {outcome.count} entries to {args.output}")
    return EXIT_OK


def cmd_diff(args: argparse.Namespace, out: Out) -> int:
    set_a, set_b = load_any(args.a), load_any(args.b)
    if set_a.format_name != set_b.format_name:
        raise AutotuneCacheError(
            f"diff: {args.a} is in the {set_a.format_name} format and {args.b} in the "
            f"{set_b.format_name} format, whose entries cannot be compared; convert one to the "
            "other's format first (`autotune-cache convert`)")
    # The vocabulary of `report --baseline` (resultsets.base): entries matched by kernel,
    # problem and device, so a candidate added to a kernel is "winner changed" or "unchanged",
    # never "1 added, 1 removed".
    pairs, removed = diff_rows(set_a.rows(), set_b.rows())
    counts = Counter(kind for kind, _, _ in pairs)
    moved = [(o, r) for _, o, r in pairs if rekeyed(o, r)]
    for kind, o, r in pairs:
        where = f"{r.kernel} [{r.problem}] on {r.device}"
        if o is None:
            out.line(one_line(f"+ {where} ({r.toolchain}): {r.config}"))
        elif kind == "winner changed":
            out.line(one_line(f"~ {where}: winner {o.config} -> {r.config} "
                              f"({_fmt_time(o.time_ms)} -> {_fmt_time(r.time_ms)} ms)"))
        elif kind == "re-timed":
            out.line(one_line(f"~ {where}: re-timed {_fmt_time(o.time_ms)} -> "
                              f"{_fmt_time(r.time_ms)} ms"))
    for r in removed:
        out.line(one_line(f"- {r.kernel} [{r.problem}] on {r.device} ({r.toolchain}): "
                          f"{r.config}"))
    out.line(comparison_line(pairs, len(removed)))
    counts["removed"] = len(removed)
    out.set(a=str(args.a), b=str(args.b),
            counts={kind: counts.get(kind, 0) for kind in CHANGE_KINDS},
            new=[_row_json(r) for kind, _, r in pairs if kind == "new"],
            removed=[_row_json(r) for r in removed],
            changed=[{"kind": kind, "before": _row_json(o), "after": _row_json(r)}
                     for kind, o, r in pairs if o is not None and kind != "unchanged"],
            rekeyed=len(moved))
    differ = any(o is None or kind != "unchanged" or o.payload != r.payload
                 for kind, o, r in pairs)
    return EXIT_CHECK_FAILED if differ or removed else EXIT_OK


_UNIT = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}
_AGE = re.compile(r"^(\d+(?:\.\d+)?)(min|[smhdw])$")


def parse_age(text: str) -> float:
    """Seconds in an age such as 90m or 90min (minutes: `m` is never months), 12h or 30d."""
    m = _AGE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"--older-than={text}: use a number and s (seconds), m or min (minutes), h (hours), "
            "d (days) or w (weeks)")
    return float(m.group(1)) * _UNIT[m.group(2)]


def _empty_refusal(path: Path, count: int) -> str:
    return (f"prune: these criteria remove all {count} entries of {path}, which would leave it "
            "empty; nothing was changed. --keep-device and --keep-toolchain match text within "
            "the recorded names (`autotune-cache inspect` shows them); pass --allow-empty if "
            "an empty file is what you mean.")


def cmd_prune(args: argparse.Namespace, out: Out) -> int:
    if not (args.keep_device or args.keep_toolchain or args.older_than is not None
            or args.superseded):
        out.note("prune: nothing to prune by; only removing leftover temp, lock and damaged "
                 "files")
    rs = load_any(args.path)
    plan = prune_plan(rs.rows(), keep_device=args.keep_device,
                      keep_toolchain=args.keep_toolchain, older_than=args.older_than,
                      now=time.time(), superseded=args.superseded)
    verb = "would remove" if args.dry_run else "removed"
    refused = bool(plan.drop) and not plan.keep and not args.allow_empty
    if refused and not args.dry_run:
        raise AutotuneCacheError(_empty_refusal(args.path, len(plan.drop)))
    for row, reasons in plan.drop:
        out.line(one_line(f"{verb} {row.kernel} [{row.problem}] on {row.device} "
                          f"({', '.join(reasons)})"))
    if refused:  # a dry run lists what the criteria match, then gives the real run's refusal
        raise AutotuneCacheError(_empty_refusal(args.path, len(plan.drop)))
    if plan.unknown_device:
        out.note(f"prune: kept {plan.unknown_device} entries whose device is not recorded in "
                 f"{args.path}; --keep-device cannot judge them")
    temps = rs.leftovers() if args.path.is_dir() else []
    kept_locks: list[str] = []
    for t in temps:
        out.line(f"{verb} leftover file {t}")
    if not args.dry_run:
        for held in apply_prune(rs, args.path, plan, temps):  # a running tuning holds it
            out.line(f"kept lock file {held}: a running process holds it")
            temps.remove(held)
            kept_locks.append(str(held))
    out.line(f"{verb} {len(plan.drop)} entries and {len(temps)} leftover files (temp, lock, "
             f"damaged); {len(plan.keep)} entries kept")
    out.set(path=str(args.path), dry_run=args.dry_run,
            dropped=[_row_json(r, reasons=reasons) for r, reasons in plan.drop],
            leftover_files=[str(t) for t in temps], kept=len(plan.keep),
            kept_without_device=plan.unknown_device, kept_held_locks=kept_locks)
    return EXIT_OK


def cmd_verify(args: argparse.Namespace, out: Out) -> int:
    results = []
    bad_input = False  # a path that is missing or cannot be read: exit 2, as for every verb
    for path in args.paths:
        try:
            if not os.path.exists(path):  # also a dangling link, a loop, a denied parent
                raise FileNotFoundError(f"{path}: no such file or directory (or not reachable)")
            rs = load_any(path)
        except (AutotuneCacheError, OSError) as e:
            unreadable = isinstance(e, OSError) or not (path.is_file() or path.is_dir())
            bad_input |= unreadable
            out.line(one_line(f"FAIL {path}: {e}"))
            results.append({"path": str(path), "ok": False, "error": str(e),
                            "bad_input": unreadable})
            continue
        problems = rs.problems()
        for p in problems:
            out.line(one_line(f"FAIL {p}"))
        status = "FAIL" if problems else "ok"
        out.line(one_line(f"{status} {path}") + f": {rs.format_name}, {len(rs.rows())} entries")
        results.append({"path": str(path), "ok": not problems, "format": rs.format_name,
                        "entries": len(rs.rows()), "problems": problems})
    out.set(files=results)
    if bad_input:
        return EXIT_BAD_INPUT
    return EXIT_CHECK_FAILED if not all(r["ok"] for r in results) else EXIT_OK


def _exit_help() -> str:
    return "exit status:\n" + "\n".join(f"  {code:3d}  {meaning}"
                                         for code, meaning in EXIT_STATUSES.items())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="autotune-cache",
        description="Inspect and maintain autotune results files and cache directories "
                    "(autotune_cache's own and XLA's). `autotune-cache VERB --help` shows an "
                    "example for each verb.",
        epilog=_exit_help(), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    s = add_verb(sub, "inspect", cmd_inspect, "table of entries with per-device/toolchain counts",
                 "autotune-cache inspect kernels/matmul_test.autotune.textproto")
    s.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                   help="results files (text or binary) or cache directories, ours or XLA's")
    s = add_verb(sub, "convert", cmd_convert,
                 "convert between text file, binary file and cache directory",
                 "autotune-cache convert matmul.autotune.textproto matmul_cache_dir/")
    s.add_argument("src", type=Path, help="the results file or cache directory to read")
    s.add_argument("dst", type=Path, help="text by extension (.textproto…), binary by .pb or "
                   ".binpb, a directory without an extension or with a trailing /")
    s = add_verb(sub, "merge", cmd_merge, "merge several files or directories of one format",
                 "autotune-cache merge shard1.textproto shard2.textproto -o all.textproto")
    s.add_argument("srcs", nargs="+", type=Path, metavar="SRC",
                   help="results files or cache directories, all of one format")
    s.add_argument("-o", "--output", type=Path, required=True,
                   help="where to write the union (written only when it can be read back; it "
                        "may be one of the sources)")
    s.add_argument("--on-conflict", choices=CONFLICT_POLICIES, default="error",
                   help="when two sources hold different results for one key: error (the "
                        "default: nothing is written, the keys are named), newest (latest "
                        "tuned_at wins) or fastest (lowest time wins)")
    s = add_verb(sub, "diff", cmd_diff, "added/removed/changed entries; exit 1 when they differ",
                 "autotune-cache diff old.autotune.textproto new.autotune.textproto")
    s.add_argument("a", type=Path, help="the old file or directory")
    s.add_argument("b", type=Path, help="the new one, of the same format")
    s = add_verb(sub, "prune", cmd_prune,
                 "drop entries by device/toolchain/age/superseded; remove leftover files",
                 "autotune-cache prune cache.textproto --keep-device=H200 --dry-run")
    s.add_argument("path", type=Path, help="the results file or cache directory to prune in "
                   "place")
    s.add_argument("--keep-device", action="append", default=[],
                   help="keep entries whose device contains this text (repeatable)")
    s.add_argument("--keep-toolchain", action="append", default=[],
                   help="keep entries whose toolchain contains this text, e.g. triton=3.6.0")
    s.add_argument("--older-than", type=parse_age, default=None, metavar="AGE",
                   help="drop entries tuned longer ago than this: a number and s, m or min "
                        "(minutes, never months), h, d or w (90m, 90min, 12h, 30d, 2w); entries "
                        "without a date are kept")
    s.add_argument("--superseded", action="store_true", help="drop entries superseded by a newer "
                   "one for the same kernel, problem, device and toolchain (inspect marks them)")
    s.add_argument("--dry-run", action="store_true",
                   help="say what would be removed, and change nothing; criteria that would "
                        "empty the file are refused as in the real run (exit 2)")
    s.add_argument("--allow-empty", action="store_true",
                   help="let the criteria remove every entry (refused without it: an empty "
                        "committed cache is almost always a mistaken criterion)")
    s = add_verb(sub, "verify", cmd_verify, "parse, check versions, report damaged files (exit "
                 "1; a path that is missing or unreadable: exit 2)",
                 "autotune-cache verify kernels/*.autotune.textproto")
    s.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                   help="results files or cache directories to check")
    from autotune_cache.report.cli import add_report_parser  # matplotlib is imported only on use

    add_report_parser(sub, add_verb)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (EXIT_STATUSES)."""
    args = build_parser().parse_args(argv)
    out = Out(args.json)
    try:
        status = args.func(args, out)
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except (AutotuneCacheError, OSError) as e:
        print(f"autotune-cache {args.command}: {e}", file=sys.stderr)
        out.fields = {"error": str(e)}
        status = EXIT_BAD_INPUT
    try:
        out.finish(args.command, status)
        sys.stdout.flush()
    except BrokenPipeError:
        return _quiet_broken_pipe()
    return status


def _quiet_broken_pipe() -> int:
    """`| head` closed stdout: point stdout at /dev/null so the interpreter's final flush does
    not print a second error, and say nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


def run() -> None:
    """The console script: main(), with `| head` and Ctrl-C ending quietly."""
    try:
        status = main()
    except BrokenPipeError:
        status = _quiet_broken_pipe()
    except KeyboardInterrupt:
        status = EXIT_INTERRUPTED
    sys.exit(status)
