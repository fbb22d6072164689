"""Tuners that tune by their own rules: the cache's picks given through their memo, their picks
recorded from it.

Some libraries build their tuner from a subclass of Triton's `Autotuner` that the cache's tuner
cannot stand in for (classroute.py routes the others): its `run()` never calls Triton's, it
computes its own key (log2 or align-32 buckets of the sizes), picks by its own policy, and keeps
picks in its own database. What such a tuner still shares with Triton's is the memo: it asks
`key in self.cache` before deciding, and writes `self.cache[key] = config` after. The memo is
where the cache meets it (docs/decisions/0031-seeding-library-memos.md says why this is safe):

- **Load.** The tuner's memo is fronted by a `SeededMemo`. Asked for a key the library has not
  decided in this process, it looks the pick up in the cache under the library's own memo key
  (kernel, source, candidate list, *the memo key as the problem*, device, toolchain), and
  answers with it: the library launches the pick without benchmarking. Because the key is the
  library's own, a library that buckets sizes never receives a pick made for another bucket.
- **Dump.** A pick the library writes into its memo, or finds there (from its own database), is
  recorded under that key with the timings its `_bench` returned (else its `configs_timings`);
  an entry whose timings the library did not expose says so in its timing method.
- **Strict.** A key the cache lacks is a miss with the usual explanation (MissingResultError),
  raised when the library is about to benchmark, or at the end of the launch if its own
  database answered instead: completeness is judged against the cache alone.
- **Routed or seeded.** A subclass whose `run()` reaches Triton's (flash-linear-attention's
  CachedAutotuner) is routed (classroute.Route); that is known at its first launch, and the memo
  front is transparent for it from then on. A subclass overriding Triton's tuning path
  (classroute.RUN_PATH) but keeping Triton's `run()` is seeded from its first launch.
- **Where seeding cannot work** (the library benchmarks without asking its memo, or benchmarks
  though the memo answered), classroute's strict error stays, saying why.

A launch of such a tuner costs one more Python call and a dict lookup per memo question; the
library's own lookups (a database query, for some) are what they were.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from autotune_cache.cache import get_cache
from autotune_cache.foundation.key import CacheKey
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store.tuning import LIBRARY_METHOD, config_text, now_rfc3339
from autotune_cache.triton.configs import config_to_proto, configs_fingerprint, match_text
from autotune_cache.triton.device import current_device, toolchain
from autotune_cache.triton.fingerprint import (
    heuristics_fingerprint,
    qualified_name,
    tuned_fingerprint,
)
from autotune_cache.triton.problem import _value

SEED_ATTR = "_autotune_cache_seeding"  # a tuner's Seeding, in its __dict__

# Records a seeded pick's compile as a warm-up (warmups.py sets it when it records compiles).
_pick_recorder: Callable[[Any, str], None] | None = None


def set_pick_recorder(recorder: Callable[[Any, str], None]) -> None:
    """warmups.py: where the compile of a library's pick goes (see Seeding.candidate_compiled)."""
    global _pick_recorder
    _pick_recorder = recorder


# Why a tuner is seeded rather than routed (the census's `why`).
WHY_SEEDED = ("its class overrides {what} of Triton's Autotuner, which the cache's tuner would "
              "not run; its memo is seeded with the cached picks instead")
NO_MEMO = ("it benchmarked without asking its memo (self.cache) first, so the cache cannot give "
           "it a pick")
UNDECIDED = ("its class replaces run() of Triton's Autotuner and it has not launched: at its "
             "first launch it is routed if its run() calls Triton's, else seeded")
UNWRITABLE_KEY = ("its memo key {key} holds a value a results file cannot write (numbers, strings "
                  "and booleans can be written; ',' and '=' cannot appear in them)")
IGNORED_MEMO = "it benchmarked although its memo (self.cache) answered with the cached pick"


