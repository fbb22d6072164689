"""What every result-set format shares: rows, the protocols, diff, merge policy and pruning.

The policy is here, not in the CLI: `merge_sets` decides conflicts (`newest`, `fastest`,
`error`) and checks formats; `prune_plan` decides what a prune drops and `apply_prune` deletes it.
(docs/decisions/0006-policy-in-resultsets.md)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol, TypeVar

from autotune_cache.errors import AutotuneCacheError, CorruptFileError
from autotune_cache.formats import read_capped
from autotune_cache.foundation.locking import remove_unheld
from autotune_cache.foundation.safeio import open_regular
from autotune_cache.store.dirstore import STALE_TEMP_SECONDS

CONFLICT_POLICIES = ("newest", "fastest", "error")


@dataclass(frozen=True)
class Row:
    """One entry of any format, in the terms the CLI shows and compares."""

    id: str
    kernel: str
    problem: str
    device: str
    toolchain: str
    config: str
    time_ms: float | None
    tuned_at: str
    payload: bytes
    source: str = ""


class ResultSet(Protocol):
    """The entries of one file or directory, in one format."""

    format_name: str

    def rows(self) -> list[Row]: ...

    def select(self, ids: set[str]) -> ResultSet: ...

    def without(self, ids: set[str]) -> ResultSet:
        """Every entry but those with these ids."""
        ...

    def merge(self, other: ResultSet, prefer_other: set[str]) -> ResultSet: ...

    def save(self, path: Path) -> None: ...

    def dumps(self, suffix: str) -> bytes:
        """The bytes of a results file named `*<suffix>` (text or binary by the extension)."""
        ...

    def problems(self) -> list[str]: ...

    def leftovers(self, older_than: float = STALE_TEMP_SECONDS) -> list[Path]:
        """Files `prune` deletes besides dropped entries (abandoned temp files, stale locks,
        damaged or misnamed entries of our own directories)."""
        ...


class Format(Protocol):
    """A file format the CLI can read and write."""

    name: str

    def sniff(self, path: Path) -> bool: ...

    def load(self, path: Path) -> ResultSet: ...

    def sniff_bytes(self, data: bytes, suffix: str) -> bool: ...

    def loads(self, data: bytes, suffix: str) -> ResultSet: ...


def data_path(suffix: str) -> Path:
    """The name bytes go by in messages when they come from no file (`loads`)."""
    return Path(f"<bytes>{suffix}")


class FileFormat:
    """The dispatch every format shares: a directory by its layout, a file by its bytes.

    Subclasses give `name`, `sniff_dir`, `load_dir`, `sniff_data(head, path)` and
    `parse(data, path)`; `SNIFF_BYTES` (None: the whole file) is how much `sniff` reads."""

    name = ""
    SNIFF_BYTES: int | None = None

    def sniff_dir(self, path: Path) -> bool:
        raise NotImplementedError

    def load_dir(self, path: Path) -> ResultSet:
        raise NotImplementedError

    def sniff_data(self, data: bytes, path: Path) -> bool:
        raise NotImplementedError

    def parse(self, data: bytes, path: Path) -> ResultSet:
        raise NotImplementedError

    def sniff(self, path: Path) -> bool:
        """Cheap test of a file or directory."""
        path = Path(path)
        try:
            if path.is_dir():
                return self.sniff_dir(path)
            if self.SNIFF_BYTES is None:
                head = read_capped(path)
            else:
                with os.fdopen(open_regular(path), "rb") as f:
                    head = f.read(self.SNIFF_BYTES)
        except (CorruptFileError, OSError):
            return False
        return self.sniff_data(head, path)

    def load(self, path: Path) -> ResultSet:
        """Read a file or directory; a damaged file raises, a damaged directory entry is listed."""
        path = Path(path)
        if path.is_dir():
            return self.load_dir(path)
        return self.parse(read_capped(path), path)

    def sniff_bytes(self, data: bytes, suffix: str) -> bool:
        """`sniff` for the bytes of a file named `*<suffix>`."""
        head = data if self.SNIFF_BYTES is None else data[:self.SNIFF_BYTES]
        return self.sniff_data(head, data_path(suffix))

    def loads(self, data: bytes, suffix: str) -> ResultSet:
        """`load` for the bytes of a file named `*<suffix>`."""
        return self.parse(data, data_path(suffix))


V = TypeVar("V")


def require_same_format(mine: ResultSet, other: ResultSet) -> None:
    """Merging is only defined within one format; say so by name otherwise."""
    if type(mine) is not type(other):
        raise CorruptFileError(
            f"cannot merge {other.format_name} entries into {mine.format_name} entries; "
            "merge files of one format"
        )


def merge_by_id(mine: dict[str, V], theirs: dict[str, V], prefer_other: set[str]) -> dict[str, V]:
    """`mine` plus `theirs`; on a shared id mine wins unless the id is in `prefer_other`."""
    merged = dict(mine)
    for ident, item in theirs.items():
        if ident not in merged or ident in prefer_other:
            merged[ident] = item
    return merged


def is_directory_path(path: Path) -> bool:
    """Whether a destination path names a cache directory rather than a file."""
    return path.is_dir() or str(path).endswith("/") or not path.suffix


# ----- comparing two versions of a cache (diff, report --baseline) ---------------------------
#
# One vocabulary for both: an entry of the new version is matched with the old one of the same
# kernel, problem and device (not the whole key: a regen for a new candidate list, toolchain or
# kernel source changes the key, yet it is the same tuning), the same toolchain preferred; each
# match is a "winner changed", "re-timed" or "unchanged"; the rest are "new" or "removed".

CHANGE_KINDS = ("winner changed", "re-timed", "new", "removed", "unchanged")


def _match_key(row: Row) -> tuple[str, str, str]:
    return (row.kernel, row.problem, row.device)


class Baseline:
    """The old version's rows, matched one by one with the new version's (`match`)."""

    def __init__(self, rows: Iterable[Row]) -> None:
        self._pool: dict[tuple[str, str, str], list[Row]] = {}
        self._by_id: dict[str, Row] = {}
        for row in rows:
            self._pool.setdefault(_match_key(row), []).append(row)
            self._by_id.setdefault(row.id, row)
        self._matched: set[str] = set()

    def match(self, row: Row) -> Row | None:
        """The old row with `row`'s very key, else one of its kernel, problem and device not
        matched yet (its toolchain's first)."""
        old = self._by_id.get(row.id)
        if old is None or old.id in self._matched:
            rows = [r for r in self._pool.get(_match_key(row), []) if r.id not in self._matched]
            old = next((r for r in rows if r.toolchain == row.toolchain), None) or (
                rows[0] if rows else None)
        if old is not None:
            self._matched.add(old.id)
        return old

    def unmatched(self) -> list[Row]:
        """The old rows no new row matched: removed."""
        return [r for rows in self._pool.values() for r in rows if r.id not in self._matched]


def change_kind(old: Row | None, new: Row) -> str:
    """"new", "winner changed", "re-timed" or "unchanged" (CHANGE_KINDS)."""
    if old is None:
        return "new"
    if old.config != new.config:
        return "winner changed"
    return "unchanged" if old.time_ms == new.time_ms else "re-timed"


def change_counts(counts: Mapping[str, int]) -> str:
    """The one summary line of a comparison, in CHANGE_KINDS' words."""
    return (f"{counts.get('winner changed', 0)} winners changed, {counts.get('re-timed', 0)} "
            f"re-timed, {counts.get('new', 0)} new, {counts.get('removed', 0)} removed, "
            f"{counts.get('unchanged', 0)} unchanged")


def diff_rows(a: list[Row], b: list[Row]) -> tuple[list[tuple[str, Row | None, Row]],
                                                   list[Row]]:
    """(kind, old row, new row) for every entry of b against a, and a's removed rows."""
    baseline = Baseline(a)
    pairs = [(change_kind(old, row), old, row) for row in b for old in [baseline.match(row)]]
    return pairs, baseline.unmatched()


def rekeyed(old: Row | None, new: Row) -> bool:
    """Whether a matched entry is under a new key: its candidate list, kernel source or
    toolchain changed (a newly timed candidate, say), whatever its change kind."""
    return old is not None and old.id != new.id


REKEYED = "under a new key (candidate list, kernel source or toolchain)"


def comparison_line(pairs: Iterable[tuple[str, Row | None, Row]], removed: int) -> str:
    """The one summary line of a comparison (`diff`, `report --baseline`): change_counts of
    the pairs diff_rows gives, then how many matched entries are under a new key."""
    pairs = list(pairs)
    counts: dict[str, int] = {"removed": removed}
    for kind, _, _ in pairs:
        counts[kind] = counts.get(kind, 0) + 1
    line = change_counts(counts)
    moved = sum(1 for _, old, new in pairs if rekeyed(old, new))
    return line + (f"; {moved} {REKEYED}" if moved else "")


# ----- merge ---------------------------------------------------------------------------------


@dataclass
class Merged:
    """The outcome of `merge_sets`: the merged set, how many entries it has, and the conflicts
    the `error` policy refused (then nothing should be written)."""

    result: ResultSet
    count: int
    conflicts: list[str]


def _takes_over(row: Row, old: Row, on_conflict: str) -> bool:
    if on_conflict == "newest":
        return row.tuned_at >= old.tuned_at
    return (row.time_ms if row.time_ms is not None else float("inf")) < (
        old.time_ms if old.time_ms is not None else float("inf"))


def merge_sets(sources: Sequence[tuple[object, ResultSet]], on_conflict: str) -> Merged:
    """Merge (name, set) pairs of one format in order; on an id with different entries the
    policy decides: `newest` (by tuned_at), `fastest` (by time_ms) or `error` (listed)."""
    formats = {rs.format_name for _, rs in sources}
    if len(formats) > 1:
        raise AutotuneCacheError(
            f"merge: inputs are of different formats ({', '.join(sorted(formats))}); "
            "convert them to one format first"
        )
    merged: ResultSet = sources[0][1]
    winner: dict[str, Row] = {r.id: r for r in merged.rows()}
    conflicts = []
    for name, rs in sources[1:]:
        prefer: set[str] = set()
        for row in rs.rows():
            old = winner.get(row.id)
            if old is None:
                winner[row.id] = row
                continue
            if old.payload == row.payload:
                continue
            if on_conflict == "error":
                conflicts.append(f"  {row.kernel} [{row.problem}] on {row.device} (in {name})")
                continue
            if _takes_over(row, old, on_conflict):
                prefer.add(row.id)
                winner[row.id] = row
        merged = merged.merge(rs, prefer)
    return Merged(merged, len(winner), conflicts)


# ----- prune ---------------------------------------------------------------------------------


def tuned_epoch(row: Row) -> float | None:
    """When the entry was tuned, in seconds since the epoch (None when not recorded)."""
    if not row.tuned_at:
        return None
    try:
        ts = datetime.fromisoformat(row.tuned_at.replace("Z", "+00:00"))
    except ValueError:
        return None
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=timezone.utc)
    return ts.timestamp()


