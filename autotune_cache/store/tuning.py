"""The parts of tuning that know no backend: what a tune callback is handed and hands back, which
recorded timings a new tuning reuses, how the winner is chosen, and how a recorded config reads.

`Cache.resolve` (cache.py) runs the protocol: lookup, the key's cross-process lock, the re-read
after waiting for a peer, reuse of recorded timings, the tune callback, recording. A backend
(triton/autotuner.py) supplies only the key, its candidates as recorded configs and the callback,
which times the candidates it is handed; everything else here is the same for every backend.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from autotune_cache.errors import AllConfigsFailedError
from autotune_cache.foundation.key import CacheKey
from autotune_cache.proto import autotune_results_pb2 as pb

# The launch options a recorded Config carries next to its parameters, in text order.
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


def _param_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def canonical_text(params: Mapping[str, Any], options: Mapping[str, Any], extra: str = "") -> str:
    """`name=value` of every parameter sorted by name, then of each launch option that is set
    (LAUNCH_OPTIONS order), comma-separated; `;extra` appended when given."""
    parts = [f"{k}={_param_text(params[k])}" for k in sorted(params)]
    parts += [f"{k}={options[k]}" for k in LAUNCH_OPTIONS if options.get(k) is not None]
    text = ",".join(parts)
    return f"{text};{extra}" if extra else text


def param_value(param: pb.Param) -> Any:
    """The Python value of a recorded parameter (None when it has none)."""
    kind = param.WhichOneof("value")
    return getattr(param, kind) if kind else None


def config_text(config: pb.Config) -> str:
    """The canonical one-line text of a recorded config (canonical_text): two recorded configs
    with equal text are the same candidate, for reusing a timing and in messages."""
    params = {p.name: param_value(p) for p in config.params}
    options = {k: getattr(config, k) for k in LAUNCH_OPTIONS if config.HasField(k)}
    return canonical_text(params, options)


@dataclass(frozen=True)
class TuneJob:
    """What a tune callback is handed: the key being tuned, every candidate (as recorded), the
    indices of those it must time (`todo`, in candidate order), and the recorded timings that
    the others reuse (by index)."""

    key: CacheKey
    candidates: tuple[pb.Config, ...]
    todo: tuple[int, ...]
    reused: Mapping[int, pb.Timing]


@dataclass
class Tuned:
    """What a tune callback hands back.

    `timings`: a Timing for every index of `job.todo` and no other (`time_ms`, or `failure`
    with the reason; the cache sets its `config`). `benchmarks`: how many benchmarks completed,
    for the statistics. `finalists`: the timed candidates that may win, when a screening
    benchmark ruled the others out (None: any may). `specializations`: the compiler's record of
    how a candidate was specialised (kept with the winner, for preloading it), by index."""

    timings: dict[int, pb.Timing]
    benchmarks: int = 0
    finalists: Collection[int] | None = None
    specializations: Mapping[int, str] = field(default_factory=dict)


# The tune callback of Cache.resolve.
Tune = Callable[[TuneJob], Tuned]


@dataclass(frozen=True)
class Resolved:
    """What Cache.resolve returns: the entry for the key, and the winning candidate's index when
    this call tuned it (None when a tier or a peer process had the entry)."""

    entry: pb.Entry
    winner: int | None = None

    @property
    def tuned(self) -> bool:
        """Whether this call tuned and recorded the entry."""
        return self.winner is not None


def recorded_timings(entries: Iterable[pb.Entry], timing_method: str) -> dict[str, pb.Timing]:
    """Candidate timings from earlier tunings of the same source, device and toolchain that were
    measured with `timing_method`, by config_text; where several entries timed a config, the most
    recently tuned one wins. Entries timed another way (the fake, the interpreter, do_bench with
    other warmup/rep, CUDA graphs, an older file without a method) are ignored: their times are
    not comparable with the ones this tuning measures."""
    timings: dict[str, pb.Timing] = {}
    for entry in sorted(entries, key=lambda e: e.result.tuned_at):
        if entry.result.timing_method != timing_method:
            continue
        for timing in entry.result.candidates:
            timings[config_text(timing.config)] = timing
    return timings


def reusable_timings(candidates: Sequence[pb.Config], recorded: Mapping[str, pb.Timing],
                     never_reuse: Collection[int] = ()) -> dict[int, pb.Timing]:
    """{candidate index: a copy of its recorded Timing, with the config as `candidates` writes
    it} for the candidates that need no benchmark. Never for an index in `never_reuse` (a
    candidate the results file cannot describe whole, so a timing recorded for its config may
    not be its own)."""
    reused = {}
    for i, config in enumerate(candidates):
        timing = recorded.get(config_text(config))
        if timing is not None and i not in never_reuse:
            copy = pb.Timing()
            copy.CopyFrom(timing)
            copy.config.CopyFrom(config)
            reused[i] = copy
    return reused


# Timings closer than this to the fastest, relative, are a tie, by timing method
# (docs/decisions/0030-ties-within-noise.md): Triton's CPU interpreter (triton/bench.py's
# InterpreterBenchmark, the fastest CPU time of a candidate over interleaved rounds) read
# candidates that do the same work (they differ only in num_warps, which it ignores) up to
# 1.21x apart on the 2-core CI machine. A method not named here is taken at its times (a GPU
# benchmark decides its close leaders in short bursts instead, decision 0028; a user's do_bench
# and the tests' fake say what they mean).
NOISE_BANDS: dict[str, float] = {"cputime-interpreter": 0.25}


# The timing method of an entry that a library's own tuner picked (triton/seeding.py) starts
# with this, then names the tuner's class (and what timings it did not expose).
LIBRARY_METHOD = "library "


def library_tuner(timing_method: str) -> str | None:
    """The library tuner an entry's timing method names (LIBRARY_METHOD), else None."""
    return timing_method.removeprefix(LIBRARY_METHOD) if timing_method.startswith(
        LIBRARY_METHOD) else None


