"""//tools:regen_cache: regenerate the committed autotuning caches of autotuned_py_test targets.

    bazel run @rules_autotune//tools:regen_cache -- [target patterns...]
                                     # relative patterns are read from where you run it, as
                                     # `bazel test` reads them; default: `...` (everything there)
    bazel run //pkg:name.regen                                # one test (the macro's target)

How it works (docs/bazel.md has the long version):

1. `bazel query` finds the `.dump` targets: those of the autotuned tests the patterns name
   (tag "autotuned"), any `.dump` target named directly, and those sharing their cache files in
   the files' and the tests' packages. Nothing else is loaded (never `//...` for a narrower
   pattern, never Bazel's bazel-* convenience symlinks); a file that does not exist yet, or
   whose new version would lose entries, makes it look for more sharers in the whole workspace
   (sharers_of_new_files, widen_where_entries_would_go). Without a GPU, the dumps of backend
   "xla" are skipped and named unless asked for by name (skip_cpu_only).
2. One `bazel test` runs every dump, from inside `bazel run` (Bazel releases its lock before
   it starts us). On a GPU host it runs one dump per GPU at a time, each pinned to its own GPU
   with CUDA_VISIBLE_DEVICES through `--run_under` (see regen_scheduler.py); without a GPU it
   runs one dump at a time.
   With `--bazel_flag=--remote_executor=...` or `--bazel_flag=--jobs=N` Bazel schedules the
   dumps itself (a remote-execution GPU pool, picked by the dumps' `dump_exec_properties`).
3. Each dump wrote `autotune_cache.textproto` into its undeclared test outputs; it is read from
   bazel-testlogs (zipped or not). The dumps are grouped by cache file: a file shared by several
   tests gets the union of their entries (and is left alone when any of them failed). The
   result is written over the committed cache in the source tree, with a per-file summary of
   entries added, removed, changed and retimed.

Queries run with --keep_going: a package that does not load is listed at the end, and every
cache that can be regenerated is. Committed `*.autotune.textproto` files of the packages looked
at that no test uses any more are listed as orphaned, with what to do (regen_orphans.py), and
fail the run; when one sits next to a test that has no cache yet (a rename, most likely),
nothing runs until it is moved or deleted. A cache file in another package than its test that
does not exist yet is created (empty) before the dumps run, so that the first regen can build
them.
"""

from __future__ import annotations

import argparse
import os
import posixpath
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from regen_bazel import (
    Bazel,
    DumpTarget,
    RegenError,
    absolute_pattern,
    find_dump_targets,
    find_workspace,
    label_parts,
    merge_targets,
    normalize_label,
    outputs_dir,
    read_dump,
    read_test_dirs,
    read_test_statuses,
    widen_search,
    working_package,
)
from regen_diff import committed, compare
from regen_orphans import find_orphans, moved_caches
from regen_report import Outcome, report, write_json
from regen_scheduler import (
    Plan,
    SchedulerError,
    delegated_plan,
    delegating_flags,
    detect_gpus,
    make_plan,
    parse_gpu_flag,
)

from autotune_cache.errors import AutotuneCacheError
from autotune_cache.formats import is_text_path, serialize_results
from autotune_cache.foundation.atomic import write_atomic
from autotune_cache.resultsets.registry import loads

PIN_SCRIPT = Path(__file__).resolve().with_name("regen_gpu_pin.py")

