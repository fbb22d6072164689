"""Which test missed which kernel (a listener on the Cache), and the terminal summary: the
counters (summed over xdist workers), the tests that missed, require-complete's verdict and the
dump's notes."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from autotune_cache.cache import Cache
from autotune_cache.errors import MissingResultError
from autotune_cache.foundation.key import CacheKey
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store.stats import outcome_clauses

# ----- per-test attribution ---------------------------------------------------------------------


# Miss.why of a tuning strict mode forbade on Triton's own autotuner (no key of ours).
UNROUTED = "not routed (UnroutedTuningError)"


@dataclass(frozen=True)
class Miss:
    """One lookup that found no result, and the test that made it."""

    nodeid: str
    phase: str
    kernel: str
    problem: str
    device: str
    why: str
    strict: bool
    message: str = ""


def _why(cache: Cache, key: CacheKey) -> str:
    """'new', 'candidate list changed', or 'stale: <what differs>' for a missed key."""
    near = cache.near_misses(key)
    stale = [f for f in near if key.is_stale(f.key)]
    if stale:
        reasons = sorted({r for f in stale for r in key.stale_reasons(f.key)})
        return "stale: " + "; ".join(reasons)
    return "candidate list changed" if near else "new"


class MissRecorder:
    """Records the misses of one Cache per test, through its public `lookup`."""

    def __init__(self) -> None:
        self.nodeid = ""
        self.phase = ""
        self.misses: list[Miss] = []
        self._lock = threading.Lock()

    def attach(self, cache: Cache) -> None:
        def observe(key: CacheKey, entry: pb.Entry | None,
                    error: MissingResultError | None) -> None:
            if error is not None:
                self._note(cache, key, strict=True, message=str(error))
            elif entry is None:
                self._note(cache, key, strict=False)

        cache.add_listener(observe)

        def violation(kernel: str, message: str) -> None:
            miss = Miss(self.nodeid or "(outside any test)", self.phase, kernel,
                        "any problem", "Triton's own autotuner", UNROUTED, True, message)
            with self._lock:
                self.misses.append(miss)

        cache.add_violation_listener(violation)

    def _note(self, cache: Cache, key: CacheKey, *, strict: bool, message: str = "") -> None:
        miss = Miss(self.nodeid or "(outside any test)", self.phase, key.kernel, key.problem,
                    str(key.device), _why(cache, key), strict, message)
        with self._lock:
            self.misses.append(miss)


    @contextlib.contextmanager
    def running(self, nodeid: str, phase: str) -> Iterator[None]:
        """Attribute the misses made inside the block to test `nodeid` in `phase`."""
        self.nodeid, self.phase = nodeid, phase
        try:
            yield
        finally:
            self.phase = ""


# ----- summaries ---------------------------------------------------------------------------------

_COUNTERS = ("hits", "misses", "stale", "candidates_changed", "tuned", "peer_results",
             "benchmarks", "tuning_seconds", "saved_seconds", "deferred", "warmups_recorded",
             "warmups_ahead", "library_configs")
_KERNEL_SETS = ("kernels_on_triton", "kernels_ran_on_triton", "kernels_tuned_on_triton",
                "kernels_seeded")


def add_stats(parts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The sum of several processes' Stats.as_dict() counters, the union of their kernels left
    on Triton's autotuner, and the loaded entries those kernels left unused (every worker
    loaded the same files, so a kernel's count is the largest any worker saw)."""
    total: dict[str, Any] = dict.fromkeys(_COUNTERS, 0)
    kernels: dict[str, set[str]] = {name: set() for name in _KERNEL_SETS}
    loaded: dict[str, int] = {}
    for part in parts:
        for name in _COUNTERS:
            total[name] += part.get(name, 0)
        for name in _KERNEL_SETS:
            kernels[name].update(part.get(name, ()))
        for kernel, count in (part.get("loaded_on_triton") or {}).items():
            loaded[kernel] = max(loaded.get(kernel, 0), count)
    total.update({name: sorted(names) for name, names in kernels.items()})
    total["loaded_on_triton"] = loaded
    return total


def summary_lines(stats: Mapping[str, Any], misses: Sequence[Mapping[str, Any]],
                  workers: int = 0) -> list[str]:
    """The terminal-summary section: counters, then which tests missed which kernels."""
    why = f"{int(stats['stale'])} stale"
    if stats["candidates_changed"]:
        why += f", {int(stats['candidates_changed'])} after a candidate-list change"
    line = (f"{int(stats['hits'])} hits, {int(stats['misses'])} misses ({why}), "
            f"{int(stats['benchmarks'])} benchmarks, saved ~{stats['saved_seconds']:.1f} s of "
            "tuning") + outcome_clauses(stats)
    if workers:
        line += f" (over {workers} xdist workers)"
    lines = [line]
    if misses:
        lines.append("tests that missed:")
        seen = set()
        for m in sorted(misses, key=lambda m: (m["nodeid"], m["kernel"], m["problem"])):
            text = (f"  {m['nodeid']}: {m['kernel']} [{m['problem']}] on {m['device']}: "
                    f"{m['why']}{' (failed the test)' if m['strict'] else ''}")
            if text not in seen:
                seen.add(text)
                lines.append(text)
    return lines



_STRICT_OFF_NOTE = ("note: --autotune-require-complete was off for this run: a dump run must be "
                    "able to tune (it is how a stale cache is regenerated)")


def _fail_session(session: pytest.Session) -> None:
    """Fail the run because of misses under require-complete, whatever the tests did with the
    errors (caught, xfail, turned into a skip)."""
    if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _write_strict_verdict(tr: Any, misses: Sequence[Mapping[str, Any]]) -> None:
    strict = {(m["kernel"], m["problem"], m["device"]) for m in misses if m["strict"]}
    if strict:
        tr.write_line(
            f"--autotune-require-complete: {len(strict)} kernel keys were missing from the "
            "cache, so the run FAILED (whatever the tests did with the errors). Regenerate the "
            "cache with --autotune-dump=PATH on this device and commit it.", red=True)
