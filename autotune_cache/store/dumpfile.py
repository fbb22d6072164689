"""The dump file (--dump_autotune_results_to): one run's entries, written once, at its end.

A *run* is the process that first opens a dump path (the run's root) and every process it
starts that dumps to the same path (a test's subprocesses, a child made with os.fork();
pytest-xdist workers go through the plugin's own merge). The root makes a private run directory
under the temp directory and names it in AUTOTUNE_DUMP_RUN, which child processes inherit (a
run started inside another run, to another path, remembers the outer one, so a grandchild
dumping to the outer path still joins it). A member writes its entries to its own partial file
there; the root writes the dump file itself, once, when the run ends (close): its own entries
and every partial, combined with the file's earlier entries by the ownership rule
(dumprule.py: a dump replaces only what the run owns), under one lock, atomically. A killed run
never touches the dump file.

- The root is the process that made the DumpFile: a child made with os.fork() keeps the
  object, but its pid differs from the one recorded at creation, so it is a member (it writes a
  partial file and never ends the run).
- A file at the dump path that is not a results file is refused when the run starts, in every
  mode, and never overwritten.
- Two processes of one run that recorded different entries for one key (each tuned it): the
  dump keeps the faster winner (`merge_run`, the run's one rule, which the pytest-xdist merge
  uses too); each such key is logged, and counted in `tuned_twice`.
- A file another run changed since this one started is read again before the final write,
  so its entries of other devices are kept. Merge mode does that read-combine-write under a
  lock kept in a directory no other account can take (locking.private_lock_dir: under the
  home directory), never next to the dump, so nothing is left beside a committed file.
- The root removes the run directory when it closes. A process started inside that run which
  first dumps after it ended (a late child) finds its inherited run gone: it never replaces
  the run's file, it merges its entries into it (the merge row of the rule).
- The file as the run found it is kept in the run directory (`snapshot`), and every member
  that loads the dump path loads that snapshot: an in-place regen (load F, dump F) sees the
  committed entries for the whole run.
- A dump path that does not exist yet is not loaded (skips_load): a first dump under a setup
  that loads the file (an ini file's load option) just works.
- A dump path that is a symbolic link is written through: the link's target is replaced
  atomically, the link stays.
- The root holds `<run dir>/alive` locked while it lives; a new root sweeps the run
  directories of dead ones (a killed run's litter).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from autotune_cache.errors import CacheDirError, CorruptFileError, LockError
from autotune_cache.formats import (
    Keyed,
    damage_of,
    is_text_path,
    keyed,
    parse_results,
    read_capped,
    save_keyed,
)
from autotune_cache.foundation import env, locking
from autotune_cache.foundation.locking import Liveness, file_lock, private_lock_dir, sweep_dead
from autotune_cache.store.dumprule import FAILED, FULL, MERGE, DumpOutcome, apply_rule

log = logging.getLogger("autotune_cache")

DUMP_FLAG = "--dump_autotune_results_to"
# The root holds this lock for the one read-combine-write of the final file.
LOCK_TIMEOUT_S = 120.0
_TARGET = "target"  # the run directory's file naming the dump path it collects for
_OUTER = "outer"  # ... and the one naming the run it was started inside ('' for none)
_SNAPSHOT = "snapshot"  # the dump path's file as the run found it (a hard link, else a copy)
_BROKEN = "broken"  # the broken results file the run replaces: why (members skip loading it)
RUN_PREFIX = "autotune-dump-run-"


def _preferred(a: Keyed, b: Keyed) -> Keyed:
    """Of two entries one run recorded for one key: the faster winner (the rule of
    `autotune-cache merge --on-conflict=fastest`), then the earlier tuning, then the smaller
    encoding: a choice that depends on the entries alone, never on which process ran which test
    or finished first (the CLI keeps its earlier input on a tie)."""
    def rank(pair: Keyed) -> tuple[float, str, bytes]:
        result = pair[1].result
        return (result.time_ms, result.tuned_at, pair[1].SerializeToString(deterministic=True))

    return min(a, b, key=rank)


def merge_run(sources: Iterable[Iterable[Keyed]]) -> tuple[dict[str, Keyed], list[Keyed]]:
    """The entries of one run's processes, merged: by key digest, and the keys two processes
    recorded differently (each kept as `_preferred` decides). The one rule for merging a run,
    written once: DumpFile (a run's subprocesses) and the pytest-xdist merge use it."""
    merged: dict[str, Keyed] = {}
    twice: dict[str, Keyed] = {}
    for pairs in sources:
        for pair in pairs:
            digest = pair[0].digest()
            earlier = merged.get(digest)
            if earlier is None:
                merged[digest] = pair
            elif earlier[1] != pair[1]:
                merged[digest] = _preferred(earlier, pair)
                twice[digest] = merged[digest]
    return merged, list(twice.values())


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def read_existing(path: Path, flag: str = DUMP_FLAG) -> dict[str, Keyed]:
    """The entries of the results file at a dump path ({} when there is none or it is empty);
    CacheDirError, naming the flag, when something else is there: it must not be overwritten."""
    try:
        data = read_capped(path)
        if not data.strip():
            return {}
        entries = parse_results(data, path).entries
    except FileNotFoundError:
        return {}
    except (CorruptFileError, OSError) as e:
        raise CacheDirError(
            f"{flag}={path}: the file there is not a results file ({e}), so the dump will not "
            "overwrite it; move it away or point the option at another path.") from e
    return {key.digest(): (key, entry) for key, entry in keyed(entries)}


def _damaged_results_file(path: Path) -> bool:
    """Whether the unparsable file at `path` is a results file gone bad, not something else:
    a text results file whose damage names itself (formats.damage_of) or that still starts
    with its `version:` line."""
    if not is_text_path(path):
        return False
    try:
        head = read_capped(path, budget=False)
    except (OSError, CorruptFileError):
        return False
    if damage_of(head, text=True) is not None:
        return True
    return head.lstrip().startswith((b"version:", b"version :", b"# autotune"))


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def _find_run(inherited: str, target: str) -> Path | None:
    """The live run, among the inherited one and the runs it was started inside, that collects
    for `target`; None when there is none (this process is then a root). Following the outer
    runs matters when a run to another path sits in between, as an xdist worker's partial dump
    sits between the controller's run and a subprocess dumping to the controller's path."""
    seen: set[str] = set()
    current = inherited
    while current and current not in seen:
        seen.add(current)
        run_dir = Path(current)
        if _read(run_dir / _TARGET) == target:
            return run_dir
        current = _read(run_dir / _OUTER) or ""
    return None


class DumpFile:
    """This process's part of one dump run (the module docstring)."""

    def __init__(self, path: Path, *, merge: bool = False, flag: str = DUMP_FLAG) -> None:
        locking.prepare()  # the dump is written at exit: nothing may be imported then
        self.path = Path(path)
        self.merge = merge
        self.flag = flag
        self._target = str(self.path.resolve())
        self._pid = os.getpid()  # a child made with os.fork() has another: never the root
        inherited = env.dump_run()
        run_dir = _find_run(inherited, self._target)
        self._root = run_dir is None
        # A late child: started inside a run that has ended. It must not replace the run's file.
        self.orphan = self._root and bool(inherited) and not Path(inherited).is_dir()
        if self.orphan:
            log.info("autotune_cache: the dump run this process was started in has ended, so "
                     "its entries are merged into %s, never replacing it", self.path)
            self.merge = True
        self._members: dict[Path, tuple[tuple[int, int, int] | None, dict[str, Keyed]]] = {}
        self._closed = False
        self.outcome: DumpOutcome | None = None  # what close() did to the file (the root)
        self.tuned_twice = 0  # keys two processes of the run tuned (merge_run kept the faster)
        self.broken = ""  # why the file at the dump path is a broken results file (replaced)
        self._alive: Liveness | None = None
        self._snapshot: dict[str, Keyed] = {}
        self._start_identity: tuple[int, int, int] | None = None
        if self._root:
            # Refuse a foreign file now, before any tuning. The identity first: a change after
            # it makes the final write read the file again.
            self._start_identity = _identity(self.path)
            self._snapshot = self._read_committed(flag)
            self._outer_run = inherited or None  # a run to another path, restored at close
            temp = Path(tempfile.gettempdir())
            sweep_dead(temp, f"{RUN_PREFIX}*")
            self.run_dir = Path(tempfile.mkdtemp(prefix=RUN_PREFIX))
            self._alive = Liveness(self.run_dir)
            (self.run_dir / _TARGET).write_text(self._target, encoding="utf-8")
            (self.run_dir / _OUTER).write_text(inherited, encoding="utf-8")
            if self.broken:
                (self.run_dir / _BROKEN).write_text(self.broken, encoding="utf-8")
            else:
                self._keep_snapshot()
            env.set_dump_run(str(self.run_dir))
        else:
            assert run_dir is not None
            self.run_dir = run_dir

    @property
    def is_root(self) -> bool:
        """Whether this process is the run's root: it made this DumpFile as the run's first
        process (a forked child, which inherits the object, is a member)."""
        return self._root and os.getpid() == self._pid

    @property
    def partial(self) -> Path:
        """This process's partial file in the run directory (a member's)."""
        return self.run_dir / f"p-{os.getpid()}-{id(self):x}.binpb"

    @property
    def kept(self) -> int:
        """How many of the file's earlier entries the last close kept."""
        return self.outcome.kept if self.outcome is not None else 0

    def _read_committed(self, flag: str) -> dict[str, Keyed]:
        """The entries at the dump path. A results file broken by hand (a merge conflict, a
        cut-off end, an editor's byte-order mark) is what a regen must recover from: it is
        replaced, and said so (`broken`); a file that is not a results file at all is still
        refused (read_existing)."""
        try:
            return read_existing(self.path, flag)
        except CacheDirError as e:
            cause = e.__cause__
            if not isinstance(cause, CorruptFileError) or not _damaged_results_file(self.path):
                raise
            self.broken = str(cause)
        log.warning("autotune_cache: %s is a broken results file, which this dump run "
                    "replaces with what it tunes and loads; its entries are not reused: %s",
                    self.path, self.broken)
        return {}

    def skips_load(self, path: Path) -> bool:
        """Whether a file to load is this run's dump path and must not be loaded: it holds a
        broken results file that the run replaces (loading it would only fail the regen), or
        it does not exist yet (a first dump under a setup that loads it)."""
        if not self._is_target(path):
            return False
        if (self.run_dir / _BROKEN).is_file():
            return True
        if not Path(path).exists() and not (self.run_dir / _SNAPSHOT).is_file():
            log.info("autotune_cache: %s does not exist yet; this dump run creates it, so it "
                     "is not loaded", path)
            return True
        return False

    def _keep_snapshot(self) -> None:
        """Keep the dump path's file as the run found it, for the members' loads."""
        snapshot = self.run_dir / _SNAPSHOT
        try:
            os.link(self._target, snapshot)
        except FileNotFoundError:
            return
        except OSError:  # another file system, or no hard links: a copy
            try:
                shutil.copyfile(self._target, snapshot)
            except OSError:  # a full temp directory: no snapshot, never a cut-off one
                snapshot.unlink(missing_ok=True)

    def load_path(self, path: Path) -> Path:
        """Where to read `path`, a file to load: the run's snapshot when it is this dump's path
        (an in-place regen sees the committed file for the whole run), else `path`."""
        snapshot = self.run_dir / _SNAPSHOT
        return snapshot if self._is_target(path) and snapshot.is_file() else Path(path)

    def _is_target(self, path: Path) -> bool:
        """Whether `path` names this dump's file (through links and relative parts)."""
        try:
            return str(Path(path).resolve()) == self._target
        except OSError:
            return False

    # ----- writing ---------------------------------------------------------------------------

    def write(self, pairs: Iterable[Keyed]) -> int:
        """Record this process's entries so far: a member writes its partial file (so the root
        finds them even when this process is killed later); the root writes nothing before the
        run ends (close), so a killed run never touches the dump file. Returns the number of
        entries given. CacheDirError names the file when a partial cannot be written."""
        pairs = list(pairs)
        if not self.is_root:
            self._write_partial(pairs)
        return len(pairs)

    def close(self, pairs: Iterable[Keyed], *, keep_existing: bool = False,
              kind: str = FULL, selection: str = "") -> int:
        """The run's last write from this process. In the root, the dump file is written (an
        empty run still writes an empty results file) by the ownership rule (dumprule.py) and
        the run directory removed; `outcome` says what the write did. Returns the number of
        entries the dump file holds (the root), or this process wrote (a member).

        `kind`: the kind of run (dumprule: FULL, SUBSET, FAILED, MERGE), `selection` how a
        subset run selected; `keep_existing` is FAILED (the run failed, so it never shrinks the
        file). Merge mode, and a late child, are MERGE."""
        pairs = list(pairs)
        if self._closed:
            return len(pairs)
        if not self.is_root:
            self._write_partial(pairs)
            self._closed = True
            return len(pairs)
        if self.merge:
            kind = MERGE
        elif keep_existing:
            kind = FAILED
        with self._file_lock():
            run, twice = merge_run([self._member_entries(), pairs])
            self.tuned_twice = len(twice)
            for key, _ in twice:
                log.info("autotune_cache: two processes of this dump run tuned %s; the dump "
                         "keeps the faster winner", key.describe())
            merged, outcome = apply_rule(self._earlier_entries(), run, kind, str(self.path))
            outcome.selection = selection
            # Through a symbolic link: its target is replaced, the link stays.
            self._save(Path(self._target), merged.values())
        self.outcome = outcome
        self._closed = True
        self._end_run()
        return len(merged)

    def _earlier_entries(self) -> dict[str, Keyed]:
        """The file's entries now: those read when the run began, unless another run changed
        the file since (then read again: its entries of other devices must be kept)."""
        if _identity(self.path) == self._start_identity:
            return self._snapshot
        self.broken = ""
        return self._read_committed(self.flag)

    def _end_run(self) -> None:
        if env.dump_run() == str(self.run_dir):
            env.set_dump_run(self._outer_run)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if self._alive is not None:
            self._alive.release()

    def abandon(self) -> None:
        """End the run without writing the dump file (the root): the xdist merge failed."""
        self._closed = True
        if self.is_root:
            self._end_run()

    def _write_partial(self, pairs: list[Keyed]) -> None:
        if not self.run_dir.is_dir():
            log.warning("autotune_cache: the dump run that %s belongs to has ended (its root "
                        "process closed it), so %d entries of process %d are not in the dump",
                        self.path, len(pairs), os.getpid())
            return
        self._save(self.partial, pairs)

    def _save(self, path: Path, pairs: Iterable[Keyed]) -> None:
        try:
            save_keyed(path, pairs)
        except OSError as e:
            raise CacheDirError(
                f"{self.flag}={self.path}: cannot write the dump ({e.strerror or e}); free "
                "some space or point the option at a writable path.") from e

    # ----- reading the other processes' entries ---------------------------------------------

    def _member_entries(self) -> list[Keyed]:
        """Every member's entries, oldest partial first, re-reading only partial files that
        changed."""
        for path in sorted(self.run_dir.glob("p-*.binpb")):
            identity = _identity(path)
            known = self._members.get(path)
            if identity is None or (known is not None and known[0] == identity):
                continue
            try:
                entries = read_existing(path, self.flag)
            except CacheDirError as e:
                log.warning("autotune_cache: skipping a damaged partial dump: %s", e)
                continue
            self._members[path] = (identity, entries)
        ordered = sorted(self._members.items(),
                         key=lambda kv: ((kv[1][0] or (0, 0, 0))[2], kv[0].name))
        return [pair for _, (_, entries) in ordered for pair in entries.values()]

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        """Merge mode: the lock that serialises the final read-combine-write of one dump path
        across runs (concurrent merge-mode dumps keep every entry). After LOCK_TIMEOUT_S
        without it (a run that holds it that long) the write goes ahead with a warning; with no
        lock directory this account alone controls, LockError, and nothing is written. Other
        modes take no lock (nothing is created under the home directory): the file is read
        again when it changed since the run began, and replaced atomically."""
        with contextlib.ExitStack() as stack:
            if self.merge:
                name = hashlib.sha256(self._target.encode()).hexdigest()[:24] + ".lock"
                try:
                    lock_dir = private_lock_dir("dump-locks")
                except LockError as e:
                    # No directory this account alone controls (home unusable, the temp names
                    # taken by another account): a merge without its lock could lose a
                    # concurrent run's entries, so nothing is written.
                    raise LockError(
                        f"{self.path}: --autotune_dump_merge needs its lock to combine runs, and "
                        f"there is no lock directory only this account controls ({e}). The "
                        "file is left as it was. Fix: give this account a usable home "
                        "directory (HOME), or remove the directories in the way; then run the "
                        "dump again.") from None
                held = stack.enter_context(file_lock(lock_dir / name, LOCK_TIMEOUT_S))
                if not held:
                    log.warning("autotune_cache: merging into %s without its lock (another "
                                "run held it for %.0f s)", self.path, LOCK_TIMEOUT_S)
            yield