# `bazel test` exit codes after which the tests did run: 0 (all passed), 3 (some failed).
# Anything else (1 build failure, 2 bad command line, 8 interrupted, ...) means they may not.
BAZEL_TEST_RAN = (0, 3)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line; see the module docstring."""
    parser = argparse.ArgumentParser(
        prog="regen_cache",
        description="Regenerate the committed caches of autotuned_py_test targets.",
    )
    parser.add_argument(
        "patterns",
        nargs="*",
        help="target patterns (tests or their .dump targets); relative ones are read from the "
        "directory you ran in, as `bazel test` does; default: `...` (everything there)",
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
        help="write nothing; exit 1 when any committed cache would change or is orphaned",
    )
    parser.add_argument(
        "--dry_run", action="store_true", help="list the targets and the GPU plan, run nothing"
    )
    parser.add_argument(
        "--json", metavar="PATH", help="also write the per-file summary (written, kept by "
        "reason, dropped) to PATH as JSON, for scripts"
    )
    # An exclusion pattern (`-//third_party/...`, `-sub/...`) starts with "-", which argparse
    # would read as an unknown option: it passes through as a pattern, in its place.
    hidden = [_EXCLUDED + a[1:] if _is_exclusion(a) else a for a in argv]
    args = parser.parse_args(hidden)
    args.patterns = ["-" + p[len(_EXCLUDED):] if p.startswith(_EXCLUDED) else p
                     for p in args.patterns]
    return args


_EXCLUDED = "\0exclude:"


def _is_exclusion(arg: str) -> bool:
    """Whether a command-line word is a target pattern to exclude, as `bazel test` reads
    `-//pkg/...`, `-//pkg:t`, `-:t`, `-sub/...` or `-...`, not an option."""
    return len(arg) > 1 and arg[0] == "-" and (arg[1] in "/:@." or arg[1].isalnum()) \
        and arg not in ("-h",)


def log(message: str) -> None:
    """Progress output (stderr, flushed, so it interleaves correctly with Bazel's)."""
    print(f"regen_cache: {message}", file=sys.stderr, flush=True)


def read_one(target: DumpTarget, status: str, test_dir: Path, build_exit: int) -> bytes | str:
    """One dump's output bytes, or the reason there are none."""
    if status != "PASSED":
        return _not_passed(status, test_dir, build_exit)
    try:
        dumped = read_dump(test_dir)
    except RegenError as e:
        return str(e)
    if dumped is None:
        return ("the dump wrote no autotune_cache.textproto (did the test run any autotuned "
                "kernel? XLA on CPU writes nothing); the committed cache is left as is")
    return dumped


def union_of_dumps(dumps: list[bytes]) -> bytes:
    """The entries of every dump of one shared cache file, as one text file (the first dump's
    entry wins when two tests dumped the same key). One dump is returned byte for byte."""
    if len(dumps) == 1:
        return dumps[0]
    sets = [loads(data, ".textproto") for data in dumps]
    merged = sets[0]
    for other in sets[1:]:
        merged = merged.merge(other, prefer_other=set())
    return merged.dumps(".textproto")


def regenerate_group(
    targets: list[DumpTarget], results: dict[str, bytes | str], status: dict[str, str],
    workspace: Path, check: bool, placeholder: bool = False, subset: bool = False,
) -> Outcome:
    """Writes the union of the dumps of one cache file over it (unless `check`).

    A failed dump leaves the file alone: writing the others' entries only would drop what the
    failed test uses. Unreadable or unmergeable files (AutotuneCacheError) and unwritable
    destinations become this file's failure, not the whole run's. `placeholder`: the file was
    created empty by this run, so it counts as absent.
    """
    group = tuple(targets)
    overall = "PASSED" if all(status[t.label] == "PASSED" for t in targets) else "FAILED"
    problems = [(f"{t.label}: " if len(targets) > 1 else "") + results[t.label]
                for t in targets if isinstance(results[t.label], str)]
    if problems:
        if len(targets) > 1:
            problems.append("a cache shared by several tests is only written when all of "
                            "their dumps succeed")
        return Outcome(group, overall, problem="; ".join(problems))
    destination = workspace / targets[0].cache_path
    notes = []
    if destination.is_symlink():
        # A committed symlink (to a file shared outside the workspace) stays a symlink: the
        # new cache is written to the file it points at, as the pytest dump does.
        notes.append(f"{'would be ' if check else ''}written through the symlink to "
                     f"{destination.resolve()}")
        destination = destination.resolve()
    try:
        dumped = union_of_dumps([results[t.label] for t in targets])  # type: ignore[misc]
        old = destination.read_bytes() if destination.is_file() else None
        if placeholder or (old is not None and not old.strip()):
            old = None  # an empty file means "no entries yet"
        broken = broken_reason(old, destination.suffix)
        if broken is not None:
            # A hand-broken file (merge-conflict markers, a cut-off end): the dump did not
            # load it (the test wrapper), so its entries are what the tests use now.
            notes.append(f"{'would replace' if check else 'replaced'} a broken results file "
                         f"({broken})")
            old = None
        new, kept = committed(old, dumped, destination.suffix, subset=subset)
        change = compare(old, new, destination.suffix)
        if broken is not None:
            change = replace(change, created=False, identical_bytes=False)
        if change.differs and not check:
            write_atomic(destination, new)
    except (AutotuneCacheError, OSError) as e:
        return Outcome(group, overall,
                       problem=f"{type(e).__name__}: {e}; the committed cache is left as is")
    return Outcome(group, overall, change=change, kept=kept, notes=tuple(notes))


def broken_reason(old: bytes | None, suffix: str) -> str | None:
    """Why a committed cache cannot be read (the parser's words), or None when it can."""
    if old is None:
        return None
    try:
        loads(old, suffix)
    except AutotuneCacheError as e:
        # "<bytes>.textproto: not a valid ...: <what>. (The parser said: ...)" -> "<what>"
        return str(e).split(": ", 1)[-1].split(" (The parser said", 1)[0].rstrip(".")
    return None


def regenerate_one(
    target: DumpTarget, status: str, test_dir: Path, workspace: Path, check: bool,
    build_exit: int = 0,
) -> Outcome:
    """regenerate_group for a cache file written by one dump target."""
    result = read_one(target, status, test_dir, build_exit)
    return regenerate_group([target], {target.label: result}, {target.label: status},
                            workspace, check)


def placeholder_bytes(target: DumpTarget) -> bytes:
    """An empty cache for a first-time file in another package (so that the dump builds)."""
    if target.backend != "triton":
        raise RegenError(
            f"{target.cache_path} (cache of {target.test_label}) does not exist and is in "
            "another package, so its dump cannot build; for backend \"xla\" create it by "
            "regenerating it once with the cache in the test's own package, then move it."
        )
    return serialize_results([], text=is_text_path(target.cache_path))


def create_placeholders(targets: list[DumpTarget], workspace: Path) -> dict[Path, bytes | None]:
    """Makes every cache the dumps load buildable and loadable before they run: a missing file
    in another package than its test (a label to a missing file fails analysis) and an empty
    file ("no entries yet", which the library would refuse to load) get an empty cache.

    Returns the files touched, with their bytes before (None: it did not exist)."""
    touched: dict[Path, bytes | None] = {}
    for target in targets:
        path = workspace / target.cache_path
        if path in touched:
            continue
        if path.is_file():
            before: bytes | None = path.read_bytes()
            if before.strip():
                continue
        elif posixpath.dirname(target.cache_path) == label_parts(target.label)[0]:
            continue  # the test's own package: the macro's glob copes with a missing file
        else:
            before = None
        log(f"{target.cache_path}: {'empty' if before is not None else 'missing'}; starting it "
            "as a cache with no entries")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, placeholder_bytes(target))
        touched[path] = before
    return touched


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