def noise_band(timing_method: str) -> float:
    """How far from the fastest (relative) a time of `timing_method` is still a tie with it."""
    return NOISE_BANDS.get(timing_method, 0.0)


def candidate_times(candidates: Iterable[pb.Timing]) -> dict[int, float]:
    """{candidate index: ms} of the candidates that have a time (not failed): what pick_winner
    decides among."""
    return {i: t.time_ms for i, t in enumerate(candidates) if not t.failure}


def pick_winner(times: Mapping[int, float], timing_method: str,
                committed: int | None = None) -> tuple[int, list[int]]:
    """The winner among `times` ({candidate index: ms}) and the candidates tied for it (those
    within `noise_band(timing_method)` of the fastest, in candidate order). The rule, one for the
    tuning and the dump (dumprule.py): the `committed` pick (the results file's winner for this
    key) when it is tied, else the earliest tied candidate, so that timings that differ only by
    noise give the same pick on every run. With no band, only equal times tie."""
    fastest = min(times.values())
    limit = fastest * (1 + noise_band(timing_method))
    tied = sorted(i for i, t in times.items() if t <= limit)
    return (committed if committed in tied else tied[0]), tied


def previous_pick(entries: Iterable[pb.Entry], candidates: Sequence[pb.Config]) -> int | None:
    """The index among `candidates` of the winner of the latest of `entries` (the key's entries
    under other candidate lists: Cache.same_source), if it is still a candidate: a tie keeps it
    (pick_winner), so adding a config moves no pick that only noise separates from another."""
    latest = max(entries, key=lambda e: e.result.tuned_at, default=None)
    if latest is None:
        return None
    wanted = config_text(latest.result.config)
    return next((i for i, c in enumerate(candidates) if config_text(c) == wanted), None)


def tie_of(entry: pb.Entry) -> tuple[int, float] | None:
    """(how many candidates were tied, the band) when the entry's winner was decided by the tie
    rule (pick_winner: another candidate was as fast within the noise band), else None: for the
    tuning line."""
    result = entry.result
    times = candidate_times(result.candidates)
    if not times or noise_band(result.timing_method) == 0.0:
        return None
    _, tied = pick_winner(times, result.timing_method)
    return (len(tied), noise_band(result.timing_method)) if len(tied) > 1 else None


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def build_entry(key: CacheKey, candidates: Sequence[pb.Timing], timing_method: str,
                seconds: float, eligible: Collection[int] | None = None,
                previous: int | None = None) -> tuple[pb.Entry, int]:
    """The results entry for these candidate timings (one per candidate, in candidate order) and
    the winner's index: `pick_winner` among the `eligible` candidates (default, or when none of
    them has a time: all), so the earliest of those within the timing method's noise band of the
    fastest, or the `previous` pick (the key's winner under another candidate list) when it is
    among them. Raises AllConfigsFailedError, naming every config with its reason, when no
    candidate has a time."""
    from autotune_cache.version import __version__ as tuner_version

    ok = candidate_times(candidates)
    if not ok:
        reasons = "\n".join(f"  {config_text(t.config).replace(',', ' ')}: {t.failure}"
                             for t in candidates)
        raise AllConfigsFailedError(
            f"autotune_cache: every candidate config failed for {key.describe()}:\n{reasons}")
    among = {i: t for i, t in ok.items() if i in eligible} if eligible else {}
    best, _ = pick_winner(among or ok, timing_method, committed=previous)
    best_ms = ok[best]
    entry = pb.Entry(key=key.to_proto(), result=pb.Result(
        config=candidates[best].config,
        time_ms=best_ms,
        candidates=candidates,
        tuned_at=now_rfc3339(),
        tuner_version=tuner_version,
        tuning_seconds=round(seconds, 6),
        timing_method=timing_method,
    ))
    return entry, best
