"""Counters of what the cache did, the exit summary line and the JSON test report."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from autotune_cache.foundation import console, env

REPORT_NAME = "autotune_report.json"


@dataclass
class Stats:
    """Hits, misses, stale entries, tuning time and which kernels were served, for one process."""

    hits: int = 0
    misses: int = 0
    stale: int = 0
    candidates_changed: int = 0
    tuned: int = 0
    peer_results: int = 0
    benchmarks: int = 0
    tuning_seconds: float = 0.0
    saved_seconds: float = 0.0
    stale_keys: list[str] = field(default_factory=list)
    # Plain @triton.jit specializations (triton/warmups.py): recorded into the dump, and loaded
    # ones queued to compile ahead of their launches.
    warmups_recorded: int = 0
    warmups_ahead: int = 0
    # Misses whose tuning a dump run moved to its end (triton/deferred.py); each is counted in
    # `tuned` too once it is done.
    deferred: int = 0
    # Kernels this cache looked results up for, and autotuned kernels that did not reach it
    # (decorated by triton.autotune before autotune_cache.triton.install(); docs/triton.md).
    kernels_served: set[str] = field(default_factory=set)
    kernels_on_triton: set[str] = field(default_factory=set)
    # Tuners left on Triton's autotuner that launched, and those of them that Triton tuned
    # (triton/classroute.py); launch keys whose config a routed library supplied itself; and
    # the loaded entries of kernels that stayed on Triton, by kernel (Cache.note_bypassed).
    kernels_ran_on_triton: set[str] = field(default_factory=set)
    kernels_tuned_on_triton: set[str] = field(default_factory=set)
    library_configs: int = 0
    # Tuners of their own (not routable) whose memo the cache seeded (triton/seeding.py).
    kernels_seeded: set[str] = field(default_factory=set)
    loaded_on_triton: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    # Set when a runner already showed these numbers (the pytest plugin's terminal summary): the
    # exit line is then not shown again; the Bazel report is still written.
    _shown: bool = field(default=False, repr=False, compare=False)

    def shown_elsewhere(self) -> None:
        """The numbers were shown by the runner (its summary): skip the exit line."""
        self._shown = True

    def hit(self, saved_seconds: float) -> None:
        with self._lock:
            self.hits += 1
            self.saved_seconds += saved_seconds

    def miss(self, stale_description: str | None = None, *,
             candidates_changed: bool = False) -> None:
        with self._lock:
            self.misses += 1
            self.candidates_changed += candidates_changed
            if stale_description is not None:
                self.stale += 1
                self.stale_keys.append(stale_description)

    def from_peer(self, saved_seconds: float) -> None:
        """A miss that another process tuned while this one waited for its lock."""
        with self._lock:
            self.peer_results += 1
            self.saved_seconds += saved_seconds

    def served(self, kernel: str) -> None:
        """Note that `kernel`'s results are looked up in this cache."""
        if kernel not in self.kernels_served:
            with self._lock:
                self.kernels_served.add(kernel)

    def left_on_triton(self, kernels: Iterable[str]) -> None:
        """Note autotuned kernels that stay on Triton's own autotuner (not cached)."""
        with self._lock:
            self.kernels_on_triton.update(kernels)

    def ran_on_triton(self, kernel: str) -> None:
        """A tuner left on Triton's autotuner launched `kernel`."""
        with self._lock:
            self.kernels_ran_on_triton.add(kernel)

    def tuned_on_triton(self, kernel: str) -> bool:
        """Triton's autotuner tuned `kernel`; whether this is the first time it is said."""
        with self._lock:
            self.kernels_ran_on_triton.add(kernel)
            first = kernel not in self.kernels_tuned_on_triton
            self.kernels_tuned_on_triton.add(kernel)
            return first

    def seeded(self, kernel: str) -> None:
        """A library's own tuner of `kernel` was given its picks through its memo."""
        if kernel not in self.kernels_seeded:
            with self._lock:
                self.kernels_seeded.add(kernel)

    def library_config(self) -> None:
        """A routed library supplied a launch key's config itself (not tuned, not cached)."""
        with self._lock:
            self.library_configs += 1

    def tuning_done(self, seconds: float, benchmarks: int) -> None:
        with self._lock:
            self.tuned += 1
            self.tuning_seconds += seconds
            self.benchmarks += benchmarks

    def tuning_deferred(self) -> None:
        with self._lock:
            self.deferred += 1

    def warmup_recorded(self) -> None:
        with self._lock:
            self.warmups_recorded += 1

    def warmups_queued(self, count: int) -> None:
        with self._lock:
            self.warmups_ahead += count

    @property
    def anything_happened(self) -> bool:
        return bool(self.hits or self.misses or self.tuned or self.kernels_on_triton
                    or self.kernels_ran_on_triton or self.library_configs
                    or self.warmups_recorded or self.warmups_ahead)

    def summary_line(self) -> str:
        line = (f"autotune_cache: {self.hits} hits, {self.misses} misses, {self.stale} stale, "
                f"{self.benchmarks} benchmarks, saved ~{self.saved_seconds:.1f} s of tuning")
        if self.candidates_changed:
            line += f", {self.candidates_changed} after a candidate-list change"
        return line + outcome_clauses(self.as_dict())

    def as_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}
        data["stale_keys"] = list(self.stale_keys)
        data["kernels_served"] = sorted(self.kernels_served)
        data["kernels_on_triton"] = sorted(self.kernels_on_triton)
        data["kernels_ran_on_triton"] = sorted(self.kernels_ran_on_triton)
        data["kernels_tuned_on_triton"] = sorted(self.kernels_tuned_on_triton)
        data["kernels_seeded"] = sorted(self.kernels_seeded)
        data["loaded_on_triton"] = dict(sorted(self.loaded_on_triton.items()))
        data["tuning_seconds"] = round(self.tuning_seconds, 6)
        data["saved_seconds"] = round(self.saved_seconds, 6)
        return data

    def write_report(self, directory: Path) -> Path:
        """Write autotune_report.json into `directory` (the test's undeclared outputs)."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / REPORT_NAME
        path.write_text(json.dumps(self.as_dict(), indent=2, sort_keys=True) + "\n")
        return path

    def report_at_exit(self, *, configured: bool = True) -> None:
        """Show the summary line and write the Bazel report, if anything happened.

        Quiet unless asked, as `triton.autotune` is (a library shipping kernels with our
        decorator must not print in its users' processes): the line is shown
        (autotune_cache.foundation.console: stderr or logging) when $AUTOTUNE_VERBOSE is 1, or
        when it is unset and the process was `configured` (flags or configure()); never when a
        runner already showed the numbers (shown_elsewhere)."""
        if not self.anything_happened:
            return
        wanted = env.verbose()
        if not self._shown and (wanted or (wanted is None and configured)):
            console.say(self.summary_line())
        outputs = env.undeclared_outputs_dir()
        if outputs is not None:
            try:
                self.write_report(outputs)
            except OSError as e:
                print(f"autotune_cache: could not write {REPORT_NAME} to {outputs}: {e}",
                      file=sys.stderr)


def outcome_clauses(counts: Mapping[str, Any]) -> str:
    """The clauses after the hit/miss counters that the exit line (Stats.summary_line) and
    pytest's summary (summed over xdist workers) share: results from a peer, the tuning, how
    much of it a dump run deferred to its end, plain @triton.jit warm-ups, and autotuned
    kernels left on Triton. `counts` holds Stats.as_dict()'s keys (absent ones count 0)."""

    def count(name: str) -> int:
        return int(counts.get(name, 0))

    text = ""
    if count("peer_results"):
        text += f", {count('peer_results')} tuned by another process while this one waited"
    if count("tuned"):
        text += f", spent {counts.get('tuning_seconds', 0.0):.1f} s tuning {count('tuned')} keys"
    if count("deferred"):
        text += (f" ({count('deferred')} of them at the end of the run, provisional configs "
                 "launched meanwhile)")
    if count("warmups_recorded"):
        text += (f", recorded {count('warmups_recorded')} plain @triton.jit specialization(s) "
                 "to compile ahead")
    if count("warmups_ahead"):
        text += (f", queued {count('warmups_ahead')} plain @triton.jit specialization(s) to "
                 "compile ahead")
    if count("library_configs"):
        text += (f", {count('library_configs')} launch key(s) ran the config their library "
                 "supplied itself")
    seeded = sorted(counts.get("kernels_seeded", ()))
    if seeded:
        text += (f", {len(seeded)} kernel(s) seeded: their library's own tuner was given the "
                 f"cached picks through its memo: {_first_few(seeded)}")
    ran = sorted(counts.get("kernels_ran_on_triton", ()))
    if ran:
        tuned = len(counts.get("kernels_tuned_on_triton", ()))
        text += (f"; BYPASSED: {len(ran)} autotuned kernel(s) ran on Triton's own autotuner, "
                 f"uncached ({tuned} tuned there): {_first_few(ran)}")
    idle = sorted(set(counts.get("kernels_on_triton", ())) - set(ran))
    if idle:
        text += (f"; {len(idle)} autotuned kernel(s) stayed on Triton's own autotuner, "
                 f"uncached: {_first_few(idle)}")
    loaded = counts.get("loaded_on_triton") or {}
    if loaded:
        names = [f"{k} ({n})" for k, n in sorted(loaded.items())]
        text += (f"; {sum(loaded.values())} loaded entries went unused because their kernel "
                 f"stayed on Triton's autotuner: {_first_few(names)}")
    return text


def _first_few(names: list[str], shown: int = 3) -> str:
    """The first `shown` names, and how many more."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")