def scheduling_plan(args: argparse.Namespace, bazel: Bazel) -> Plan:
    """Local GPU pinning, or Bazel's own scheduling when the user's flags ask for it."""
    delegated = delegating_flags(args.bazel_flag)
    if delegated:
        return delegated_plan(delegated)
    gpus = parse_gpu_flag(args.gpus) if args.gpus is not None else detect_gpus(os.environ)
    # The GPU locks live in the output base: every test sandbox can see it (Bazel 7+ hides the
    # host's /tmp from sandboxes), and concurrent regens of one workspace share the locks.
    lock_dir = (Path(bazel.capture("info", "output_base").strip()) / "autotune_regen_gpu_locks"
                if gpus else Path())
    return make_plan(gpus, lock_dir, sys.executable, PIN_SCRIPT)


# `.bazelrc` test filters would silently drop the dumps regen_cache chose (a `.dump` is large,
# eternal, tagged `manual external ...` and maybe `gpu`); an empty value turns each filter off.
# A --bazel_flag given to regen_cache comes later and still wins.
FILTER_RESETS = (
    "--test_tag_filters=",
    "--test_size_filters=",
    "--test_timeout_filters=",
    "--test_lang_filters=",
)


# Under --remote_download_minimal (or _toplevel), common with remote execution, Bazel does
# not download the outputs of passing tests (bazel#26043, bazel#11556), so every dump would
# look as if it wrote nothing. `all` is the one value every Bazel from 4 to 9 takes (checked on
# 4.2.3; the flag and value are in the command-line reference of 7, 8 and 9). A --bazel_flag
# given to regen_cache comes later and still wins.
DOWNLOAD_OUTPUTS = "--remote_download_outputs=all"

