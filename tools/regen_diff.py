"""What a regenerated cache changed, in the terms of `autotune-cache diff`.

Entries are compared through the result-set layer (autotune_cache.resultsets, by bytes), so
XLA's files work too. For our own format a changed entry whose only differences are the timing
fields (docs/architecture.md: result.time_ms, result.candidates[].time_ms, result.tuned_at,
result.tuning_seconds) is counted as "retimed", not "changed".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from autotune_cache.formats import is_text_suffix
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.resultsets.base import Row, change_counts, diff_rows, rekeyed
from autotune_cache.resultsets.registry import loads

# The dump test always writes text (DUMP_FILE_NAME = autotune_cache.textproto in regen_bazel).
DUMP_SUFFIX = ".textproto"


@dataclass(frozen=True)
class Change:
    """Counts of entry differences between an old and a new cache file."""

    added: int = 0
    removed: int = 0
    changed: int = 0
    retimed: int = 0
    unchanged: int = 0
    identical_bytes: bool = False
    created: bool = False
    # Entries matched under a new key, by why the key changed ("candidate list changed",
    # "kernel source changed", "toolchain changed", "key changed"), sorted.
    rekeyed: tuple[tuple[str, int], ...] = ()

    @property
    def differs(self) -> bool:
        """Whether the file's bytes change."""
        return not self.identical_bytes

    def describe(self) -> str:
        """One line for the per-file summary, in the words of `autotune-cache diff` and
        `report --baseline` (resultsets.base.change_counts)."""
        if self.identical_bytes:
            return f"unchanged ({self.unchanged} entries, byte-identical)"
        prefix = "created: " if self.created else ""
        line = prefix + change_counts({"winner changed": self.changed, "re-timed": self.retimed,
                                       "new": self.added, "removed": self.removed,
                                       "unchanged": self.unchanged})
        # A candidate added, or a kernel edited, changes the key of an entry whose winner and
        # time may stay the same: say so, or a reviewer would see "1 unchanged" and no change.
        return line + "".join(f"; {n} {why}" for why, n in self.rekeyed)


def strip_timing(payload: bytes) -> bytes | None:
    """The entry's bytes with the timing fields cleared, or None if it is not our Entry."""
    entry = pb.Entry()
    try:
        entry.ParseFromString(payload)
    except Exception:  # noqa: BLE001 - protobuf raises DecodeError or others on foreign bytes
        return None
    if not entry.HasField("key"):
        return None
    result = entry.result
    result.ClearField("time_ms")
    result.ClearField("tuned_at")
    result.ClearField("tuning_seconds")
    for candidate in result.candidates:
        candidate.ClearField("time_ms")
    return entry.SerializeToString(deterministic=True)


def rekey_reason(old: Row, new: Row) -> str:
    """Why an entry matched by kernel, problem and device has a new key, in the words of the
    regen summary: which part of our key changed ("key changed" for other formats)."""
    keys = []
    for row in (old, new):
        entry = pb.Entry()
        try:
            entry.ParseFromString(row.payload)
        except Exception:  # noqa: BLE001 - an XLA row's payload is not our Entry
            return "key changed"
        keys.append(entry.key)
    if not keys[0].kernel:
        return "key changed"
    if keys[0].source_fingerprint != keys[1].source_fingerprint:
        return "kernel source changed"
    if keys[0].configs_fingerprint != keys[1].configs_fingerprint:
        return "candidate list changed"
    if old.toolchain != new.toolchain:
        return "toolchain changed"
    return "key changed"


def _rows(data: bytes, suffix: str) -> list[Row]:
    return loads(data, suffix).rows()


