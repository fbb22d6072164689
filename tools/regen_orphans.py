"""Orphaned caches for //tools:regen_cache: committed cache files no autotuned test uses any more.

After a test is renamed or deleted its committed cache stays in the source tree, and nothing
would ever say so. regen_cache (and `--check`) therefore names every such file in the packages
it looked at, and fails.

How an orphan is found (docs/bazel.md, "Orphaned caches"):

1. The packages looked at are those the target patterns cover, read from the source tree
   (a `//team/...` pattern: every package below team/; `//team/pkg:t`: that package). Bazel's
   own output trees (the `bazel-*` convenience symlinks), hidden directories and `.bazelignore`
   entries are never entered.
2. The candidates are the files named like the macro's default cache, `*.autotune.textproto`,
   in those packages (an explicit `cache =` file with another name is not looked for).
3. A candidate is used when an autotuned test's `.dump` target regenerates it (its cache-path
   tag), or when any rule lists it directly (a plain `py_test` that loads it through `data` and
   its own flags, as examples/seed does). Rules of the packages looked at are asked first; only
   the files none of them uses are then looked up among the rules of the whole workspace
   (`//...`), so that a cache shared with a test elsewhere is never called an orphan.

A candidate nobody uses is an orphan. When a test of the same package has no cache file yet,
the orphan is most likely that test's cache under its old name: the advice is then
`git mv old new`, which keeps every entry, instead of a full re-tune. The same holds across
packages: a test moved to another package keeps its name, so an orphan anywhere in the
workspace with the file name of a test that has no cache yet is offered to it (moved_caches
finds those for a regen of the new package alone, which never looks at the old one).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from regen_bazel import (
    Bazel,
    DumpTarget,
    file_package,
    ignored_dirs,
    is_package,
    normalize_label,
    workspace_universe,
)

# The macro's default cache name is `<name>` + this suffix.
CACHE_FILE_SUFFIX = ".autotune.textproto"



@dataclass(frozen=True)
class Orphan:
    """A committed cache file that no rule uses, and the tests it may belong to now."""

    path: str  # relative to the workspace root
    renamed_to: tuple[DumpTarget, ...] = ()  # tests of its package that have no cache file
    unsure: bool = False  # some package failed to load, so a rule there might still use it

    def advice(self) -> str:
        """One line: the file, why it is reported, and what to do."""
        text = f"{self.path}: ORPHANED: no autotuned test (nor any other rule) uses it any more"
        if self.unsure:
            text += " (unless a rule in a package that failed to load does)"
        if len(self.renamed_to) == 1:
            (target,) = self.renamed_to
            how = ("renamed" if Path(target.cache_path).parent == Path(self.path).parent
                   else "moved to its package")
            return (f"{text}, and {target.test_label} has no cache yet: if that test is the old "
                    f"one {how}, keep its entries with `git mv {self.path} "
                    f"{target.cache_path}`; otherwise delete it with `git rm {self.path}`")
        if self.renamed_to:
            tests = ", ".join(t.test_label for t in self.renamed_to)
            return (f"{text}; if one of {tests} (which have no cache yet) is the old test "
                    f"renamed, `git mv {self.path}` to its cache file; otherwise "
                    f"`git rm {self.path}`")
        return f"{text}; delete it with `git rm {self.path}` (or point a test's `cache` at it)"


def pattern_scope(pattern: str) -> tuple[str, bool] | None:
    """(package directory, whether the pattern covers the packages below it) of an absolute
    pattern of the main repository; None for another repository's."""
    pattern = normalize_label(pattern)
    if not pattern.startswith("//"):
        return None
    body = pattern[2:]
    package, _, target = body.partition(":")
    if package == "..." or package.endswith("/..."):
        return package.removesuffix("...").rstrip("/"), True
    return package, target in ("...", "*", "all-targets")


def scanned_universe(patterns: Sequence[str], workspace: Path | None = None) -> str:
    """A query expression for every rule of the packages the patterns cover (`//...` without
    Bazel's convenience symlinks when `workspace` is given: workspace_universe)."""
    parts = []
    for pattern in patterns:
        scope = pattern_scope(pattern.removeprefix("-"))
        if scope is None:
            continue
        package, recursive = scope
        if pattern.startswith("-"):
            if parts:  # as `bazel test` reads it: removed from the patterns before it
                excluded = f"//{package}/..." if recursive else f"//{package}:all"
                parts = [f"({' + '.join(dict.fromkeys(parts))}) - {excluded}"]
        elif recursive and not package and workspace is not None:
            parts.append(workspace_universe(workspace))
        elif recursive:
            parts.append(f"//{package}/..." if package else "//...")
        else:
            parts.append(f"//{package}:all")
    return " + ".join(dict.fromkeys(parts))


def _excluded(path: str, patterns: Sequence[str]) -> bool:
    """Whether a workspace-relative file lies in a package an exclusion (`-//pkg/...`,
    `-//pkg:all`) removes."""
    directory = Path(path).parent.as_posix()
    directory = "" if directory == "." else directory
    for pattern in patterns:
        scope = pattern_scope(pattern[1:]) if pattern.startswith("-") else None
        if scope is None:
            continue
        package, recursive = scope
        if directory == package or recursive and (not package
                                                  or directory.startswith(package + "/")):
            return True
    return False