# --bazel_flag values that keep test outputs remote (what to say when a dump wrote nothing).
_MINIMAL_DOWNLOADS = ("--remote_download_minimal", "--remote_download_toplevel",
                      "--remote_download_outputs=minimal", "--remote_download_outputs=toplevel")


def test_command(args: argparse.Namespace, plan: Plan, bep: Path,
                 targets: list[DumpTarget]) -> list[str]:
    """The `bazel test` arguments (after the verb) that run every dump. None of them is part
    of Bazel's build configuration, so the user's next `bazel test` keeps the analysis cache
    (a `.dump` has shard_count = 1 already, so no --test_sharding_strategy)."""
    return [
        "--keep_going",
        "--test_output=errors",
        *FILTER_RESETS,
        DOWNLOAD_OUTPUTS,
        f"--build_event_json_file={bep}",
        *plan.bazel_flags,
        *args.bazel_flag,
        *[t.label for t in targets],
    ]


def group_by_cache(targets: list[DumpTarget]) -> dict[str, list[DumpTarget]]:
    """The dump targets of each cache file, files and targets sorted."""
    groups: dict[str, list[DumpTarget]] = {}
    for target in sorted(targets, key=lambda t: t.label):
        groups.setdefault(target.cache_path, []).append(target)
    return dict(sorted(groups.items()))


@dataclass
class Harvest:
    """The dumps run so far: per dump label, its status and its bytes (or why there are none)."""

    status: dict[str, str]
    results: dict[str, bytes | str]


def run_dumps(args: argparse.Namespace, bazel: Bazel, plan: Plan, targets: list[DumpTarget],
              bep: Path, harvest: Harvest) -> None:
    """One `bazel test` over `targets`; their statuses and dumps are added to `harvest`."""
    workspace = bazel.workspace
    log(f"running {len(targets)} dump(s) with `{args.bazel} test` (Bazel's progress follows)")
    build_exit = bazel.stream("test", *test_command(args, plan, bep, targets))
    if build_exit not in BAZEL_TEST_RAN:
        log(f"`{args.bazel} test` exited {build_exit}: the build failed or was stopped")
    statuses = read_test_statuses(bep)
    test_dirs = read_test_dirs(bep)
    if any(t.label not in test_dirs for t in targets):
        # After a failed build `bazel info` may fail too; the directory then only names
        # where a log would have been.
        testlogs = workspace / "bazel-testlogs"
        if build_exit in BAZEL_TEST_RAN:
            try:
                testlogs = Path(bazel.capture("info", *args.bazel_flag, "bazel-testlogs").strip())
            except RegenError as e:
                # One missing directory must not stop the passing dumps being written.
                log(f"cannot ask Bazel where the test logs are ({e}); using {testlogs}")
        for t in targets:
            test_dirs.setdefault(t.label, outputs_dir(testlogs, t.label))
    for t in targets:
        harvest.status[t.label] = statuses.get(t.label, "NO STATUS")
        result = read_one(t, harvest.status[t.label], test_dirs[t.label], build_exit)
        if isinstance(result, str) and result.startswith("the dump wrote no") and any(
                flag.startswith(_MINIMAL_DOWNLOADS) for flag in args.bazel_flag):
            result += (" (--bazel_flag keeps passing tests' outputs remote: drop "
                       "--remote_download_minimal / _toplevel from --bazel_flag)")
        harvest.results[t.label] = result


def bad_pattern_lines(found_bad: tuple[tuple[str, str], ...], package: str) -> list[str]:
    """One sentence per pattern that named nothing: the pattern, Bazel's reason, the fix."""
    where = (f" (relative patterns are read from //{package}, the directory you ran in)"
             if package else "")
    return [f"{pattern}: NO SUCH TARGET PATTERN: Bazel says \"{reason}\"; check its "
            f"spelling{where}" for pattern, reason in found_bad]