class Seeding:
    """One library tuner's seeding state (see the module docstring)."""

    def __init__(self, tuner: Any, what: str, known_seeded: bool) -> None:
        self._tuner = weakref.ref(tuner)
        self.kind = f"{type(tuner).__module__}.{type(tuner).__qualname__}"
        self.kernel = qualified_name(tuner.fn)
        self.why = WHY_SEEDED.format(what=what)
        self.mode: str | None = "seeded" if known_seeded else None  # or "routed"
        self.picks: dict[Any, Any] = {}  # memo key -> config, decided in this process
        self._source: str | None = None  # computed at the first key, as the Autotuner's is
        # Its @heuristics read now, as the Autotuner reads them (autotuner.py).
        self._heuristics = heuristics_fingerprint(tuner.fn)
        self._configs: Any = None
        self._fingerprint = ""
        self._candidates: list[pb.Config] = []
        self._lock = threading.RLock()
        self._depth = 0
        self.launched = False
        self._reset_launch()

    def _reset_launch(self) -> None:
        self.asked = False  # the memo was asked during this launch
        self.served = False  # ... and answered with a cached pick
        self.missed: tuple[Any, CacheKey | None] | None = None  # a memo key the cache lacked
        self.benchmarked = False
        self.comparing = False  # between its first benchmark and its pick: candidates compile
        self.timings: dict[str, float] = {}  # config_text -> time, from _bench
        # memo key -> (config, how), the first decision of the launch per key
        self.decided: dict[Any, tuple[Any, str]] = {}
        self.compiled: list[tuple[Any, str]] = []  # candidates compiled while comparing
        self.started = time.perf_counter()
        self.configs_timings = None

    # ----- the key ---------------------------------------------------------------------------

    def key(self, tuner: Any, memo_key: Any) -> CacheKey | None:
        """The cache key of the library's pick for `memo_key`; None when the memo key holds a
        value the results file cannot write (then nothing is seeded nor recorded for it)."""
        if self._source is None:
            self._source = tuned_fingerprint(tuner.fn, self._heuristics)
        self._candidates_of(tuner)
        values = memo_key if isinstance(memo_key, tuple) else (memo_key,)
        device = current_device()
        try:
            key = CacheKey(kernel=self.kernel, source_fingerprint=self._source,
                           configs_fingerprint=self._fingerprint,
                           problem={"memo": tuple(_value(v) for v in values)},
                           device=device, toolchain=toolchain(device))
            key.digest()  # the canonical problem text is checked here
        except ValueError:
            return None
        return key

    def _candidates_of(self, tuner: Any) -> list[pb.Config]:
        """The tuner's candidates as recorded (and their fingerprint), worked out again only
        when the library replaced its candidate list."""
        if tuner.configs is not self._configs:
            self._configs, self._fingerprint = tuner.configs, configs_fingerprint(tuner.configs)
            self._candidates = [config_to_proto(c) for c in tuner.configs]
        return self._candidates

    # ----- the memo's questions --------------------------------------------------------------

    def lookup(self, tuner: Any, inner: Any, memo_key: Any) -> Any:
        """The config for `memo_key`: decided here before, the cache's pick, or the library's
        own memo's; None when none has one (the library will decide)."""
        if self.mode == "routed":
            return _memo_get(inner, memo_key)
        with self._lock:
            pick = self.picks.get(memo_key)
            if pick is not None:
                return pick
            self.asked = True
            key = self.key(tuner, memo_key)
            if key is not None:
                candidates = self._candidates_of(tuner)
                cache = get_cache()
                entry = cache.peek(key, candidates)
                pick = None if entry is None else _matching(tuner.configs, entry.result.config)
                if pick is not None:
                    cache.hit(key, candidates)  # counted, and kept for the dump
                    cache.stats.seeded(self.kernel)
                    self.picks[memo_key] = pick
                    self.served = True
                    return pick
            if memo_key in inner:  # the library's own memo (its database, for some)
                found = inner[memo_key]
                self.picks[memo_key] = found
                self.decided.setdefault(memo_key, (found, "memo"))
                return found
            self.missed = (memo_key, key)
            return None

    def stored(self, memo_key: Any, config: Any) -> None:
        """The library wrote its pick for `memo_key` into its memo."""
        if self.mode != "routed":
            with self._lock:
                self.decided.setdefault(memo_key, (config, "tuned"))
                self.picks[memo_key] = config  # its reads that follow need no lookup
                self.comparing = False

    def forget(self, memo_key: Any) -> None:
        with self._lock:
            self.picks.pop(memo_key, None)

    # ----- the launch ------------------------------------------------------------------------

    def launch(self, *args: Any, **kwargs: Any) -> Any:
        """The tuner's `run`, with its memo fronted (installed as the instance's `run`)."""
        tuner = self._tuner()
        if tuner is None:  # pragma: no cover - a bound launch outlived its tuner
            raise ReferenceError("autotune_cache: the tuner of this launch is gone")
        memo = vars(tuner).get("cache")
        if memo is not None and not isinstance(memo, SeededMemo):
            vars(tuner)["cache"] = SeededMemo(memo, tuner, self)
        with self._lock:
            self._depth += 1
            if self._depth == 1:
                self._reset_launch()
                self.launched = True
                self.configs_timings = vars(tuner).get("configs_timings")
        failed = True
        try:
            result = type(tuner).run(tuner, *args, **kwargs)
            failed = False
            return result
        finally:
            with self._lock:
                self._depth -= 1
                last = self._depth == 0
            if last:
                self._launch_done(tuner, failed)

    def routed(self) -> None:
        """The launch reached Triton's run() with a routable route: the shadow serves it."""
        self.mode = "routed"

    def tuning(self, tuner: Any) -> str | None:
        """The library is about to benchmark (a tuner not routed: classroute.py asks only those).
        None when this is a seeded tuning (a miss of the cache, and outside strict mode); else
        why the cache cannot seed it, for classroute's strict error. Under require-complete a
        miss raises MissingResultError here."""
        if self.benchmarked:
            return None
        if self.served:
            return IGNORED_MEMO
        if self.missed is None:
            return NO_MEMO
        if self.missed[1] is None:
            return UNWRITABLE_KEY.format(key=repr(self.missed[0])[:200])
        self.mode = "seeded"
        # The miss counted as a routed kernel's is; under require-complete it raises here.
        get_cache().hit(self.missed[1], self._candidates_of(tuner))
        self.benchmarked = self.comparing = True
        return None

    def timed(self, config: Any, result: Any) -> None:
        """What the library's `_bench` returned for `config`."""
        with contextlib.suppress(TypeError, ValueError):
            _time_into(self.timings, config, result)

    def candidate_compiled(self, jit_fn: Any, spec: str) -> None:
        """Triton compiled a candidate while the library compared them (warmups.py): the one
        that turns out to be its pick is recorded as a warm-up at the launch's end, so a loaded
        run compiles it ahead (the pick's own launch finds it compiled and compiles nothing)."""
        with self._lock:
            self.compiled.append((jit_fn, spec))

    def _launch_done(self, tuner: Any, failed: bool) -> None:
        if self.mode == "routed" or failed:
            return
        if self.mode is None and not self.asked:
            return  # nothing told us yet (one config, say)
        self.mode = "seeded"
        cache = get_cache()
        if self.asked:
            cache.stats.seeded(self.kernel)
        for memo_key, (config, how) in self.decided.items():
            key = self.key(tuner, memo_key)
            if key is None:
                continue
            if how == "memo":  # a miss of the cache (under require-complete it raises)
                cache.hit(key, self._candidates_of(tuner))
            cache.record(self._entry(tuner, key, config, how), key=key,
                         benchmarks=len(self.timings))
            recorder = _pick_recorder
            for jit_fn, spec in self.compiled if recorder is not None else ():
                if compiled_config(jit_fn, spec, config):
                    recorder(jit_fn, spec)
                    break

    def _entry(self, tuner: Any, key: CacheKey, config: Any, how: str) -> pb.Entry:
        """The results entry of the library's pick, with the timings it exposed."""
        from autotune_cache.version import __version__ as tuner_version

        timings = dict(self.timings)
        exposed = vars(tuner).get("configs_timings")
        if not timings and isinstance(exposed, Mapping) and exposed is not self.configs_timings:
            for candidate, value in exposed.items():
                try:
                    _time_into(timings, candidate, value)
                except Exception:  # noqa: BLE001 - a library's own record, best effort
                    continue
        rows = []
        for candidate in self._candidates_of(tuner):
            value = timings.get(config_text(candidate))
            if value is not None:
                rows.append(pb.Timing(config=candidate, time_ms=value,
                                      failure="" if value != float("inf") else "failed"))
        pick = config_to_proto(config)
        method = LIBRARY_METHOD + self.kind
        if not rows:
            method += (", picked from its own memo or database; timings not exposed"
                       if how == "memo" else ", timings not exposed")
        return pb.Entry(key=key.to_proto(), result=pb.Result(
            config=pick, time_ms=timings.get(config_text(pick), 0.0), candidates=rows,
            tuned_at=now_rfc3339(),
            tuner_version=tuner_version,
            tuning_seconds=round(time.perf_counter() - self.started, 6) if rows else 0.0,
            timing_method=method))


