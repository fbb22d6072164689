"""//tools:regen_cache: regenerate the committed autotuning caches of autotuned_py_test targets.

    bazel run //tools:regen_cache -- [target patterns...]     # default: every autotuned test
    bazel run //pkg:name.regen                                # one test (the macro's target)

How it works (docs/bazel.md has the long version):

1. `bazel query` finds the `.dump` targets: those of the autotuned tests the patterns name
   (tag "autotuned"), and any `.dump` target named directly.
2. One `bazel test` runs every dump, from inside `bazel run` (Bazel releases its lock before
   it starts us). On a GPU host it runs one dump per GPU at a time, each pinned to its own GPU
   with CUDA_VISIBLE_DEVICES through `--run_under` (see regen_scheduler.py); without a GPU it
   runs one dump at a time.
3. Each dump wrote `autotune_cache.textproto` into its undeclared test outputs; it is read from
   bazel-testlogs (zipped or not) and written over the committed cache in the source tree,
   with a per-file summary of entries added, removed, changed and retimed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from regen_bazel import (
    Bazel,
    DumpTarget,
    RegenError,
    find_dump_targets,
    find_workspace,
    outputs_dir,
    read_dump,
    read_test_dirs,
    read_test_statuses,
)
from regen_diff import Change, committed_bytes, compare
from regen_scheduler import SchedulerError, detect_gpus, make_plan, parse_gpu_flag

from autotune_cache.atomic import write_atomic
from autotune_cache.errors import AutotuneCacheError

PIN_SCRIPT = Path(__file__).resolve().with_name("regen_gpu_pin.py")

# `bazel test` exit codes after which the tests did run: 0 (all passed), 3 (some failed).
# Anything else (1 build failure, 2 bad command line, 8 interrupted, ...) means they may not.
BAZEL_TEST_RAN = (0, 3)


@dataclass(frozen=True)
class Outcome:
    """What happened to one dump target's cache."""

    target: DumpTarget
    status: str
    change: Change | None = None
    problem: str = ""

    @property
    def ok(self) -> bool:
        """Whether the cache was regenerated (or found unchanged)."""
        return self.change is not None


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line; see the module docstring."""
    parser = argparse.ArgumentParser(
        prog="regen_cache",
        description="Regenerate the committed caches of autotuned_py_test targets.",
    )
    parser.add_argument(
        "patterns",
        nargs="*",
        help="target patterns (tests or their .dump targets); default: //...",
    )
    parser.add_argument(
        "--bazel",
        default=os.environ.get("AUTOTUNE_BAZEL", "bazel"),
        help="Bazel binary to drive (default: $AUTOTUNE_BAZEL or `bazel` on PATH)",
    )
    parser.add_argument("--workspace", type=Path, help="default: $BUILD_WORKSPACE_DIRECTORY")
    parser.add_argument(
        "--gpus",
        help="GPU ids to spread dumps over, or 'none' (default: CUDA_VISIBLE_DEVICES, "
        "else every GPU `nvidia-smi -L` lists, else one CPU job)",
    )
    parser.add_argument(
        "--bazel_flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="extra flag for the `bazel test` run and, when query takes them all, the "
        "`bazel query` that finds the targets, e.g. --bazel_flag=--config=gpu (repeatable)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when any committed cache would change",
    )
    parser.add_argument(
        "--dry_run", action="store_true", help="list the targets and the GPU plan, run nothing"
    )
    return parser.parse_args(argv)


def log(message: str) -> None:
    """Progress output (stderr, flushed, so it interleaves correctly with Bazel's)."""
    print(f"regen_cache: {message}", file=sys.stderr, flush=True)


def regenerate_one(
    target: DumpTarget, status: str, test_dir: Path, workspace: Path, check: bool,
    build_exit: int = 0,
) -> Outcome:
    """Reads one dump's output and writes it over the committed cache (unless `check`).

    `build_exit` is the exit code of the `bazel test` run; a target without a test status after
    a failed build is reported as such. Unreadable or unmergeable files (AutotuneCacheError)
    and unwritable destinations become this target's failure, not the whole run's.
    """
    if status != "PASSED":
        return Outcome(target, status, problem=_not_passed(status, test_dir, build_exit))
    try:
        dumped = read_dump(test_dir)
    except RegenError as e:
        return Outcome(target, status, problem=str(e))
    if dumped is None:
        return Outcome(
            target,
            status,
            problem="the dump wrote no autotune_cache.textproto (did the test run any "
            "autotuned kernel? XLA on CPU writes nothing); the committed cache is left as is",
        )
    destination = workspace / target.cache_path
    try:
        old = destination.read_bytes() if destination.is_file() else None
        new = committed_bytes(old, dumped, destination.suffix)
        change = compare(old, new, destination.suffix)
        if change.differs and not check:
            write_atomic(destination, new)
    except (AutotuneCacheError, OSError) as e:
        return Outcome(target, status,
                       problem=f"{type(e).__name__}: {e}; the committed cache is left as is")
    return Outcome(target, status, change=change)


def _not_passed(status: str, test_dir: Path, build_exit: int) -> str:
    """Why a dump target without a PASSED status produced nothing."""
    if status == "FAILED_TO_BUILD" or (
            status in ("NO STATUS", "NO_STATUS") and build_exit not in BAZEL_TEST_RAN):
        return (f"bazel test failed to build (exit {build_exit}); the dump did not run; see "
                "Bazel's output above")
    log = test_dir / "test.log"
    where = f"; see {log}" if log.is_file() else " (no test.log; see Bazel's output above)"
    if status in ("NO STATUS", "NO_STATUS"):
        return f"Bazel reported no test status for it (exit {build_exit}){where}"
    return f"the dump test {status.lower()}{where}"


def run(args: argparse.Namespace) -> int:
    """Finds, runs and harvests the dumps; returns the process exit code."""
    workspace = args.workspace or find_workspace(os.environ, Path.cwd())
    bazel = Bazel(args.bazel, workspace)
    targets = find_dump_targets(bazel, args.patterns, args.bazel_flag)
    if not targets:
        raise RegenError(
            f"no autotuned_py_test matches {' '.join(args.patterns) or '//...'} in {workspace}."
        )
    gpus = parse_gpu_flag(args.gpus) if args.gpus is not None else detect_gpus(os.environ)
    # The GPU locks live in the output base: every test sandbox can see it (Bazel 7+ hides the
    # host's /tmp from sandboxes), and concurrent regens of one workspace share the locks.
    lock_dir = (Path(bazel.capture("info", "output_base").strip()) / "autotune_regen_gpu_locks"
                if gpus else Path())
    with tempfile.TemporaryDirectory(prefix="regen_cache_") as scratch:
        plan = make_plan(gpus, lock_dir, sys.executable, PIN_SCRIPT)
        log(f"{len(targets)} dump target(s) in {workspace}; {plan.describe()}")
        for target in targets:
            log(f"  {target.label} -> {target.cache_path}")
        if args.dry_run:
            return 0
        bep = Path(scratch) / "bep.json"
        log(f"running {len(targets)} dump(s) with `{args.bazel} test` (Bazel's progress follows)")
        build_exit = bazel.stream(
            "test",
            "--test_sharding_strategy=disabled",
            "--test_output=errors",
            f"--build_event_json_file={bep}",
            *plan.bazel_flags,
            *args.bazel_flag,
            *[t.label for t in targets],
        )
        if build_exit not in BAZEL_TEST_RAN:
            log(f"`{args.bazel} test` exited {build_exit}: the build failed or was stopped")
        statuses = read_test_statuses(bep)
        test_dirs = read_test_dirs(bep)
    if any(t.label not in test_dirs for t in targets):
        # After a failed build `bazel info` may fail too; the directory then only names where
        # a log would have been.
        testlogs = workspace / "bazel-testlogs"
        if build_exit in BAZEL_TEST_RAN:
            try:
                testlogs = Path(bazel.capture("info", *args.bazel_flag, "bazel-testlogs").strip())
            except RegenError as e:
                # One missing directory must not stop the passing dumps from being written.
                log(f"cannot ask Bazel where the test logs are ({e}); using {testlogs}")
        for t in targets:
            test_dirs.setdefault(t.label, outputs_dir(testlogs, t.label))
    outcomes = [
        regenerate_one(t, statuses.get(t.label, "NO STATUS"), test_dirs[t.label], workspace,
                       args.check, build_exit)
        for t in targets
    ]
    return report(outcomes, args.check)


def report(outcomes: list[Outcome], check: bool) -> int:
    """Prints the per-file summary; returns 1 when a dump failed (or, with --check, differs)."""
    print("\nregen_cache summary:")
    for outcome in outcomes:
        if outcome.change is not None:
            verb = "would change" if check and outcome.change.differs else "ok"
            print(f"  {outcome.target.cache_path}: {verb}: {outcome.change.describe()}")
        else:
            print(f"  {outcome.target.cache_path}: NOT REGENERATED ({outcome.target.label}): "
                  f"{outcome.problem}")
    failed = [o for o in outcomes if not o.ok]
    differs = [o for o in outcomes if o.change is not None and o.change.differs]
    written = "would change" if check else "rewritten"
    print(f"{len(outcomes)} cache(s): {len(differs)} {written}, {len(failed)} failed")
    if failed or (check and differs):
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of `bazel run //tools:regen_cache` and of every `<name>.regen` target."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run(args)
    except (RegenError, SchedulerError, AutotuneCacheError) as e:
        print(f"regen_cache: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