def run(args: argparse.Namespace) -> int:
    """Finds, runs and harvests the dumps; returns the process exit code."""
    workspace = args.workspace or find_workspace(os.environ, Path.cwd())
    bazel = Bazel(args.bazel, workspace)
    # As `bazel test` does: relative patterns (and the default `...`) are read from the
    # directory the user ran `bazel run` in, so that `cd team && ... -- ...` means //team/...
    package = working_package(os.environ, workspace)
    patterns = [absolute_pattern(p, package) for p in args.patterns or ["..."]]
    if package:
        log(f"patterns read from //{package} (the directory you ran in): {' '.join(patterns)}")
    found = find_dump_targets(bazel, patterns, args.bazel_flag)
    targets = found.targets
    bad = bad_pattern_lines(found.bad_patterns, package)
    orphans = find_orphans(bazel, workspace, patterns, targets, found.query_flags)
    # A test moved here from a package these patterns do not cover: its old cache, with every
    # entry, is an orphan there (named before any tuning from scratch).
    orphans += moved_caches(bazel, workspace, targets, found.query_flags,
                            known=[o.path for o in orphans])
    if not targets:
        if orphans:
            return report([], args.check, found.broken_packages, orphans, bad)
        if bad and len(bad) == len(patterns):
            raise RegenError("; ".join(bad) + ".")
        if found.broken_packages or bad:
            return report([], args.check, found.broken_packages, (), bad)
        # Nothing to regenerate is not an error: `--check //tools/...` in CI passes.
        print(f"\nregen_cache summary:\n  no autotuned_py_test matches {' '.join(patterns)} "
              f"in {workspace}: nothing to {'check' if args.check else 'regenerate'}")
        return 0
    if any(orphan.renamed_to for orphan in orphans):
        # A renamed or moved test would be tuned from scratch into its new file, while its old
        # file, with every entry, is still committed: say so before any dump runs.
        log("nothing was run: a test without a cache has an orphaned cache file of its name "
            "(beside it, or in another package); move (or delete) the orphaned file first, so "
            "that a renamed or moved test keeps its entries")
        return report([], args.check, found.broken_packages, orphans, bad)
    plan = scheduling_plan(args, bazel)
    targets, skipped = skip_cpu_only(targets, plan, patterns)
    if not targets:
        return report([], args.check, found.broken_packages, orphans, bad, skipped)
    broken = set(found.broken_packages)
    if found.narrowed:
        # A cache file that does not exist yet is written whole by this run: every test that
        # shares it must run now, wherever it is, or it would be created half-way.
        targets, more_broken = sharers_of_new_files(bazel, workspace, targets,
                                                    found.query_flags)
        broken.update(more_broken)
    with tempfile.TemporaryDirectory(prefix="regen_cache_") as scratch:
        groups = group_by_cache(targets)
        log(f"{len(targets)} dump target(s) for {len(groups)} cache file(s) in {workspace}; "
            f"{plan.describe()}")
        for target in targets:
            log(f"  {target.label} -> {target.cache_path}")
        if args.dry_run:
            for line in skipped:
                log(f"  {line}")
            bep = Path(scratch) / "bep.json"
            log(f"would run: {args.bazel} test {' '.join(test_command(args, plan, bep, targets))}")
            return 0
        created = create_placeholders(targets, workspace)
        kept: set[Path] = set()
        harvest = Harvest({}, {})
        try:
            run_dumps(args, bazel, plan, targets, Path(scratch) / "bep.json", harvest)
            if found.narrowed:
                targets, more_broken = widen_where_entries_would_go(
                    args, bazel, plan, targets, harvest, workspace, created, Path(scratch),
                    found.query_flags)
                broken.update(more_broken)
                groups = group_by_cache(targets)
            subset = any(f.startswith("--test_filter") for f in args.bazel_flag)
            outcomes = [
                regenerate_group(group, harvest.results, harvest.status, workspace, args.check,
                                 placeholder=(workspace / path) in created, subset=subset)
                for path, group in groups.items()
            ]
            kept = {workspace / o.cache_path for o in outcomes if o.ok and not args.check}
        finally:
            # A placeholder that no regenerated cache replaced (a failed dump, or --check) is
            # undone: nothing is left behind that the user did not ask for.
            for path, before in created.items():
                if path in kept:
                    continue
                if before is None:
                    path.unlink(missing_ok=True)
                else:
                    write_atomic(path, before)
    if args.json:
        write_json(Path(args.json), outcomes)
    return report(outcomes, args.check, tuple(sorted(broken)), orphans, bad, skipped)


