"""What a dump keeps of the file it rewrites: it replaces only what the run owns.

docs/cache.md#what-a-dump-keeps has the rule as a table; this module is its one implementation,
used by the dump (dumpfile.py: a plain process, a test's subprocesses, the pytest and
pytest-xdist runs) and summarised in one line (`DumpOutcome.line`).

A run *owns* the (device, toolchain) pairs of the entries it wrote (a run that wrote nothing
owns nothing, and keeps the whole file: "run used no kernel"). Of the file's earlier entries
that the run did not write again:

- an entry of a device the run wrote nothing for is kept ("other devices");
- an entry of a device the run wrote for, but of another toolchain, is kept ("other
  toolchains");
- any other entry of an owned pair is the run's to decide on: a *full* run that passed drops
  it (counted as replaced when the run wrote its kernel and problem under a new source or
  candidate list, else "no longer used", named by kernel); a run that selected a subset of
  the tests (a path, `-k`, `-m`, `--lf`, a Bazel test filter), a failed run and a merge-mode
  dump keep it ("not selected", "run failed", "--autotune-dump-merge"): they cannot know
  whether a test they did not run still uses it (a kernel tuned under two candidate lists).

An entry the run tuned again under a key the file already has is written as the file has it
(its timings and date too: "confirmed") when the tuning agrees with the file's pick: the same
winner, or, for a timing method with a noise band (the interpreter's), the file's winner within
that band of the run's fastest (store/tuning.pick_winner keeps the committed pick). So a dump of
an unchanged suite on the interpreter writes a byte-identical file, and the file's diff shows
only picks that changed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from autotune_cache.formats import Keyed
from autotune_cache.foundation.key import CacheKey
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store.tuning import candidate_times, config_text, noise_band, pick_winner

# The kinds of run, by what they may drop: only FULL drops anything.
FULL = "full"
SUBSET = "subset"
FAILED = "failed"
MERGE = "merge"
KINDS = (FULL, SUBSET, FAILED, MERGE)

# Why an entry the run did not write was kept (the keys of DumpOutcome.kept_by).
OTHER_DEVICES = "other devices"
OTHER_TOOLCHAINS = "other toolchains"
NO_KERNEL = "run used no kernel"  # a run that wrote nothing owns no device
_NOT_REPRODUCED = {SUBSET: "not selected", FAILED: "run failed", MERGE: "--autotune-dump-merge"}
SHOWN_KERNELS = 3  # dropped kernels the line names


@dataclass
class DumpOutcome:
    """What one dump did to its file: the run's own entries written, the earlier entries kept
    (by reason) and dropped (with their kernels), and the kind of run that decided."""

    path: str = ""
    run: str = FULL
    written: int = 0
    replaced: int = 0
    confirmed: int = 0  # of `written`: tuned again to the file's pick, written as the file had it
    kept_by: dict[str, int] = field(default_factory=dict)
    dropped: int = 0
    dropped_kernels: list[str] = field(default_factory=list)
    selection: str = ""  # how a subset run selected (for people), e.g. "-k add"

    @property
    def kept(self) -> int:
        return sum(self.kept_by.values())

    @property
    def total(self) -> int:
        """The entries the file holds now."""
        return self.written + self.kept

    def add(self, other: DumpOutcome) -> None:
        """Sum another dump's outcome into this one (the xdist controller's workers)."""
        self.written += other.written
        self.replaced += other.replaced
        self.confirmed += other.confirmed
        for why, count in other.kept_by.items():
            self.kept_by[why] = self.kept_by.get(why, 0) + count
        self.dropped += other.dropped
        self.dropped_kernels = sorted({*self.dropped_kernels, *other.dropped_kernels})

    def line(self) -> str:
        """The one line every dump prints: `dump: wrote N entries to PATH; kept M (...);
        dropped K no longer used (kernels)`."""
        text = f"dump: wrote {self.written} entries to {self.path}"
        if self.confirmed:
            text += f" ({self.confirmed} tuned again to the file's pick, written unchanged)"
        text += f"; kept {self.kept}"
        reasons = [f"{n} {why}" for why, n in sorted(self.kept_by.items()) if n]
        if reasons:
            text += f" ({', '.join(reasons)})"
        text += f"; dropped {self.dropped}"
        if self.dropped:
            shown = self.dropped_kernels[:SHOWN_KERNELS]
            more = len(self.dropped_kernels) - len(shown)
            text += (" no longer used (" + ", ".join(shown)
                     + (f" and {more} more kernel(s)" if more > 0 else "") + ")")
        if self.run != FULL and self.kept_by.get(_NOT_REPRODUCED[self.run]):
            how = f": {self.selection}" if self.run == SUBSET and self.selection else ""
            text += f" [{self.run} run{how}]"
        return text

    def as_dict(self) -> dict:
        """The outcome for scripts (`--autotune-dump-json`), with the kept total."""
        out = asdict(self)
        out["kept"] = self.kept
        out["total"] = self.total
        return out

    def json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, sort_keys=True) + "\n"


def confirms(old: pb.Entry, new: pb.Entry) -> bool:
    """Whether `new`, a tuning of the key `old` was recorded under, agrees with `old`'s pick: the
    same winner (and specialization), or, with a noise band, `old`'s winner still a candidate
    that pick_winner keeps as the committed pick. Never across timing methods."""
    was, now = old.result, new.result
    if was.timing_method != now.timing_method:
        return False
    winner = config_text(was.config)
    if winner == config_text(now.config):
        return was.triton_specialization == now.triton_specialization
    if noise_band(now.timing_method) == 0.0:
        return False
    times = candidate_times(now.candidates)
    committed = next((i for i in times if config_text(now.candidates[i].config) == winner), None)
    if committed is None:
        return False
    return pick_winner(times, now.timing_method, committed)[0] == committed


def _pair(key: CacheKey) -> tuple:
    return (key.device, key.toolchain)


def _slot(key: CacheKey) -> tuple:
    return (key.kernel, key.problem, key.device, key.toolchain)


def apply_rule(old: Mapping[str, Keyed], run: Mapping[str, Keyed], kind: str = FULL,
               path: str = "") -> tuple[dict[str, Keyed], DumpOutcome]:
    """The file's new entries (by key digest) from its earlier entries `old` and the run's
    entries `run` (which win on a shared key), and what that did (the module docstring)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of dump run {kind!r}; one of {KINDS}")
    outcome = DumpOutcome(path=path, run=kind, written=len(run))
    pairs = {_pair(key) for key, _ in run.values()}
    devices = {key.device for key, _ in run.values()}
    slots = {_slot(key) for key, _ in run.values()}
    merged = dict(run)
    dropped: set[str] = set()
    for digest, (key, entry) in old.items():
        if digest in run:
            if run[digest][1] != entry and confirms(entry, run[digest][1]):
                merged[digest] = (key, entry)
                outcome.confirmed += 1
            else:
                outcome.replaced += 1
            continue
        if not run:
            why = NO_KERNEL
        elif key.device not in devices:
            why = OTHER_DEVICES
        elif _pair(key) not in pairs:
            why = OTHER_TOOLCHAINS
        elif kind == FULL:
            if _slot(key) in slots:
                outcome.replaced += 1  # under a new source or candidate list
            else:
                outcome.dropped += 1
                dropped.add(key.kernel)
            continue
        else:
            why = _NOT_REPRODUCED[kind]
        outcome.kept_by[why] = outcome.kept_by.get(why, 0) + 1
        merged[digest] = (key, entry)
    outcome.dropped_kernels = sorted(dropped)
    return merged, outcome
