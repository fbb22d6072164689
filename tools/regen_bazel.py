"""Talking to Bazel for //tools:regen_cache: find dump targets, run them, read their outputs.

regen_cache drives `bazel test` from inside `bazel run` (Bazel releases its server lock before
it starts the binary), so the dumps run exactly as the test would: same env, same sandbox, same
runfiles, with the outputs landing in bazel-testlogs. Standard library only.
"""

from __future__ import annotations

import os
import posixpath
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from regen_bep import (  # noqa: F401 - read_test_* are part of this module's interface
    bep_events,
    normalize_label,
    read_test_dirs,
    read_test_statuses,
    skipped_patterns,
)

# The names rules/private/constants.bzl and dump_test.bzl give the macro's targets;
# tests/rules/test_constants.py fails when they differ.
AUTOTUNED_TAG = "autotuned"
DUMP_TAG = "autotune_dump"
CACHE_PATH_TAG_PREFIX = "autotune_cache_path="
BACKEND_TAG_PREFIX = "autotune_backend="
DUMP_FILE_NAME = "autotune_cache.textproto"
DUMP_TARGET_SUFFIX = ".dump"

# `bazel test` flags that find_dump_targets does not pass to `bazel query`.
QUERY_IGNORED_FLAG_PREFIXES = ("--remote_", "--jobs", "-j", "--local_test_jobs")

# Bazel's exit code when --keep_going let a command finish with some errors (partial results).
BAZEL_PARTIAL_SUCCESS = 3

_WORKSPACE_MARKERS = ("MODULE.bazel", "WORKSPACE", "WORKSPACE.bazel", "REPO.bazel")


class RegenError(Exception):
    """Something regen_cache cannot do; the message names the target/file and the fix."""


class BazelCommandError(RegenError):
    """A Bazel command exited non-zero; `returncode` is its exit code."""

    def __init__(self, message: str, returncode: int) -> None:
        super().__init__(message)
        self.returncode = returncode


# Bazel's exit code for a bad command line (e.g. an option the command does not take).
BAZEL_COMMAND_LINE_ERROR = 2


def tag_regex(tag: str) -> str:
    """A `bazel query attr(tags, ...)` regex matching exactly one tag in "[a, b, c]"."""
    return f"[\\[ ]{tag}[,\\]]"


def find_workspace(env: Mapping[str, str], cwd: Path) -> Path:
    """The workspace to regenerate: $BUILD_WORKSPACE_DIRECTORY under `bazel run`, else the
    nearest directory above `cwd` holding MODULE.bazel or WORKSPACE."""
    if env.get("BUILD_WORKSPACE_DIRECTORY"):
        return Path(env["BUILD_WORKSPACE_DIRECTORY"])
    for directory in (cwd, *cwd.parents):
        if any((directory / marker).is_file() for marker in _WORKSPACE_MARKERS):
            return directory
    raise RegenError(
        f"no Bazel workspace at or above {cwd}: run `bazel run //tools:regen_cache` from the "
        "workspace, or pass --workspace=DIR."
    )


def working_package(env: Mapping[str, str], workspace: Path) -> str:
    """The package directory the user ran `bazel run` from, relative to the workspace ("" at
    its root): $BUILD_WORKING_DIRECTORY, when it lies inside `workspace`."""
    working = env.get("BUILD_WORKING_DIRECTORY")
    if not working:
        return ""
    try:
        relative = Path(working).resolve().relative_to(workspace.resolve())
    except ValueError:
        return ""
    return "" if str(relative) == "." else relative.as_posix()


def absolute_pattern(pattern: str, package: str) -> str:
    """A target pattern as `bazel test` reads it when run in directory `package`: relative
    patterns (`...`, `:t`, `sub/...`, `sub:t`) are resolved from there, absolute ones (`//`,
    `@repo//`) are kept."""
    if pattern.startswith("-"):  # an exclusion, read from the same directory
        return "-" + absolute_pattern(pattern[1:], package)
    if pattern.startswith(("//", "@")):
        return pattern
    if pattern.startswith(":") or not package:
        return f"//{package}{pattern}"
    return f"//{package}/{pattern}"