def superseded_ids(rows: Sequence[Row]) -> set[str]:
    """Ids of rows superseded by a newer row for the same kernel, problem, device and toolchain
    (an older kernel source or candidate list: a cache regenerated before dumps held exactly one
    run, or merged by hand). The newest by tuned_at is live; on a tie, the later row."""
    live: dict[tuple[str, str, str, str], Row] = {}
    for row in rows:
        group = (row.kernel, row.problem, row.device, row.toolchain)
        current = live.get(group)
        if current is None or row.tuned_at >= current.tuned_at:
            live[group] = row
    keep = {r.id for r in live.values()}
    return {r.id for r in rows if r.id not in keep}


@dataclass
class PrunePlan:
    """Which rows a prune keeps and drops (with the reasons), and how many it could not judge
    by device (formats that do not record one)."""

    keep: list[Row]
    drop: list[tuple[Row, list[str]]]
    unknown_device: int


def prune_plan(rows: list[Row], *, keep_device: Sequence[str], keep_toolchain: Sequence[str],
               older_than: float | None, now: float, superseded: bool = False) -> PrunePlan:
    """Drop rows whose device or toolchain contains none of the kept texts, tuned more than
    `older_than` seconds before `now`, or (with `superseded`) superseded by a newer row
    (superseded_ids); rows without a device or a date are kept."""
    plan = PrunePlan([], [], 0)
    old = superseded_ids(rows) if superseded else set()
    for row in rows:
        reasons = ["superseded"] if row.id in old else []
        if keep_device and not row.device:
            plan.unknown_device += 1  # e.g. XLA's legacy per-fusion files do not record it
        elif keep_device and not any(d.lower() in row.device.lower() for d in keep_device):
            reasons.append("device")
        if keep_toolchain and not any(
                t.lower() in row.toolchain.lower() for t in keep_toolchain):
            reasons.append("toolchain")
        tuned = tuned_epoch(row)
        if older_than is not None and tuned is not None and now - tuned > older_than:
            reasons.append("age")
        if reasons:
            plan.drop.append((row, reasons))
        else:
            plan.keep.append(row)
    return plan


def apply_prune(rs: ResultSet, path: Path, plan: PrunePlan,
                leftovers: list[Path]) -> list[Path]:
    """Carry out a plan in place: a directory loses the dropped entries' files and the
    leftovers; a file is rewritten without the dropped entries. A lock file is deleted only
    while prune holds it (locking.remove_unheld): returns the lock files kept because a live
    process holds them."""
    kept: list[Path] = []
    if path.is_dir():
        for row, _ in plan.drop:
            if row.source:
                Path(row.source).unlink(missing_ok=True)
        for t in leftovers:
            if t.suffix == ".lock":
                if not remove_unheld(t):
                    kept.append(t)
            else:
                t.unlink(missing_ok=True)
    elif plan.drop:
        rs.without({r.id for r, _ in plan.drop}).save(path)
    return kept