def compiled_config(jit_fn: Any, spec: str, config: Any) -> bool:
    """Whether Triton's specialization data `spec` of a compile of `jit_fn` is `config`'s:
    its meta-parameters among the compile's constants (by argument position), its launch
    options among the compile's options."""
    try:
        data = json.loads(spec)
        constants = {tuple(k): v for k, v in zip(data["constant_keys"], data["constant_vals"],
                                                  strict=True)}
        options = data["options"]
        names = list(jit_fn.arg_names)
    except (ValueError, KeyError, TypeError, AttributeError):
        return False
    for name, value in config.kwargs.items():
        if name not in names:
            continue
        found = constants.get((names.index(name),))
        if isinstance(found, dict):
            found = found.get("constexpr")
        if found != value:
            return False
    for option in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
        value = getattr(config, option, None)
        if value is not None and option in options and options[option] != value:
            return False
    return True


def _memo_get(memo: Any, key: Any) -> Any:
    """memo[key] or None: a library's memo object may answer only `in` and `[]`."""
    return memo[key] if key in memo else None  # noqa: SIM401


def _time_into(timings: dict[str, float], config: Any, value: Any) -> None:
    """timings[config's text] = the median of a benchmark's result (a list of quantiles)."""
    value = value[0] if isinstance(value, (list, tuple)) and value else value
    timings[match_text(config)] = float(value)