def label_parts(label: str) -> tuple[str, str]:
    """Splits "//pkg/sub:name" into ("pkg/sub", "name")."""
    label = normalize_label(label)
    if not label.startswith("//") or ":" not in label:
        raise RegenError(f"{label!r} is not an absolute label of this workspace (//pkg:name)")
    package, name = label[2:].split(":", 1)
    return package, name


def label_repository(label: str) -> str:
    """The repository a label names without "@" ("" for the main repository)."""
    label = normalize_label(label)
    if not label.startswith("@"):
        return ""
    return label.lstrip("@").split("//", 1)[0]


@dataclass(frozen=True)
class DumpTarget:
    """One `<name>.dump` target and the committed cache it regenerates."""

    label: str
    cache_path: str  # relative to the workspace root
    backend: str = "triton"

    @property
    def test_label(self) -> str:
        """The load-mode test the dump belongs to."""
        return self.label.removesuffix(DUMP_TARGET_SUFFIX)

    @property
    def package(self) -> str:
        """The dump target's package."""
        return label_parts(self.label)[0]


@dataclass(frozen=True)
class Query:
    """What `bazel query --keep_going` found, the packages it could not load, and the target
    patterns that named nothing (a typo: `//tema_a/...`), with Bazel's reason."""

    stdout: str
    broken_packages: tuple[str, ...] = ()
    bad_patterns: tuple[tuple[str, str], ...] = ()


# How Bazel reports a target pattern that names nothing under --keep_going: "ERROR: Skipping
# '//tema/...': no targets found beneath 'tema'" (also "no such package 'tema': BUILD file not
# found ..." and "no such target '//pkg:nope': ..."). That is a mistyped pattern, not a package
# that failed to load.
_SKIPPED_PATTERN = re.compile(r"ERROR: Skipping '([^']+)': (.+)")


def bad_patterns(stderr: str) -> tuple[tuple[str, str], ...]:
    """(pattern, Bazel's reason) for every pattern a `--keep_going` query skipped."""
    found = {}
    for line in stderr.splitlines():
        match = _SKIPPED_PATTERN.search(line)
        if match:
            found.setdefault(match.group(1), match.group(2).strip())
    return tuple(sorted(found.items()))


# How Bazel names a package it could not load, in `query --keep_going` errors.
_BROKEN_PACKAGE_PATTERNS = (
    re.compile(r"error loading package '([^']*)'"),
    re.compile(r"no such package '([^']*)'"),
    re.compile(r"package contains errors: (\S+)"),
    re.compile(r"ERROR: (\S+?)/BUILD(?:\.bazel)?:\d+:\d+"),
)


def broken_packages(stderr: str, workspace: Path) -> tuple[str, ...]:
    """The packages a `bazel query --keep_going` reported errors in, as "//pkg" labels."""
    found: set[str] = set()
    for line in stderr.splitlines():
        if "ERROR" not in line or _SKIPPED_PATTERN.search(line):
            continue
        for pattern in _BROKEN_PACKAGE_PATTERNS:
            match = pattern.search(line)
            if not match:
                continue
            name = match.group(1)
            if name.startswith("/"):
                try:
                    name = str(Path(name).relative_to(workspace))
                except ValueError:
                    continue
                name = "" if name == "." else name
            found.add(name if name.startswith(("@", "//")) else "//" + name)
            break
    return tuple(sorted(found))


