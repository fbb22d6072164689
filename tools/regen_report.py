"""The outcome of a regen: what happened to each committed cache file, and the summary that
//tools:regen_cache prints (and writes as JSON with --json)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from regen_bazel import DumpTarget
from regen_diff import Change, Kept
from regen_orphans import Orphan


@dataclass(frozen=True)
class Outcome:
    """What happened to one committed cache file (written by one or several dump targets)."""

    targets: tuple[DumpTarget, ...]
    status: str
    change: Change | None = None
    problem: str = ""
    kept: Kept = Kept()
    # What the regen did besides writing (a broken file replaced, a symlink written through).
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the cache was regenerated (or found unchanged)."""
        return self.change is not None

    @property
    def cache_path(self) -> str:
        """The cache file, relative to the workspace root."""
        return self.targets[0].cache_path

    @property
    def labels(self) -> str:
        """The dump targets, for the summary."""
        return ", ".join(t.label for t in self.targets)


def write_json(path: Path, outcomes: list[Outcome]) -> None:
    """The per-file summary for scripts (--json=PATH)."""
    files = [{"path": o.cache_path, "targets": [t.label for t in o.targets], "ok": o.ok,
              "problem": o.problem, "notes": list(o.notes), "kept": o.kept.count,
              "kept_by": dict(o.kept.by),
              "dropped": o.kept.dropped, "dropped_kernels": list(o.kept.dropped_kernels),
              "change": None if o.change is None else vars(o.change)} for o in outcomes]
    path.write_text(json.dumps({"files": files}, indent=2, sort_keys=True) + "\n",
                    encoding="utf-8")


def report(outcomes: list[Outcome], check: bool, broken: tuple[str, ...] = (),
           orphans: Sequence[Orphan] = (), bad_patterns: Sequence[str] = (),
           skipped: Sequence[str] = ()) -> int:
    """Prints the per-file summary; returns 1 when a dump failed, a package did not load, a
    pattern named nothing, a committed cache is orphaned (regen_orphans.py) or, with --check,
    a cache differs. `skipped`: one line per cache left out (regen_cache.skip_cpu_only)."""
    print("\nregen_cache summary:")
    for outcome in outcomes:
        if outcome.change is not None:
            verb = "would change" if check and outcome.change.differs else "ok"
            shared = (f" (shared by {len(outcome.targets)} tests)"
                      if len(outcome.targets) > 1 else "")
            notes = "".join(f"{note}; " for note in outcome.notes)
            print(f"  {outcome.cache_path}: {verb}: {notes}{outcome.change.describe()}{shared}; "
                  f"{outcome.kept.describe()}")
        else:
            print(f"  {outcome.cache_path}: NOT REGENERATED ({outcome.labels}): "
                  f"{outcome.problem}")
    for line in skipped:
        print(f"  {line}")
    for orphan in orphans:
        print(f"  {orphan.advice()}")
    for line in bad_patterns:
        print(f"  {line}")
    for package in broken:
        print(f"  {package}: PACKAGE FAILED TO LOAD: its autotuned tests (if any) were not "
              "regenerated; fix the errors Bazel printed above and rerun")
    failed = [o for o in outcomes if not o.ok]
    differs = [o for o in outcomes if o.change is not None and o.change.differs]
    written = "would change" if check else "rewritten"
    print(f"{len(outcomes)} cache(s): {len(differs)} {written}, {len(failed)} failed"
          + (f", {len(skipped)} skipped" if skipped else "")
          + (f", {len(orphans)} orphaned" if orphans else "")
          + (f", {len(broken)} package(s) failed to load" if broken else "")
          + (f", {len(bad_patterns)} pattern(s) named nothing" if bad_patterns else ""))
    if failed or broken or orphans or bad_patterns or (check and differs):
        return 1
    return 0