def _matching(configs: Any, wanted: pb.Config) -> Any:
    """The first candidate whose recorded form is `wanted` (configs.match_text, as
    configs.match_candidates pairs them), or None."""
    text = config_text(wanted)
    return next((config for config in configs if match_text(config) == text), None)


class SeededMemo:
    """A library tuner's memo (`self.cache`), fronted: questions go through its Seeding first,
    everything else to the library's own object, unchanged."""

    def __init__(self, inner: Any, tuner: Any, seeding: Seeding) -> None:
        self.inner = inner
        self._tuner = weakref.ref(tuner)
        self._seeding = seeding

    def _lookup(self, key: Any) -> Any:
        tuner = self._tuner()
        if tuner is None:  # pragma: no cover
            return _memo_get(self.inner, key)
        return self._seeding.lookup(tuner, self.inner, key)

    def __contains__(self, key: Any) -> bool:
        return self._lookup(key) is not None

    def __getitem__(self, key: Any) -> Any:
        found = self._lookup(key)
        if found is None:
            raise KeyError(key)
        return found

    def get(self, key: Any, default: Any = None) -> Any:
        found = self._lookup(key)
        return default if found is None else found

    def __setitem__(self, key: Any, config: Any) -> None:
        self.inner[key] = config
        self._seeding.stored(key, config)

    def __delitem__(self, key: Any) -> None:
        self._seeding.forget(key)
        del self.inner[key]

    def pop(self, key: Any, *default: Any) -> Any:
        self._seeding.forget(key)
        return self.inner.pop(key, *default)

    def clear(self) -> None:
        self._seeding.picks.clear()
        self.inner.clear()

    def __len__(self) -> int:
        return len(self.inner)

    def __bool__(self) -> bool:
        return bool(self.inner) or bool(self._seeding.picks)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.inner)

    def __getattr__(self, name: str) -> Any:
        if name in ("inner", "_tuner", "_seeding"):  # not set yet (a copy being built)
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"SeededMemo({self.inner!r})"


def attach(tuner: Any, what: str, known_seeded: bool) -> None:
    """Seed `tuner`, a library's tuner built under the switch that the cache's tuner cannot
    stand in for (`what`: the methods it overrides): its launches go through Seeding.launch."""
    seeding = Seeding(tuner, what, known_seeded)
    vars(tuner)[SEED_ATTR] = seeding
    vars(tuner)["run"] = seeding.launch


def of(tuner: Any) -> Seeding | None:
    """The tuner's Seeding, if it has one."""
    return vars(tuner).get(SEED_ATTR)