class Bazel:
    """Runs one Bazel binary in one workspace."""

    def __init__(self, binary: str, workspace: Path, startup_flags: Sequence[str] = ()) -> None:
        self.binary = binary
        self.workspace = workspace
        self.startup_flags = list(startup_flags)

    def command(self, verb: str, *args: str) -> list[str]:
        """The argv of `bazel <startup flags> <verb> <args>`."""
        return [self.binary, *self.startup_flags, verb, *args]

    def _run_captured(self, argv: list[str], ok: tuple[int, ...]) -> subprocess.CompletedProcess:
        """Runs `argv` with its output captured; raises RegenError when Bazel is missing and
        BazelCommandError when it exits with a code not in `ok`."""
        try:
            done = subprocess.run(
                argv, cwd=self.workspace, capture_output=True, text=True, check=False
            )
        except FileNotFoundError:
            raise RegenError(
                f"Bazel binary {self.binary!r} not found; pass --bazel=PATH (bazel or bazelisk)."
            ) from None
        if done.returncode not in ok:
            raise BazelCommandError(
                f"`{' '.join(argv)}` failed (exit {done.returncode}) in {self.workspace}:\n"
                f"{done.stderr.strip()}",
                done.returncode,
            )
        return done

    def capture(self, verb: str, *args: str) -> str:
        """Runs a query-like command and returns its stdout; raises RegenError on failure."""
        return self._run_captured(self.command(verb, *args), ok=(0,)).stdout

    def query(self, *args: str) -> Query:
        """`bazel query --keep_going <args>`: packages that fail to load are reported, not fatal.

        Raises BazelCommandError when the query failed as a whole (not exit 0 or 3).
        """
        with tempfile.TemporaryDirectory(prefix="regen_query_") as scratch:
            bep = Path(scratch) / "bep.json"
            done = self._run_captured(
                self.command("query", "--keep_going", f"--build_event_json_file={bep}", *args),
                ok=(0, BAZEL_PARTIAL_SUCCESS))
            events = bep_events(bep)
        if not done.returncode:
            return Query(done.stdout)
        # Bazel's own errors, so that "see above" in the summary points somewhere.
        sys.stderr.write(done.stderr)
        broken = broken_packages(done.stderr, self.workspace)
        # The skipped patterns from the build events (Bazel 4.2.3 has them), their error
        # lines only without events.
        skipped = skipped_patterns(events) if events else bad_patterns(done.stderr)
        if not broken and not skipped:
            broken = ("(a package Bazel did not name; see its errors above)",)
        return Query(done.stdout, broken, skipped)

    def stream(self, verb: str, *args: str) -> int:
        """Runs a command with Bazel's own progress output on our stderr; returns its exit code."""
        argv = self.command(verb, *args)
        try:
            return subprocess.run(
                argv, cwd=self.workspace, stdout=sys.stderr, check=False
            ).returncode
        except FileNotFoundError:
            raise RegenError(
                f"Bazel binary {self.binary!r} not found; pass --bazel=PATH (bazel or bazelisk)."
            ) from None


_BUILD_FILES = ("BUILD.bazel", "BUILD")

# The names Bazel gives its convenience symlinks in the workspace root (bazel-bin, bazel-out,
# bazel-testlogs, bazel-<workspace>), with the default --symlink_prefix.
CONVENIENCE_SYMLINK_PREFIX = "bazel-"

# Version-control directories of the workspace root: no package lives there.
_VCS_DIRS = (".git", ".hg", ".svn", ".jj")


def is_package(directory: Path) -> bool:
    """Whether `directory` holds a BUILD file."""
    return any((directory / name).is_file() for name in _BUILD_FILES)


def holds_packages(directory: Path, ignored: set[Path] | frozenset[Path] = frozenset()) -> bool:
    """Whether `directory` or a directory below it holds a BUILD file (symlinks not followed,
    .bazelignore'd directories left out). `//docs/...` over a directory with none is an error
    to Bazel ("no targets found beneath"), which `//...` never is."""
    for root, dirs, _ in os.walk(directory):
        here = Path(root)
        if is_package(here):
            return True
        dirs[:] = [d for d in dirs if here / d not in ignored and not (here / d).is_symlink()]
    return False


def file_package(path: str, workspace: Path) -> str:
    """The package of a source file (workspace-relative path): the nearest directory above it
    that holds a BUILD file ("" for the root package)."""
    directory = posixpath.dirname(path)
    while directory and not is_package(workspace / directory):
        directory = posixpath.dirname(directory)
    return directory