@dataclass(frozen=True)
class Kept:
    """What the regen kept of the committed file's entries that the dumps did not write (the
    dump's rule, docs/cache.md#what-a-dump-keeps), and what it dropped."""

    by: tuple[tuple[str, int], ...] = ()
    dropped: int = 0
    dropped_kernels: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        return sum(n for _, n in self.by)

    def describe(self) -> str:
        """`kept M (2 other devices, ...); dropped K no longer used (kernels)`."""
        text = f"kept {self.count}"
        if self.by:
            text += " (" + ", ".join(f"{n} {why}" for why, n in self.by) + ")"
        text += f"; dropped {self.dropped}"
        if self.dropped:
            shown = list(self.dropped_kernels[:3])
            more = len(self.dropped_kernels) - len(shown)
            text += (" no longer used (" + ", ".join(shown)
                     + (f" and {more} more kernel(s)" if more > 0 else "") + ")")
        return text


def committed(old: bytes | None, dumped: bytes, suffix: str, *, subset: bool = False
              ) -> tuple[bytes, Kept]:
    """The new committed file, in the destination's format (`suffix`: text or binary), and
    what it kept of the old one.

    `dumped` is what the dump test(s) wrote, always text (`autotune_cache.textproto`); `old` is
    the committed file (None when there is none), in the destination's format. The dumps
    replace only what they own (docs/cache.md#what-a-dump-keeps): the committed entries of
    every device they did not run on, and of toolchains other than theirs on their devices,
    are kept (one file serves several GPU types and the CPU interpreter, each regenerated on
    its own machine); with `subset` (a Bazel --test_filter) every entry the dumps did not write
    is kept; otherwise their device's entries no test wrote are dropped. Raises
    autotune_cache.errors.AutotuneCacheError (CorruptFileError) when either file cannot be read
    or they are of different formats.
    """
    new_set = loads(dumped, DUMP_SUFFIX)
    keep: set[str] = set()
    reasons: Counter[str] = Counter()
    dropped: set[str] = set()
    dropped_count = 0
    if old is not None:
        written = new_set.rows()
        ids = {row.id for row in written}
        devices = {row.device for row in written}
        pairs = {(row.device, row.toolchain) for row in written}
        slots = {(row.kernel, row.problem, row.device, row.toolchain) for row in written}
        old_set = loads(old, suffix)
        for row in old_set.rows():
            if row.id in ids:
                continue
            if not written:
                why = "run used no kernel"
            elif row.device not in devices:
                why = "other devices"
            elif (row.device, row.toolchain) not in pairs:
                why = "other toolchains"
            elif subset:
                why = "not selected"
            else:
                if (row.kernel, row.problem, row.device, row.toolchain) not in slots:
                    dropped_count += 1
                    dropped.add(row.kernel)
                continue
            keep.add(row.id)
            reasons[why] += 1
        if keep:
            new_set = new_set.merge(old_set.select(keep), prefer_other=set())
    kept = Kept(tuple(sorted(reasons.items())), dropped_count, tuple(sorted(dropped)))
    if not keep and is_text_suffix(suffix):
        # Nothing merged into a text destination: keep the dump's bytes exactly.
        return dumped, kept
    return new_set.dumps(suffix), kept


def committed_bytes(old: bytes | None, dumped: bytes, suffix: str) -> bytes:
    """The new committed file of a full regen (`committed`), without what it kept."""
    return committed(old, dumped, suffix)[0]


def compare(old: bytes | None, new: bytes, suffix: str) -> Change:
    """Compares the committed cache (None when it does not exist) with the regenerated one,
    both in the destination's format (`suffix`; see committed_bytes)."""
    new_rows = _rows(new, suffix)
    if old is None:
        return Change(added=len(new_rows), created=True)
    if old == new:
        return Change(unchanged=len(new_rows), identical_bytes=True)
    old_rows = _rows(old, suffix)
    pairs, removed = diff_rows(old_rows, new_rows)
    kinds = Counter(kind for kind, _, _ in pairs)
    # diff's "N under a new key", split by which part of the key changed.
    moved = Counter(rekey_reason(o, r) for _, o, r in pairs if o is not None and rekeyed(o, r))
    return Change(
        added=kinds["new"],
        removed=len(removed),
        changed=kinds["winner changed"],
        retimed=kinds["re-timed"],
        unchanged=kinds["unchanged"],
        rekeyed=tuple(sorted(moved.items())),
    )
