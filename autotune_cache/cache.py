"""The tiered results cache: memory and loaded files, the cache directory, the remote server."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from autotune_cache.config.flags import Settings, regen_hint, settings_from_env
from autotune_cache.errors import (
    AutotuneCacheError,
    CacheDirError,
    CorruptFileError,
    DumpShardingError,
    FlagError,
    MissingResultError,
)
from autotune_cache.foundation import env, import_hook
from autotune_cache.foundation.key import CacheKey
from autotune_cache.foundation.validate import entry_problem, warn_damaged
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store import wording
from autotune_cache.store.dumpfile import DumpFile
from autotune_cache.store.dumprun import DumpRun
from autotune_cache.store.stats import Stats
from autotune_cache.store.tuning import (
    Resolved,
    Tune,
    TuneJob,
    build_entry,
    previous_pick,
    recorded_timings,
    reusable_timings,
)
from autotune_cache.tiers import Found, ProcessTier, Tier, build_tiers
from autotune_cache.tiers.memory import THIS_PROCESS

# add_listener's callback: (key, the hit or None, the strict-mode error or None).
LookupListener = Callable[[CacheKey, "pb.Entry | None", "MissingResultError | None"], None]
# add_violation_listener's: (kernel, the error's message) of a tuning strict mode forbade.
ViolationListener = Callable[[str, str], None]
# resolve_or_defer's `defer`: offered the rest of the protocol on a miss; True = taken over.
Defer = Callable[[Callable[[], Resolved]], bool]

log = logging.getLogger("autotune_cache")


def _check_writable_parent(path: Path, flag: str) -> None:
    """Fail at startup, naming the flag, when `path` could never be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CacheDirError(f"{flag}={path}: cannot create {path.parent} ({e.strerror or e}); "
                            "point the flag at a writable path.") from e
    if path.is_dir():
        raise CacheDirError(f"{flag}={path}: is a directory; give a file path.")
    if not os.access(path.parent, os.W_OK):
        raise CacheDirError(f"{flag}={path}: {path.parent} is not writable; point the flag at "
                            "a writable path.")


# How long a process waits for another process that is tuning the same key.
DEFAULT_LOCK_TIMEOUT_S = 1800.0


def check_dump_sharding(settings: Settings) -> None:
    """DumpShardingError when a dump runs in one of several Bazel test shards."""
    if settings.dump_to and (shards := env.total_shards()) > 1:
        raise DumpShardingError(
            f"--dump_autotune_results_to={settings.dump_to}: this test runs in "
            f"{shards} shards, so no shard sees every result and the "
            "dump would be incomplete. Run the dump with --test_sharding_strategy=disabled "
            "(the `.dump` target of autotuned_py_test already has shard_count = 1; do not "
            "force shards on it)."
        )


