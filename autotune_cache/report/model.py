"""What the report shows, read from results files and directories of every registered format.

Our own format records every candidate's timing, so each entry becomes a Section with a chart.
XLA's formats record only the winning config, so their entries are listed as rows without a chart
(the page says why). A baseline is matched by kernel, problem and device (not by the whole key: a
regen for a new toolchain or kernel source changes the key but is still "the same" tuning), and a
Change says whether the winner changed and by how much.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from autotune_cache.errors import AutotuneCacheError
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.resultsets.base import (
    Row,
    change_kind,
    comparison_line,
    diff_rows,
    rekeyed,
)
from autotune_cache.resultsets.ours import OurResults, config_summary
from autotune_cache.resultsets.registry import load_any


@dataclass(frozen=True)
class Candidate:
    """One benchmarked config of an entry."""

    config: str
    time_ms: float | None
    failure: str
    winner: bool
    baseline_winner: bool = False


@dataclass(frozen=True)
class Change:
    """How an entry differs from its baseline counterpart."""

    kind: str  # "winner changed", "re-timed", "unchanged", "new"
    old_config: str = ""
    old_time_ms: float | None = None
    new_time_ms: float | None = None
    # The baseline winner's time in the new tuning, when it is one of its candidates.
    old_winner_now_ms: float | None = None
    # That time is the baseline's own timing, reused by an incremental re-tune (not measured
    # beside the new winner).
    old_winner_reused: bool = False
    # Under a new key (resultsets.base.rekeyed: the candidate list, kernel source or toolchain
    # changed), with the baseline entry's toolchain and the candidates it did not have.
    rekeyed: bool = False
    old_toolchain: str = ""
    newly_timed: tuple[str, ...] = ()

    @property
    def percent(self) -> float | None:
        """New winner time against the baseline's, in percent (negative: faster)."""
        if self.old_time_ms and self.new_time_ms is not None:
            return (self.new_time_ms / self.old_time_ms - 1.0) * 100.0
        return None

    @property
    def old_winner_slower_percent(self) -> float | None:
        """How much slower the baseline's winner is than the new winner, timed in one run."""
        if self.old_winner_now_ms is not None and self.new_time_ms:
            return (self.old_winner_now_ms / self.new_time_ms - 1.0) * 100.0
        return None


@dataclass
class Section:
    """One entry: a kernel and problem on one device and toolchain, as its file's `Row` (the
    terms every format shares), with what only the report adds: where it came from, the anchor
    of its part of the page, the candidates' timings and its change against a baseline."""

    anchor: str
    source: str
    row: Row
    timing_method: str = ""
    tuning_seconds: float = 0.0
    candidates: list[Candidate] = field(default_factory=list)
    change: Change | None = None

    @property
    def failed(self) -> list[Candidate]:
        return [c for c in self.candidates if c.failure]

    @property
    def charted(self) -> bool:
        return any(c.time_ms is not None and not c.failure for c in self.candidates)


@dataclass
class FileReport:
    """One input path: its format, its sections, and counts per device and toolchain."""

    path: str
    format_name: str
    sections: list[Section]
    candidate_timings: bool
    devices: Counter = field(default_factory=Counter)
    toolchains: Counter = field(default_factory=Counter)


@dataclass
class Report:
    """Everything on the page: the files, and what a baseline had that they lack."""

    files: list[FileReport]
    baselines: list[str] = field(default_factory=list)
    removed: list[Row] = field(default_factory=list)
    summary: str = ""  # the comparison's line, as `diff` prints it (comparison_line)

    @property
    def sections(self) -> list[Section]:
        return [s for f in self.files for s in f.sections]

    def changes(self, kind: str) -> list[Section]:
        return [s for s in self.sections if s.change is not None and s.change.kind == kind]


def _anchor(*parts: str) -> str:
    return "e-" + hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:12]


def _section_from_entry(source: str, row: Row, entry: pb.Entry) -> Section:
    result = entry.result
    candidates = []
    marked = False
    for timing in result.candidates:
        text = config_summary(timing.config)
        is_winner = (not marked and not timing.failure and text == row.config
                     and timing.time_ms == result.time_ms)
        marked = marked or is_winner
        candidates.append(Candidate(text, None if timing.failure else timing.time_ms,
                                    timing.failure, is_winner))
    return Section(anchor=_anchor(source, row.id), source=source, row=row,
                   timing_method=result.timing_method, tuning_seconds=result.tuning_seconds,
                   candidates=candidates)


def _section_from_row(source: str, row: Row) -> Section:
    return Section(anchor=_anchor(source, row.id), source=source, row=row)