def ignored_dirs(workspace: Path) -> set[Path]:
    """The directories .bazelignore lists (Bazel never loads packages there)."""
    ignore = workspace / ".bazelignore"
    if not ignore.is_file():
        return set()
    return {workspace / line.strip().rstrip("/") for line in ignore.read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")}


def is_output_tree(entry: Path) -> bool:
    """Whether a workspace-root entry is one of Bazel's convenience symlinks (its output trees):
    a symlink named bazel-*. With an explicit --output_base or --output_user_root, Bazel 4
    does not recognise `bazel-<workspace>` as its own and loads the external repositories
    under it as packages of the workspace (bazel#15867)."""
    return entry.is_symlink() and entry.name.startswith(CONVENIENCE_SYMLINK_PREFIX)


def workspace_universe(workspace: Path) -> str:
    """`//...` of the main repository without Bazel's convenience symlinks: the union of the
    root package and one `//<dir>/...` per top-level directory that holds a package, leaving out
    `bazel-*` symlinks, .bazelignore'd directories (Bazel applies .bazelignore below the top
    level itself) and directories with no BUILD file anywhere below (Bazel calls
    `//docs/...` over one an error, where `//...` skips it)."""
    ignored = ignored_dirs(workspace)
    parts = ["//:all"] if is_package(workspace) else []
    for entry in sorted(workspace.iterdir(), key=lambda e: e.name):
        if not entry.is_dir() or is_output_tree(entry) or entry in ignored:
            continue
        if entry.name in _VCS_DIRS or not holds_packages(entry, ignored):
            continue  # docs/, .github/, scripts/: no package, so nothing of `//...` is there
        parts.append(f"//{entry.name}/...")
    return " + ".join(parts) if parts else "//..."


def without_output_trees(pattern: str, workspace: Path) -> str:
    """A pattern as a query universe: `//...` (the whole main repository) becomes
    workspace_universe(), so that Bazel's convenience symlinks are never loaded."""
    return workspace_universe(workspace) if normalize_label(pattern) == "//..." else pattern


def _union(patterns: Sequence[str]) -> str:
    """A query expression for target patterns as `bazel test` reads them, left to right: each
    pattern adds its targets, each `-PATTERN` removes its own from those before it
    (`//... -//third_party/...`)."""
    if patterns and patterns[0].startswith("-"):
        raise RegenError(
            f"pattern {patterns[0]!r}: an exclusion removes targets from the patterns before it, "
            "and none comes before it; put what to regenerate first "
            f"(e.g. `//... {patterns[0]}`).")
    expression = ""
    for pattern in patterns:
        if pattern.startswith("-"):
            expression = f"({expression}) - {pattern[1:]}"
        else:
            expression = f"{expression} + {pattern}" if expression else pattern
    return expression


def parse_dump_targets(query_xml: str) -> list[DumpTarget]:
    """Reads `bazel query --output=xml` of dump targets into DumpTargets (sorted by label)."""
    root = ElementTree.fromstring(query_xml)
    found: dict[str, DumpTarget] = {}
    for rule in root.iter("rule"):
        label = normalize_label(rule.get("name", ""))
        tags = [
            s.get("value", "")
            for node in rule.findall("list")
            if node.get("name") == "tags"
            for s in node.findall("string")
        ]
        prefix = CACHE_PATH_TAG_PREFIX
        paths = [t[len(prefix) :] for t in tags if t.startswith(prefix)]
        if DUMP_TAG not in tags:
            continue
        if len(paths) != 1:
            raise RegenError(
                f"{label}: expected one '{CACHE_PATH_TAG_PREFIX}...' tag (set by "
                f"autotuned_py_test), found {len(paths)}; regenerate its BUILD file with the macro."
            )
        backends = [t[len(BACKEND_TAG_PREFIX):] for t in tags if t.startswith(BACKEND_TAG_PREFIX)]
        found[label] = DumpTarget(label=label, cache_path=paths[0],
                                  backend=backends[0] if backends else "triton")
    return [found[label] for label in sorted(found)]


@dataclass(frozen=True)
class Found:
    """The dump targets to run, and the packages whose targets could not be looked at."""

    targets: list[DumpTarget]
    broken_packages: tuple[str, ...] = ()
    # The --bazel_flag values `bazel query` took (for later queries).
    query_flags: tuple[str, ...] = ()
    # Patterns that named nothing, with Bazel's reason.
    bad_patterns: tuple[tuple[str, str], ...] = ()
    # Whether tests sharing a cache file were looked for only in the packages of the cache
    # files and of the tests asked for (not in the whole workspace): see widen_search.
    narrowed: bool = False


def check_main_repository(targets: Sequence[DumpTarget]) -> None:
    """Refuses dumps of another repository, in one sentence that says why and what to do."""
    for target in targets:
        repository = label_repository(target.label)
        if repository:
            in_repository = target.test_label.split("//", 1)[1]
            raise RegenError(
                f"{target.label} belongs to repository @{repository}, and regen_cache writes "
                "caches only into the main workspace's source tree ($BUILD_WORKSPACE_DIRECTORY), "
                f"not into @{repository}'s; run the regen from a checkout of that repository "
                f"as its main workspace (`bazel run //{in_repository}.regen` there)."
            )


def cache_path_regex(cache_path: str) -> str:
    """A tags regex matching exactly the CACHE_PATH_TAG_PREFIX tag of `cache_path`."""
    return tag_regex(re.escape(CACHE_PATH_TAG_PREFIX + cache_path))


def find_dump_targets(
    bazel: Bazel, patterns: Sequence[str], flags: Sequence[str] = ()
) -> Found:
    """The dump targets for `patterns`: dumps they name, plus the dumps of autotuned tests
    they name, plus the other dumps that write the same cache file and live in the cache
    file's own package or in a package of the tests asked for (a cache shared by several tests
    holds the union of their entries, so all of them must run). With no pattern (regen_cache
    always passes one: `...` where the user ran it): the whole workspace.

    Only those packages are loaded: not `//...`, which is slow in a large repository, fails on
    another team's broken package, and walks into Bazel's own `bazel-<workspace>` tree when the
    output base is set explicitly. A test in yet another package that shares the file can only
    matter if the new file would lose entries; regen_cache then widens the search to the whole
    workspace (`widen_search`) before it writes anything. `//...` itself is read without Bazel's
    convenience symlinks (workspace_universe).

    Queries run with --keep_going: a package that fails to load is listed in the result
    (`broken_packages`), a pattern that names nothing in `bad_patterns`, and the others are
    still regenerated.

    `flags` (the user's --bazel_flag values) go to `bazel query` too, so that flags that change
    what is loaded (--override_repository, --enable_bzlmod, ...) apply to it. Many `bazel test`
    flags are not query options, though (--test_env, or --config=X when only `build:X` is
    defined): when Bazel rejects the command line (exit 2), the query runs without them.
    """
    workspace = bazel.workspace
    whole = [p if p.startswith("-") else without_output_trees(p, workspace)
             for p in patterns or ["//..."]]
    universe = _union(whole)
    tests_expression = f'attr(tags, "{tag_regex(AUTOTUNED_TAG)}", {universe})'
    # Flags about where and how many actions run mean nothing to a query (and Bazel would
    # contact the remote executor for it).
    flags = [flag for flag in flags if not flag.startswith(QUERY_IGNORED_FLAG_PREFIXES)]
    try:
        tests = bazel.query(*flags, tests_expression, "--output=label")
    except BazelCommandError as e:
        if not flags or e.returncode != BAZEL_COMMAND_LINE_ERROR:
            raise
        print(f"regen_cache: `bazel query` does not take {' '.join(flags)}; querying without "
              "--bazel_flag values (they still go to `bazel test`)", file=sys.stderr, flush=True)
        flags = []
        tests = bazel.query(tests_expression, "--output=label")
    broken = set(tests.broken_packages)
    skipped = dict(tests.bad_patterns)
    dumps_of_tests = [normalize_label(t) + DUMP_TARGET_SUFFIX for t in tests.stdout.split()]
    expression = f'attr(tags, "{tag_regex(DUMP_TAG)}", {_union([universe, *dumps_of_tests])})'
    dumps = bazel.query(*flags, expression, "--output=xml")
    broken.update(dumps.broken_packages)
    for pattern, reason in dumps.bad_patterns:
        skipped.setdefault(pattern, reason)
    targets = parse_dump_targets(dumps.stdout)
    check_main_repository(targets)
    narrowed = False
    if targets and "//..." not in [normalize_label(p) for p in patterns or ["//..."]]:
        # Tests sharing a cache file with the ones asked for, in the packages where they can
        # be without loading the workspace: the cache file's own package and the packages of
        # the tests found.
        packages = {file_package(t.cache_path, workspace) for t in targets}
        packages.update(t.package for t in targets)
        packages = {p for p in packages if is_package(workspace / p)}
        siblings = sharing_dumps(bazel, {t.cache_path for t in targets},
                                 " + ".join(f"//{p}:all" for p in sorted(packages)), flags)
        broken.update(siblings.broken_packages)
        targets = merge_targets(targets, siblings.targets)
        narrowed = True
    return Found(targets, tuple(sorted(broken)), tuple(flags), tuple(sorted(skipped.items())),
                 narrowed)


def merge_targets(targets: Sequence[DumpTarget], more: Sequence[DumpTarget]) -> list[DumpTarget]:
    """The union of two lists of dump targets, sorted by label."""
    by_label = {t.label: t for t in targets}
    for target in more:
        by_label.setdefault(target.label, target)
    return [by_label[label] for label in sorted(by_label)]


def sharing_dumps(bazel: Bazel, cache_paths: set[str] | Sequence[str], universe: str,
                  flags: Sequence[str] = ()) -> Found:
    """The dump targets in `universe` that regenerate any of `cache_paths`."""
    expression = " + ".join(f'attr(tags, "{cache_path_regex(path)}", {universe})'
                            for path in sorted(cache_paths))
    result = bazel.query(*flags, expression, "--output=xml")
    targets = parse_dump_targets(result.stdout)
    check_main_repository(targets)
    return Found(targets, result.broken_packages, tuple(flags))


def widen_search(bazel: Bazel, cache_paths: Sequence[str], flags: Sequence[str] = ()) -> Found:
    """Every dump target of the whole workspace (without Bazel's convenience symlinks) that
    regenerates one of `cache_paths`: what regen_cache asks before it writes a file that would
    lose entries after a narrowed search (find_dump_targets)."""
    return sharing_dumps(bazel, cache_paths, workspace_universe(bazel.workspace), flags)


def outputs_dir(testlogs: Path, label: str) -> Path:
    """bazel-testlogs/<pkg>/<name> for a test label."""
    package, name = label_parts(label)
    return testlogs / package / name


def read_dump(test_dir: Path, file_name: str = DUMP_FILE_NAME) -> bytes | None:
    """The dumped cache in a test's bazel-testlogs directory, from either outputs layout.

    Bazel < 8 zips undeclared outputs into test.outputs/outputs.zip; with
    --nozip_undeclared_test_outputs (Bazel 8's default) the files sit in test.outputs/
    directly. None when neither has it.
    """
    directory = test_dir / "test.outputs"
    plain = directory / file_name
    if plain.is_file():
        return plain.read_bytes()
    archive = directory / "outputs.zip"
    if archive.is_file():
        try:
            with zipfile.ZipFile(archive) as zipped:
                for member in zipped.namelist():
                    if member == file_name or member.endswith("/" + file_name):
                        return zipped.read(member)
        except zipfile.BadZipFile as e:
            raise RegenError(f"{archive}: not a readable zip ({e}); rerun the dump.") from None
    return None