class Cache:
    """Looks results up across an ordered list of tiers (tiers/) and records new ones to every
    writable tier; the tiers' order is the lookup order. `resolve` runs the whole tuning protocol
    for a backend (lookup, lock, re-read, timing reuse, tuning, recording).

    The cache makes its own first tier, this process's memory over the loaded files (`memory`):
    it keeps every entry found in any tier there, with its origin. Otherwise it never asks which
    kind a tier is."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self.stats = Stats()
        self._lock = threading.RLock()
        self._listeners: list[LookupListener] = []
        self._violation_listeners: list[ViolationListener] = []
        # Winners that failed to launch here (reject_winner): key digest -> the winner's bytes.
        self._rejected: dict[str, bytes] = {}
        self._near_memo: dict[str, list[Found]] = {}  # a missed key's near misses (lookup)
        if self.settings.dump_merge and self.settings.dump_to is None:
            raise FlagError(
                "--autotune_dump_merge keeps a dump file's earlier entries, but no dump is "
                "written: add --dump_autotune_results_to=PATH, or drop the flag.")
        check_dump_sharding(self.settings)
        # A dump run must be able to tune: it is how a stale cache is regenerated, and the
        # regen command a strict failure prints adds a dump to the same configuration (an ini
        # file's require-complete, say). So a dump turns require-complete off for its run.
        # Whether someone configured this process (flags, or configure()): a process nobody
        # configured stays silent (Stats.report_at_exit, triton/progress.py).
        self.configured = self.settings != Settings()
        self.strict_off_for_dump = self.settings.dump_to is not None \
            and self.settings.require_complete
        if self.strict_off_for_dump:
            self.settings = replace(self.settings, require_complete=False)
            log.info("autotune_cache: --dump_autotune_results_to is given, so this run may tune: "
                     "--require_complete_autotune_results is off for it")
        # How the messages tell the user to regenerate and to forbid tuning; the pytest plugin
        # names its own options instead of the AUTOTUNE_FLAGS flags.
        loaded = self.settings.load_from
        path = str(loaded[0]) if len(loaded) == 1 else "PATH"
        self.dump_advice = (f"running once with --dump_autotune_results_to={path} (on this "
                            f"device) and committing {path}")
        self.require_flag = "--require_complete_autotune_results"
        self._dump = None
        if self.settings.dump_to is not None:
            _check_writable_parent(self.settings.dump_to, "--dump_autotune_results_to")
            self._dump = DumpFile(self.settings.dump_to, merge=self.settings.dump_merge)
        self.dump_run = DumpRun(self._dump)
        # An in-place regen (load F, dump F) loads F as the run found it (DumpFile.load_path).
        # A broken results file a regen replaces is not loaded (DumpFile.skips_load).
        loads = [p for p in self.settings.load_from
                 if self._dump is None or not self._dump.skips_load(p)]
        try:
            self.memory = ProcessTier.from_files(
                loads, read_from=None if self._dump is None else self._dump.load_path)
        except CorruptFileError as e:  # a subclass (XLA's own file, a newer version): as is
            raise (e if type(e) is not CorruptFileError
                   else CorruptFileError(f"{e}\n{self.regen_line()}")) from None
        self.tiers: list[Tier] = build_tiers(self.settings, self.memory)

    def use_cache_dir(self, directory: Path) -> None:
        """From now on, keep results in the directory tier `directory`, as if
        --autotune_cache_dir had named it (a routed kernel's `cache_results=True`:
        triton/routing.py). The tiers are rebuilt from the new settings, in build_tiers' lookup
        order; the memory tier, and what it holds, is kept."""
        with self._lock:
            self.settings = replace(self.settings, cache_dir=directory)
            self.tiers = build_tiers(self.settings, self.memory)

    def add_listener(self, listener: LookupListener) -> None:
        """Call `listener(key, entry, error)` after every lookup: `entry` is the hit (None on a
        miss), `error` the MissingResultError about to be raised under require_complete (else
        None). The pytest plugin attributes misses to tests this way. A listener must not raise."""
        self._listeners.append(listener)

    def add_violation_listener(self, listener: ViolationListener) -> None:
        """Call `listener(kernel, message)` when strict mode forbids a tuning that no lookup of
        ours saw (a tuner left on Triton's autotuner: triton/classroute.py), before the error is
        raised, so that a run fails even where the test or a library catches the error. A
        listener must not raise."""
        self._violation_listeners.append(listener)

    def strict_violation(self, kernel: str, message: str) -> None:
        """Tell the violation listeners (see add_violation_listener)."""
        for listener in self._violation_listeners:
            listener(kernel, message)

    def _tell(self, key: CacheKey, entry: pb.Entry | None,
              error: MissingResultError | None = None) -> None:
        for listener in self._listeners:
            listener(key, entry, error)

    def _shared(self) -> list[Tier]:
        return [t for t in self.tiers if t.shared]

    # ----- lookups -------------------------------------------------------------------------

    def _usable(self, found: Found, key: CacheKey,
                candidates: Iterable[pb.Config] | None) -> bool:
        """Whether an entry found in a tier may be used for `key` (validate.py); a damaged one
        is warned about once, naming where it came from, and counts as a miss. A winner that
        failed to launch here (reject_winner) is never usable again, from any tier, by a lookup
        or by the re-read after a peer's tuning."""
        rejected = self._rejected.get(key.digest()) if self._rejected else None
        if rejected is not None and \
                found.entry.result.config.SerializeToString(deterministic=True) == rejected:
            return False
        if found.origin == THIS_PROCESS:
            return True
        problem = entry_problem(found.entry, key, candidates)
        if problem is None:
            return True
        warn_damaged(found.origin, problem)
        return False

    def _find(self, key: CacheKey, candidates: Iterable[pb.Config] | None) -> Found | None:
        for i, tier in enumerate(self.tiers):
            if i and self.settings.require_complete and self.settings.load_from:
                break  # strict with files loaded: a hit only outside the files is a miss
            found = tier.get(key)
            if found is not None and self._usable(found, key, candidates):
                # Keep a copy in the shared tiers before this one for the next process.
                for earlier in self.tiers[:i]:
                    if earlier.shared and earlier.writable:
                        earlier.put(key, found.entry)
                return found
        return None

    def lookup(self, key: CacheKey, candidates: Iterable[pb.Config] | None = None
               ) -> pb.Entry | None:
        """The recorded entry for `key`, or None on a miss (an error under require_complete).

        `candidates`: the kernel's candidate configs (as recorded, config_to_proto). When given,
        an entry whose winner is not one of them is damaged (a miss), whatever tier holds it."""
        candidates = None if candidates is None else list(candidates)
        with self._lock:
            in_memory = self.memory.in_memory(key)
            try:
                found = self._find(key, candidates)
            except CorruptFileError as e:
                raise CorruptFileError(f"{e}\n{self.regen_line()}") from None
            if found is not None:
                self.stats.hit(0.0 if in_memory else found.entry.result.tuning_seconds)
                self.memory.remember(found)
                self._mark_used(found.key, found.entry)
                self._tell(key, found.entry)
                return found.entry
            near = self._near_memo[key.digest()] = self._find_near_misses(key)
            # Entries that differ only in the candidate list are not stale: their timings are
            # reused by an incremental re-tune (CacheKey.is_stale, the one rule).
            stale = [f for f in near if key.is_stale(f.key)]
            self.stats.miss(key.describe() if stale else None,
                            candidates_changed=bool(near) and not stale)
            if stale:
                log.warning("autotune_cache: stale cache for %s: %s", key.describe(),
                            "; ".join(", ".join(key.stale_reasons(f.key)) for f in stale))
            elif near:
                log.info("autotune_cache: candidate list of %s changed; re-tuning only the new "
                         "candidates", key.describe())
            if self.settings.require_complete:
                message = self.missing_message(key, near, candidates)
                elsewhere = [t.name for t in self.tiers[1:] if t.get(key) is not None]
                if elsewhere and self.settings.load_from:
                    message += (f"\n(The {elsewhere[0]} tier holds it, which does not count: "
                                f"under {self.require_flag} only the loaded files do.)")
                error = MissingResultError(message)
                self._tell(key, None, error)
                raise error
            self._tell(key, None)
            return None

    def peek(self, key: CacheKey, candidates: Sequence[pb.Config]) -> pb.Entry | None:
        """The entry a lookup of `key` would return, counting nothing and never raising (a
        miss is None): for a caller that learns only later whether the key is its to serve
        (triton/seeding.py asks, then calls hit() on the keys it serves)."""
        with self._lock:
            try:
                found = self._find(key, list(candidates))
            except CorruptFileError:
                return None  # the lookup that follows says so
        return None if found is None else found.entry

    def reject_winner(self, key: CacheKey, entry: pb.Entry, reason: str) -> None:
        """The winner `entry` names for `key` failed to compile or launch in this process
        (triton/engine.py): no tier serves that entry here again (a re-tune's entry, with
        another winner, is served), and one warning names the key, where the entry came from and
        the reason. An entry from a shared tier is untrusted; a damaged or forged one costs a
        re-tune, never every launch."""
        with self._lock:
            found = self.memory.forget(key)
            origin = found.origin if found is not None else "a cache tier"
            self._rejected[key.digest()] = entry.result.config.SerializeToString(
                deterministic=True)
        log.warning("autotune_cache: the cached winner of %s, from %s, failed to compile or "
                    "launch here (%s); it is not used again in this process and the key is "
                    "tuned again where tuning is allowed. Regenerate the results, or prune the "
                    "entry from that tier.", key.describe(), origin, reason)

    def refresh(self, key: CacheKey, candidates: Iterable[pb.Config] | None = None
                ) -> pb.Entry | None:
        """Re-read the shared tiers (directory, remote) for `key`, after waiting for another
        process's tuning of it; `candidates` as for lookup()."""
        candidates = None if candidates is None else list(candidates)
        with self._lock:
            found = next((f for t in self._shared() if (f := t.get(key)) is not None
                          and self._usable(f, key, candidates)), None)
            if found is None:
                return None
            self._near_memo.pop(key.digest(), None)  # served: its miss is over
            self.memory.remember(found)
            self.stats.from_peer(found.entry.result.tuning_seconds)
            self._mark_used(key, found.entry)
            return found.entry

    def _same_problem(self, key: CacheKey) -> Iterator[Found]:
        """Every known entry for key's kernel and problem, from every tier, once each."""
        seen: set[str] = set()
        for tier in self.tiers:
            for found in tier.same_problem(key):
                k = found.key
                if k.kernel != key.kernel or k.problem != key.problem or k.digest() in seen:
                    continue
                if found.origin != THIS_PROCESS and entry_problem(found.entry, k) is not None:
                    continue  # a damaged entry lends neither a near miss nor timings
                seen.add(k.digest())
                yield found

    def near_misses(self, key: CacheKey) -> list[Found]:
        """Entries for the same kernel and problem under another key scheme, device, toolchain,
        source or candidate list. A miss's are found once, by lookup(), and kept until the key
        is recorded: the stale check, the timings a re-tune reuses and the pytest plugin's
        miss report read the same list (a miss once searched every tier three times)."""
        found = self._near_memo.get(key.digest())
        return found if found is not None else self._find_near_misses(key)

    def _find_near_misses(self, key: CacheKey) -> list[Found]:
        return [f for f in self._same_problem(key) if f.key != key]

    def same_source(self, key: CacheKey) -> list[pb.Entry]:
        """Entries that differ from `key` only in the candidate list: reusable timings."""
        return [f.entry for f in self.near_misses(key) if not key.is_stale(f.key)]

    def missing_message(self, key: CacheKey, near: list[Found],
                        candidates: Sequence[pb.Config] | None = None) -> str:
        """The require_complete error (store/wording.py), naming every source searched."""
        return wording.missing_message(
            key, near, candidates, searched=[s for tier in self.tiers for s in tier.searched()],
            require_flag=self.require_flag, regen=self.regen_line())

    def regen_line(self) -> str:
        """How to regenerate the cache: the runner's command (the Bazel macro's regen target)
        or the dump advice (store/wording.py)."""
        return wording.regen_line(regen_hint(), self.dump_advice)

    def loaded_entries(self, kernel: str, *, max_entries: int, max_unparsed_bytes: int
                       ) -> list[tuple[CacheKey, pb.Entry]]:
        """Every (key, entry) of `kernel` in the --load_autotune_results_from files, earlier
        files first, parsed on the way; none when the files hold more than `max_entries` of
        them or more than `max_unparsed_bytes` of their text is not parsed yet (reading them
        would cost more than the caller saves). A damaged entry raises CorruptFileError."""
        return self.memory.loaded_entries(kernel, max_entries=max_entries,
                                          max_unparsed_bytes=max_unparsed_bytes)

    def loaded_cost(self, kernel: str) -> tuple[int, int]:
        """What loaded_entries(kernel) would read: how many entries of `kernel` the
        --load_autotune_results_from files hold, and how many bytes of their text are still
        unparsed (nothing is parsed to say so)."""
        return self.memory.loaded_cost(kernel)

    def loaded_kernels(self) -> set[str]:
        """The kernel names the --load_autotune_results_from files hold entries of (nothing is
        parsed)."""
        return self.memory.loaded_kernels()

    # ----- the tuning protocol ---------------------------------------------------------------

    def resolve(self, key: CacheKey, candidates: Sequence[pb.Config], tune: Tune, *,
                timing_method: str, never_reuse: Collection[int] = ()) -> Resolved:
        """The entry for `key`, from a tier, from a peer process, or tuned by `tune`.

        `candidates` are the kernel's candidate configs as recorded: an entry whose winner is
        not one of them is damaged (a miss). In order:
        1. lookup(): a hit is returned; a miss is counted (stale or not), and under
           require_complete raises MissingResultError naming the key and how to regenerate;
        2. the key's cross-process lock (tune_lock; a peer tuning the key is waited for), and,
           once held on a shared tier, refresh(): the peer's entry is returned;
        3. the candidates whose timings were recorded under another candidate list of the same
           source, device and toolchain, measured with `timing_method`, reuse them (never
           those in `never_reuse`); `tune(job)` times the others (`job.todo`);
        4. the winner (tuning.build_entry: the fastest among `Tuned.finalists` and the reused,
           the earlier on a tie) is recorded in every writable tier and the dump, still under
           the lock, and returned with its index.
        The lock is released on every path; an exception from `tune` records nothing."""
        resolved = self.resolve_or_defer(key, candidates, tune, timing_method=timing_method,
                                         never_reuse=never_reuse, defer=None)
        assert resolved is not None  # nothing defers without `defer`
        return resolved

    def resolve_or_defer(self, key: CacheKey, candidates: Sequence[pb.Config], tune: Tune, *,
                         timing_method: str, never_reuse: Collection[int] = (),
                         defer: Defer | None) -> Resolved | None:
        """resolve(), except that on a miss (step 1 found nothing and did not raise) `defer`, when
        given, is offered steps 2-4 as a callable: when `defer(finish)` returns True the caller
        has taken them over (it calls `finish()` later, e.g. before the dump's final write, see
        before_final_dump) and this returns None. Backends use it to tune at the end of a dump
        run (triton/deferred.py); the protocol itself is the same either way."""
        candidates = tuple(candidates)
        entry = self.hit(key, candidates)
        if entry is not None:
            return Resolved(entry)
        return self.tune_or_defer(key, candidates, tune, timing_method=timing_method,
                                  never_reuse=never_reuse, defer=defer)

    def hit(self, key: CacheKey, candidates: Sequence[pb.Config]) -> pb.Entry | None:
        """Step 1 of resolve(), for a launch: the key counts as served, and its entry is
        returned from a tier, or None on a miss (under require_complete, MissingResultError).
        A launch asks this first, so that a hit builds nothing for a tuning."""
        if not candidates:
            raise ValueError(f"autotune_cache: resolve() for {key.describe()} got no candidate "
                             "configs; pass at least one (the kernel's candidate list)")
        self.stats.served(key.kernel)
        return self.lookup(key, candidates)

    def tune_or_defer(self, key: CacheKey, candidates: Sequence[pb.Config], tune: Tune, *,
                      timing_method: str, never_reuse: Collection[int] = (),
                      defer: Defer | None) -> Resolved | None:
        """Steps 2-4 of resolve() after a miss of hit(), or None when `defer` took them over
        (see resolve_or_defer)."""
        candidates = tuple(candidates)

        def finish() -> Resolved:
            # `shared`: the lock is held on the cache directory or the remote server, so a peer
            # that held it before may have recorded the key; refresh() re-reads those tiers.
            with self.tune_lock(key) as shared:
                found = self.refresh(key, candidates) if shared else None
                if found is not None:
                    return Resolved(found)
                return self._tune(key, candidates, tune, timing_method, never_reuse)

        if defer is not None and defer(finish):
            self.stats.tuning_deferred()
            return None
        return finish()

    def reusable(self, key: CacheKey, candidates: Sequence[pb.Config], *, timing_method: str,
                 never_reuse: Collection[int] = ()) -> dict[int, pb.Timing]:
        """Step 3 of resolve(): the recorded timings a tuning of `key` reuses, by candidate
        index (entries that differ from `key` only in the candidate list, measured with
        `timing_method`; never those in `never_reuse`). A deferred tuning asks at the launch,
        to compile only the others ahead; its tuning asks again at the end."""
        return reusable_timings(
            candidates, recorded_timings(self.same_source(key), timing_method), never_reuse)

    def _tune(self, key: CacheKey, candidates: tuple[pb.Config, ...], tune: Tune,
              timing_method: str, never_reuse: Collection[int]) -> Resolved:
        """Steps 3 and 4 of resolve()."""
        started = time.perf_counter()
        reused = self.reusable(key, candidates, timing_method=timing_method,
                               never_reuse=never_reuse)
        job = TuneJob(key, candidates,
                      tuple(i for i in range(len(candidates)) if i not in reused), reused)
        tuned = tune(job)
        if sorted(tuned.timings) != list(job.todo):
            raise ValueError(
                f"autotune_cache: the tune callback for {key.describe()} must return a Timing "
                f"for exactly the candidates of job.todo {list(job.todo)} (a failed one with its "
                f"`failure`), but returned them for {sorted(tuned.timings)}")
        timings = []
        for i, config in enumerate(candidates):
            timing = tuned.timings[i] if i in tuned.timings else reused[i]
            timing.config.CopyFrom(config)
            timings.append(timing)
        eligible = None if tuned.finalists is None else {*tuned.finalists, *reused}
        entry, best = build_entry(key, timings, timing_method, time.perf_counter() - started,
                                  eligible, previous=previous_pick(self.same_source(key),
                                                                   candidates))
        entry.result.triton_specialization = tuned.specializations.get(best, "")
        self.record(entry, benchmarks=tuned.benchmarks, key=key)
        return Resolved(entry, best)

    # ----- recording -----------------------------------------------------------------------

    def record(self, entry: pb.Entry, *, benchmarks: int = 0, key: CacheKey | None = None
               ) -> None:
        """Store a newly tuned entry in memory, every writable shared tier and the dump; pass
        `key` (the entry's key) when it is at hand, so it is not rebuilt from the entry."""
        key = CacheKey.from_proto(entry.key) if key is None else key
        with self._lock:
            self._near_memo.pop(key.digest(), None)
            self.stats.tuning_done(entry.result.tuning_seconds, benchmarks)
            for tier in self.tiers:
                if tier.writable:
                    tier.put(key, entry)
            self._mark_used(key, entry)
            self.flush_dump()

    def record_warmup(self, key: CacheKey, entry: pb.Entry) -> None:
        """Keep a warm-up entry (triton/warmups.py) for the dump, and only there: it is written
        with the next tuning or at exit, and never offered to a shared tier."""
        if self.dump_run.add_warmup(key, entry):
            self.stats.warmup_recorded()

    def _mark_used(self, key: CacheKey, entry: pb.Entry) -> None:
        self.dump_run.use(key, entry)

    def flush_dump(self) -> None:
        """Hand this process's entries to the dump run now if they changed (store/dumprun.py:
        the run's directory; the dump file itself is written once, by finish_dump)."""
        self.dump_run.flush()

    def before_final_dump(self, finisher: Callable[[], None]) -> None:
        """Run `finisher` once, right before the dump's final write (finish_dump: pytest's
        session end, or process exit); see DumpRun.before_final."""
        self.dump_run.before_final(finisher)

    def finish_dump(self, *, failed: bool = False) -> int:
        """The dump's one write, after the finishers (before_final_dump); the number of entries
        the dump holds. Later lookups are not dumped. `failed`: the run failed (a runner knows:
        pytest's exit status, the test's; a plain process, an uncaught exception), so the
        entries the file held before that this run did not reproduce are kept; a passing full
        run replaces what it owns (store/dumprule.py)."""
        return self.dump_run.finish(failed=failed)

    @property
    def dump_kept(self) -> int:
        """How many of the file's earlier entries the last finish_dump kept (dumprule.py)."""
        return self.dump_run.kept

    def note_bypassed(self) -> None:
        """Count, in the stats, the loaded entries of kernels that stayed on Triton's own
        autotuner (they ran there, or the import-time scan found them): entries no kernel used
        because their kernel was not routed. Nothing is parsed."""
        stats = self.stats
        kernels = (stats.kernels_ran_on_triton | stats.kernels_on_triton) & self.loaded_kernels()
        stats.loaded_on_triton = {k: self.loaded_cost(k)[0] for k in sorted(kernels)}

    def close(self, *, failed: bool = False) -> None:
        """Final dump write (`failed`: see finish_dump) and the exit summary."""
        self.finish_dump(failed=failed)
        self.note_bypassed()
        self.stats.report_at_exit(configured=self.configured)

    @contextlib.contextmanager
    def tune_lock(self, key: CacheKey, timeout: float = DEFAULT_LOCK_TIMEOUT_S) -> Iterator[bool]:
        """Hold the cross-process lock for tuning `key`: the first writable shared tier's (the
        directory's, else the remote server's); yields False when nothing is shared and
        writable (nothing to lock), True once held."""
        tier = next((t for t in self._shared() if t.writable), None)
        if tier is None:
            yield False
            return
        with tier.lock(key, timeout) as held:
            yield held


_cache: Cache | None = None
_cache_lock = threading.Lock()
_atexit_registered = False


def _at_exit() -> None:
    """Write the dump at exit; a dump that cannot be written fails the process (exit status 1),
    since an exception in an atexit callback would only be printed and ignored."""
    if _cache is None:
        return
    # An uncaught exception ended the program (Python sets sys.last_value as it prints it):
    # its dump is a failed run's, which drops nothing it did not reproduce.
    crashed = getattr(sys, "last_value", None) is not None
    try:
        _cache.close(failed=crashed)
    except Exception as e:  # noqa: BLE001 - any failure here must fail the process, by name
        text = str(e) if isinstance(e, (AutotuneCacheError, OSError)) else (
            f"writing the dump at exit failed ({type(e).__name__}: {e})")
        print(f"autotune_cache: {text}", file=sys.stderr)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


def _install(settings: Settings) -> Cache:
    """Make a new process-wide cache; the caller holds _cache_lock."""
    global _cache, _atexit_registered
    if _cache is not None:
        _cache.close()
    _cache = Cache(settings)
    if not _atexit_registered:
        atexit.register(_at_exit)
        _atexit_registered = True
    import_hook.engage(settings)  # what it asks of Triton, once the program imports it
    return _cache


def configure(settings: Settings | None = None) -> Cache:
    """Replace the process-wide cache: the Python equivalent of AUTOTUNE_FLAGS."""
    with _cache_lock:
        cache = _install(settings if settings is not None else settings_from_env())
        cache.configured = True  # asked for: its summary line and long tunings' progress speak
        return cache


def installed_cache() -> Cache | None:
    """The process-wide cache if one was made yet (configured, or on first use), else None."""
    return _cache


def get_cache() -> Cache:
    """The process-wide cache, configured from AUTOTUNE_FLAGS on first use."""
    cache = _cache
    if cache is not None:
        return cache
    with _cache_lock:
        if _cache is None:
            _install(settings_from_env())
        assert _cache is not None
        return _cache