def shown(path: Path | str) -> str:
    """How the page and messages name `path`: a name that is not UTF-8 (bytes the file system
    allows) keeps its other characters, with each undecodable byte as `\\xNN`."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def read_file(path: Path) -> tuple[FileReport, list[Row]]:
    """The report of one file or directory, and its rows (for baseline matching)."""
    results = load_any(path)
    rows = results.rows()
    name = shown(path)
    if isinstance(results, OurResults):
        by_id = {r.id: r for r in rows}
        sections = [_section_from_entry(name, r, results.entries[r.id]) for r in by_id.values()]
        timings = True
    else:
        sections = [_section_from_row(name, r) for r in rows]
        timings = False
    report = FileReport(name, results.format_name, sections, timings,
                        Counter(r.device for r in rows), Counter(r.toolchain for r in rows))
    return report, rows


def compare(section: Section, old: Row | None,
            old_candidates: Mapping[str, Sequence[str]] | None = None) -> Change:
    """The Change of `section` against its baseline row (None: the entry is new), in
    resultsets.base's vocabulary (change_kind, rekeyed), shared with `diff`; `old_candidates`:
    the baseline entries' candidate configs by row id, to name the newly timed ones."""
    kind = change_kind(old, section.row)
    if old is None:
        return Change(kind, new_time_ms=section.row.time_ms)
    moved = rekeyed(old, section.row)
    before = (old_candidates or {}).get(old.id)
    newly = tuple(c.config for c in section.candidates
                  if before is not None and c.config not in before) if moved else ()
    common = {"rekeyed": moved, "old_toolchain": old.toolchain, "newly_timed": newly}
    if kind != "winner changed":
        return Change(kind, old.config, old.time_ms, section.row.time_ms, **common)
    now = next((c.time_ms for c in section.candidates
                if c.config == old.config and not c.failure), None)
    # An incremental re-tune reuses the old candidates' timings: the old winner's time is then
    # the baseline's own, not a measurement of the new run.
    reused = now is not None and now == old.time_ms
    return Change(kind, old.config, old.time_ms, section.row.time_ms, now, reused, **common)


def apply_baseline(reports: Sequence[FileReport], baseline_rows: Iterable[Row],
                   old_candidates: Mapping[str, Sequence[str]] | None = None
                   ) -> tuple[list[Row], str]:
    """Set every section's Change from the baseline's rows, matched as `diff` matches them
    (resultsets.base.diff_rows: by kernel, problem and device, the same toolchain preferred);
    returns the baseline rows nothing matched and the comparison's line (comparison_line)."""
    sections = [s for report in reports for s in report.sections]
    pairs, removed = diff_rows(list(baseline_rows), [s.row for s in sections])
    for section, (_, old, _) in zip(sections, pairs, strict=True):
        section.change = compare(section, old, old_candidates)
        if old is not None and section.change.kind == "winner changed":
            section.candidates = [
                Candidate(c.config, c.time_ms, c.failure, c.winner,
                          baseline_winner=c.config == old.config)
                for c in section.candidates]
    return removed, comparison_line(pairs, len(removed))


def build_reports(paths: Sequence[Path], baselines: Sequence[Path] = ()) -> Report:
    """The report of `paths`, compared with the pooled entries of `baselines` when given."""
    report = Report([read_file(Path(p))[0] for p in paths], [shown(b) for b in baselines])
    if baselines:
        read = [read_file(Path(b)) for b in baselines]
        _check_formats(report.files, [old for old, _ in read])
        rows = [row for _, old_rows in read for row in old_rows]
        old_candidates = {s.row.id: [c.config for c in s.candidates]
                          for old, _ in read for s in old.sections if s.candidates}
        report.removed, report.summary = apply_baseline(report.files, rows, old_candidates)
    return report


def _check_formats(files: Sequence[FileReport], baselines: Sequence[FileReport]) -> None:
    """Refuse a baseline whose formats are not the inputs': entries of two formats are keyed
    differently (a kernel and problem against an HLO fingerprint), so nothing would match and
    every entry would show as new and every baseline entry as removed."""
    new = {f.format_name for f in files}
    old = {f.format_name for f in baselines}
    if new != old:
        def named(reports: Sequence[FileReport]) -> str:
            return ", ".join(f"{f.path} ({f.format_name})" for f in reports)
        raise AutotuneCacheError(
            f"report: --baseline compares entries of one format, but the inputs are "
            f"{named(files)} and the baselines {named(baselines)}; entries of different "
            "formats never match. Give a baseline of the same format as each input (the "
            "same kind of file, from an older run).")
