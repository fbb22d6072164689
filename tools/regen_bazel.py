"""Talking to Bazel for //tools:regen_cache: find dump targets, run them, read their outputs.

regen_cache drives `bazel test` from inside `bazel run` (Bazel releases its server lock before
it starts the binary), so the dumps run exactly as the test would: same env, same sandbox, same
runfiles, with the outputs landing in bazel-testlogs. Standard library only.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
import xml.etree.ElementTree as ElementTree
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# Kept in sync with rules/private/autotuned_py_test.bzl and rules/private/flags.bzl.
AUTOTUNED_TAG = "autotuned"
DUMP_TAG = "autotune_dump"
CACHE_PATH_TAG_PREFIX = "autotune_cache_path="
DUMP_FILE_NAME = "autotune_cache.textproto"
DUMP_SUFFIX = ".dump"

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


def normalize_label(label: str) -> str:
    """Drops the main-repository prefix ("@//", "@@//") that newer Bazels print."""
    for prefix in ("@@//", "@//"):
        if label.startswith(prefix):
            return label[len(prefix) - 2 :]
    return label


def label_parts(label: str) -> tuple[str, str]:
    """Splits "//pkg/sub:name" into ("pkg/sub", "name")."""
    label = normalize_label(label)
    if not label.startswith("//") or ":" not in label:
        raise RegenError(f"{label!r} is not an absolute label of this workspace (//pkg:name)")
    package, name = label[2:].split(":", 1)
    return package, name


@dataclass(frozen=True)
class DumpTarget:
    """One `<name>.dump` target and the committed cache it regenerates."""

    label: str
    cache_path: str  # relative to the workspace root

    @property
    def test_label(self) -> str:
        """The load-mode test the dump belongs to."""
        return self.label.removesuffix(DUMP_SUFFIX)


class Bazel:
    """Runs one Bazel binary in one workspace."""

    def __init__(self, binary: str, workspace: Path, startup_flags: Sequence[str] = ()) -> None:
        self.binary = binary
        self.workspace = workspace
        self.startup_flags = list(startup_flags)

    def command(self, verb: str, *args: str) -> list[str]:
        """The argv of `bazel <startup flags> <verb> <args>`."""
        return [self.binary, *self.startup_flags, verb, *args]

    def capture(self, verb: str, *args: str) -> str:
        """Runs a query-like command and returns its stdout; raises RegenError on failure."""
        argv = self.command(verb, *args)
        try:
            done = subprocess.run(
                argv, cwd=self.workspace, capture_output=True, text=True, check=False
            )
        except FileNotFoundError:
            raise RegenError(
                f"Bazel binary {self.binary!r} not found; pass --bazel=PATH (bazel or bazelisk)."
            ) from None
        if done.returncode != 0:
            raise BazelCommandError(
                f"`{' '.join(argv)}` failed (exit {done.returncode}) in {self.workspace}:\n"
                f"{done.stderr.strip()}",
                done.returncode,
            )
        return done.stdout

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


def _union(patterns: Sequence[str]) -> str:
    """A query expression for the union of target patterns."""
    for pattern in patterns:
        if pattern.startswith("-"):
            raise RegenError(
                f"pattern {pattern!r}: exclusions are not supported; list what to regenerate."
            )
    return " + ".join(patterns)


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
        found[label] = DumpTarget(label=label, cache_path=paths[0])
    return [found[label] for label in sorted(found)]


def find_dump_targets(
    bazel: Bazel, patterns: Sequence[str], flags: Sequence[str] = ()
) -> list[DumpTarget]:
    """The dump targets for `patterns`: dumps they name, plus the dumps of autotuned tests
    they name. With no pattern: every autotuned test in the workspace (`//...`).

    `flags` (the user's --bazel_flag values) go to `bazel query` too, so that flags that change
    what is loaded (--override_repository, --enable_bzlmod, ...) apply to it. Many `bazel test`
    flags are not query options, though (--test_env, or --config=X when only `build:X` is
    defined): when Bazel rejects the command line (exit 2), the query runs without them.
    """
    universe = _union(patterns or ["//..."])
    tests_expression = f'attr(tags, "{tag_regex(AUTOTUNED_TAG)}", {universe})'
    flags = list(flags)
    try:
        tests = bazel.capture("query", *flags, tests_expression, "--output=label").split()
    except BazelCommandError as e:
        if not flags or e.returncode != BAZEL_COMMAND_LINE_ERROR:
            raise
        print(f"regen_cache: `bazel query` does not take {' '.join(flags)}; querying without "
              "--bazel_flag values (they still go to `bazel test`)", file=sys.stderr, flush=True)
        flags = []
        tests = bazel.capture("query", tests_expression, "--output=label").split()
    dumps_of_tests = [normalize_label(t) + DUMP_SUFFIX for t in tests]
    expression = f'attr(tags, "{tag_regex(DUMP_TAG)}", {_union([universe, *dumps_of_tests])})'
    return parse_dump_targets(bazel.capture("query", *flags, expression, "--output=xml"))


def _bep_events(bep_json: Path) -> list[dict]:
    """The events of a --build_event_json_file (one JSON object per line); [] if absent."""
    if not bep_json.is_file():
        return []
    events = []
    for line in bep_json.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events


def read_test_statuses(bep_json: Path) -> dict[str, str]:
    """Per-label overall status ("PASSED", "FAILED", ...) from a --build_event_json_file."""
    statuses: dict[str, str] = {}
    for event in _bep_events(bep_json):
        summary_id = event.get("id", {}).get("testSummary")
        if summary_id and "testSummary" in event:
            label = normalize_label(summary_id.get("label", ""))
            statuses[label] = event["testSummary"].get("overallStatus", "UNKNOWN")
    return statuses


def read_test_dirs(bep_json: Path) -> dict[str, Path]:
    """Per-label bazel-testlogs directory, taken from the test.log URI in the build events.

    More robust than `bazel info bazel-testlogs`, which would need the same configuration
    flags as the test run (and `info` rejects test-only flags).
    """
    directories: dict[str, Path] = {}
    for event in _bep_events(bep_json):
        result_id = event.get("id", {}).get("testResult")
        if not result_id or "testResult" not in event:
            continue
        for output in event["testResult"].get("testActionOutput", []):
            uri = output.get("uri", "")
            if output.get("name") == "test.log" and uri.startswith("file://"):
                log = Path(urllib.parse.unquote(urllib.parse.urlparse(uri).path))
                directories[normalize_label(result_id.get("label", ""))] = log.parent
    return directories


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