def skip_cpu_only(targets: list[DumpTarget], plan: Plan, patterns: Sequence[str]
                  ) -> tuple[list[DumpTarget], list[str]]:
    """Without a GPU (and no remote executor), XLA writes no autotuning results, so the
    dumps of backend "xla" could only fail: they are left out and named, unless the patterns
    name the test or its `.dump` (then it runs, and its failure says why)."""
    if plan.gpus or plan.delegated_to:
        return targets, []
    named = {normalize_label(p) for p in patterns}
    skipped = [t for t in targets if t.backend == "xla"
               and not named & {t.label, t.test_label}]
    if skipped:
        log(f"no GPU here: leaving out {len(skipped)} dump(s) of backend \"xla\"")
    return ([t for t in targets if t not in skipped],
            [f"{t.cache_path}: SKIPPED ({t.label}): backend \"xla\" and no GPU on this "
             "machine (XLA tunes nothing and writes no results on CPU); regenerate it on a GPU "
             f"host (`bazel run {t.test_label}.regen` there)" for t in skipped])


def sharers_of_new_files(bazel: Bazel, workspace: Path, targets: list[DumpTarget],
                         query_flags: Sequence[str]) -> tuple[list[DumpTarget], tuple[str, ...]]:
    """After a narrowed search (find_dump_targets): the dumps of every test in the workspace
    that shares a cache file that is missing or empty, so that the file is created with all
    of their entries; and the packages that failed to load during that search."""
    new_files = sorted({t.cache_path for t in targets
                        if not (workspace / t.cache_path).is_file()
                        or not (workspace / t.cache_path).read_bytes().strip()})
    if not new_files:
        return targets, ()
    log(f"{', '.join(new_files)} {'does' if len(new_files) == 1 else 'do'} not exist yet (or "
        "is empty): looking for every test that shares it in the whole workspace")
    wider = widen_search(bazel, new_files, query_flags)
    known = {t.label for t in targets}
    for target in wider.targets:
        if target.label not in known:
            log(f"  {target.label} -> {target.cache_path} (shares it)")
    return merge_targets(targets, wider.targets), wider.broken_packages


def widen_where_entries_would_go(
    args: argparse.Namespace, bazel: Bazel, plan: Plan, targets: list[DumpTarget],
    harvest: Harvest, workspace: Path, created: dict[Path, bytes | None], scratch: Path,
    query_flags: Sequence[str],
) -> tuple[list[DumpTarget], tuple[str, ...]]:
    """After a narrowed search (find_dump_targets): a cache file whose new version would lose
    entries might be shared by a test in a package that was not loaded, whose entries those
    are. Only for such files is the whole workspace searched (without Bazel's convenience
    symlinks), and the dumps found there run too. Returns the targets and the packages that
    failed to load during that search."""
    losing = []
    for path, group in group_by_cache(targets).items():
        trial = regenerate_group(group, harvest.results, harvest.status, workspace, check=True,
                                 placeholder=(workspace / path) in created)
        if trial.change is not None and trial.change.removed:
            losing.append(path)
    if not losing:
        return targets, ()
    log(f"{', '.join(losing)} would lose entries: looking for other tests that share "
        f"{'it' if len(losing) == 1 else 'them'} in the whole workspace before writing")
    wider = widen_search(bazel, losing, query_flags)
    known = {t.label for t in targets}
    extra = [t for t in wider.targets if t.label not in known]
    if extra:
        for target in extra:
            log(f"  {target.label} -> {target.cache_path} (shares it)")
        run_dumps(args, bazel, plan, extra, scratch / "bep_shared.json", harvest)
    else:
        log("no other test shares them: the entries are no longer used")
    return merge_targets(targets, extra), wider.broken_packages


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