def candidate_files(workspace: Path, patterns: Sequence[str]) -> list[str]:
    """The `*.autotune.textproto` files of the packages the patterns cover (workspace-relative,
    sorted): each file belongs to the nearest directory above it with a BUILD file."""
    ignored = ignored_dirs(workspace)
    found: set[str] = set()
    for pattern in patterns:
        scope = pattern_scope(pattern)
        if scope is None:
            continue
        package, recursive = scope
        top = workspace / package
        if not top.is_dir() or not is_package(top) and not recursive:
            continue
        for directory, subdirs, files in os.walk(top):
            here = Path(directory)
            # Never Bazel's output trees (bazel-* symlinks: os.walk does not follow links),
            # hidden directories or .bazelignore'd ones; without `...`, no sub-package either.
            subdirs[:] = sorted(
                d for d in subdirs
                if not d.startswith(".") and not (here / d).is_symlink()
                and here / d not in ignored
                and (recursive or not is_package(here / d)))
            found.update(
                (here / name).relative_to(workspace).as_posix() for name in files
                if name.endswith(CACHE_FILE_SUFFIX) and _owning_package(workspace, here, top))
    return sorted(p for p in found if not _excluded(p, patterns))


def _owning_package(workspace: Path, directory: Path, top: Path) -> bool:
    """Whether a file in `directory` belongs to a package at or below `top`."""
    for candidate in (directory, *directory.parents):
        if is_package(candidate):
            return candidate == top or top in candidate.parents
        if candidate in (top, workspace):
            return False
    return False


def file_label(path: str, workspace: Path) -> str:
    """The label of a source file: its package is the nearest directory with a BUILD file."""
    directory = file_package(path, workspace)
    name = path[len(directory) + 1:] if directory else path
    return f"//{directory}:{name}"


def files_used_by_rules(bazel: Bazel, universe: str, flags: Sequence[str]) -> tuple[set[str],
                                                                                     bool]:
    """The source files that rules of `universe` list directly, as labels, and whether every
    package loaded."""
    result = bazel.query(*flags, f'kind("source file", deps(kind(rule, {universe}), 1))',
                         "--output=label")
    return {normalize_label(label) for label in result.stdout.split()}, \
        not result.broken_packages


def find_orphans(bazel: Bazel, workspace: Path, patterns: Sequence[str],
                 targets: Sequence[DumpTarget], flags: Sequence[str] = ()) -> list[Orphan]:
    """The orphaned cache files of the packages `patterns` cover; `targets` are the dump targets
    regen_cache found for them (with every test sharing their files)."""
    used = {t.cache_path for t in targets}
    candidates = [path for path in candidate_files(workspace, patterns) if path not in used]
    if not candidates:
        return []
    labels = {path: file_label(path, workspace) for path in candidates}
    universe = scanned_universe(patterns, workspace)
    whole = workspace_universe(workspace)
    listed, complete = files_used_by_rules(bazel, universe, flags)
    candidates = [path for path in candidates if labels[path] not in listed]
    if candidates and universe != whole:
        # A rule in another package may list the file (a cache shared across packages).
        print(f"regen_cache: {len(candidates)} cache file(s) that no test of {universe} uses; "
              "looking for rules that use them in the whole workspace (//...)",
              file=sys.stderr, flush=True)
        listed, complete = files_used_by_rules(bazel, whole, flags)
        candidates = [path for path in candidates if labels[path] not in listed]
    missing = [t for t in targets if not (workspace / t.cache_path).is_file()]
    orphans = []
    for path in candidates:
        package = labels[path][2:].split(":", 1)[0]
        renamed = tuple(t for t in missing
                        if t.package == package and t.cache_path.endswith(CACHE_FILE_SUFFIX))
        moved = tuple(t for t in missing if t.package != package
                      and Path(t.cache_path).name == Path(path).name)
        orphans.append(Orphan(path, renamed or moved, unsure=not complete))
    return orphans


def moved_caches(bazel: Bazel, workspace: Path, targets: Sequence[DumpTarget],
                 flags: Sequence[str] = (), known: Sequence[str] = ()) -> list[Orphan]:
    """Committed caches outside the packages looked at that no rule uses and that carry the
    file name of one of `targets` without a cache yet: that test most likely moved from their
    package, and `git mv` keeps its entries. `known`: orphans already reported. One query of
    the whole workspace, only when such a file exists."""
    missing = [t for t in targets if not (workspace / t.cache_path).is_file()]
    names = {Path(t.cache_path).name for t in missing}
    if not names:
        return []
    own = {t.cache_path for t in targets} | set(known)
    found = [path for path in candidate_files(workspace, ["//..."])
             if Path(path).name in names and path not in own]
    if not found:
        return []
    listed, complete = files_used_by_rules(bazel, workspace_universe(workspace), flags)
    return [Orphan(path, tuple(t for t in missing if Path(t.cache_path).name == Path(path).name),
                   unsure=not complete)
            for path in found if file_label(path, workspace) not in listed]
