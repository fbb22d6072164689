"""The pytest plugin: `--autotune-load/-dump/-cache-dir/-require-complete` for plain pytest runs.

Registered through the `pytest11` entry point `autotune_cache.pytest_plugin` (the module's own
name, so `-p autotune_cache.pytest_plugin` and the entry point are one plugin, never two). It is
inert unless one of its options is given: without them it registers nothing but the options, and
AUTOTUNE_FLAGS alone configures the library exactly as outside pytest.

- Each option is the twin of one AUTOTUNE_FLAGS flag (OPTIONS below), parsed by that flag's own
  parser; its messages are the flag's, prefixed with the option's name.
- Options and AUTOTUNE_FLAGS combine: files to load are the union (AUTOTUNE_FLAGS' files first);
  every other twin must agree with AUTOTUNE_FLAGS when both give it, else a usage error names
  both. AUTOTUNE_FLAGS flags without a twin apply unchanged.
- The process-wide cache is configured once at pytest_configure (a bad flag or a missing file is a
  usage error before any test runs); nothing is exported to os.environ.
- Misses are attributed to the running test by a listener on the configured Cache
  (`Cache.add_listener`). Under require-complete a miss raises MissingResultError from the kernel
  launch, failing that test only; a test that swallows the error is failed after its call with
  the same message.
- Under pytest-xdist every worker dumps to its own partial file and the controller merges them;
  without a cache directory the workers share a temporary one. Entries that still differ between
  workers are refused by name and the partial files are kept.
docs/pytest.md explains this to users; the reasons: docs/decisions/0008-pytest-plugin.md.
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from autotune_cache.cache import Cache, check_dump_sharding, configure
from autotune_cache.config.flags import (
    ENV_VAR,
    FLAGS,
    MACRO_ENV_VAR,
    Settings,
    flags_text,
    parse_flags,
    split_flags,
)
from autotune_cache.errors import AutotuneCacheError, MissingResultError
from autotune_cache.formats import Keyed, load_results
from autotune_cache.foundation import console
from autotune_cache.foundation import env as autotune_env
from autotune_cache.foundation.key import CacheKey
from autotune_cache.foundation.locking import Liveness, sweep_dead
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store.dumpfile import DumpFile
from autotune_cache.store.stats import outcome_clauses


@dataclass(frozen=True)
class Option:
    """One pytest option and its AUTOTUNE_FLAGS twin."""

    name: str
    twin: str
    dest: str
    metavar: str | None
    help: str


OPTIONS: tuple[Option, ...] = (
    Option("--autotune-load", "load_autotune_results_from", "autotune_load", "PATH[,PATH...]",
           "results files to load; may be repeated, every file is loaded (twin of "
           "AUTOTUNE_FLAGS --load_autotune_results_from)"),
    Option("--autotune-dump", "dump_autotune_results_to", "autotune_dump", "PATH",
           "write exactly the entries this run used or tuned to PATH, merged across xdist "
           "workers and subprocesses (twin of --dump_autotune_results_to)"),
    Option("--autotune-dump-merge", "autotune_dump_merge", "autotune_dump_merge", None,
           "keep the entries the dump file held before this run (incremental dumps; twin of "
           "--autotune_dump_merge)"),
    Option("--autotune-all-kernels", "autotune_all_kernels", "autotune_all_kernels", None,
           "route every triton.autotune (third-party libraries' kernels too) through the cache; "
           "libraries imported before pytest configures are named in a warning (twin of "
           "--autotune_all_kernels)"),
    Option("--autotune-cache-dir", "autotune_cache_dir", "autotune_cache_dir", "DIR",
           "per-kernel cache directory (twin of --autotune_cache_dir)"),
    Option("--autotune-require-complete", "require_complete_autotune_results",
           "autotune_require_complete", None,
           "a miss fails the test that launched the kernel and the session, with the "
           "stale-cache message (twin of --require_complete_autotune_results)"),
)
_TWIN_FIELD = {f.name: f.field for f in FLAGS}
assert all(o.twin in _TWIN_FIELD for o in OPTIONS)

# Keys of xdist's workerinput / workeroutput dicts.
_PARTIALS_KEY = "autotune_cache_partials"
_SHARED_DIR_KEY = "autotune_cache_shared_dir"
_OUTPUT_KEY = "autotune_cache"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("autotune_cache", "autotune results cache (see docs/pytest.md)")
    for o in OPTIONS:
        if o.metavar is None:
            group.addoption(o.name, action="store_true", dest=o.dest, default=False, help=o.help)
        elif o.dest == "autotune_load":
            group.addoption(o.name, action="append", dest=o.dest, metavar=o.metavar,
                            default=None, help=o.help)
        else:
            group.addoption(o.name, action="store", dest=o.dest, metavar=o.metavar, default=None,
                            help=o.help)
        # The same setting in pyproject.toml [tool.pytest.ini_options] / pytest.ini; the
        # command line wins (a load option adds to the ini's files).
        parser.addini(o.dest, type="bool" if o.metavar is None else "string", default=None,
                      help=f"ini twin of {o.name}")


def option_values(config: pytest.Config) -> dict[str, Any]:
    """Each option's value: the command line's, else the ini file's (None / False if neither);
    --autotune-load adds its files to the ini's."""
    values: dict[str, Any] = {}
    for o in OPTIONS:
        given = config.getoption(o.dest)
        ini = config.getini(o.dest)
        if o.dest == "autotune_load":
            values[o.dest] = [*([ini] if ini else []), *(given or [])] or None
        elif given not in (None, False):
            values[o.dest] = given
        else:
            values[o.dest] = ini if ini not in ("", None) else (False if o.metavar is None
                                                                else None)
    return values


# ----- options <-> AUTOTUNE_FLAGS ----------------------------------------------------------------


def _flag_tokens(text: str) -> list[tuple[str, str | None]]:
    """(name, value) of each flag of an AUTOTUNE_FLAGS string already accepted by parse_flags."""
    return [(name, value) for _, name, value in split_flags(text)]


def args_from_flags(text: str, env: Mapping[str, str] | None = None) -> list[str]:
    """The plugin options equivalent to the twinned flags of an AUTOTUNE_FLAGS string.

    For a wrapper that runs pytest under Bazel (the autotuned_py_test macro passes its flags in
    AUTOTUNE_FLAGS): `pytest.main([*args_from_flags(os.environ.get("AUTOTUNE_FLAGS", "")), ...])`
    turns the plugin on with the same settings. AUTOTUNE_FLAGS may stay set: options that repeat
    its values do not conflict. Flags without a twin are left to AUTOTUNE_FLAGS. A malformed
    string raises FlagError with parse_flags' message (paths are resolved against `env`).
    """
    parse_flags(text, env)
    by_twin = {o.twin: o for o in OPTIONS}
    values: dict[str, str | None] = {}
    for name, value in _flag_tokens(text):
        if name not in by_twin:
            continue
        if by_twin[name].dest == "autotune_load" and values.get(name):
            # Every --load_autotune_results_from counts, in order, as in parse_flags.
            values[name] = f"{values[name]},{value}"
        else:
            values[name] = value  # parse_flags refused differing repeats of the other flags
    args = []
    for twin, value in values.items():
        option = by_twin[twin]
        if option.metavar is None:
            if value is None or autotune_env.parse_bool(value) is True:
                args.append(option.name)
        else:
            args.append(f"{option.name}={value}")
    return args


def _option_error(option: Option, value: object, error: Exception) -> pytest.UsageError:
    shown = option.name if value is True else f"{option.name}={value}"
    return pytest.UsageError(f"{shown} (the pytest twin of {ENV_VAR} --{option.twin}): {error}")


def resolve_settings(values: Mapping[str, Any], env: Mapping[str, str] | None = None
                     ) -> tuple[Settings, str]:
    """Settings from AUTOTUNE_FLAGS combined with the plugin options `values` (keyed by dest),
    and the combined flags as one AUTOTUNE_FLAGS string (for messages). Raises
    pytest.UsageError for a bad value or a conflict."""
    env = autotune_env.environ() if env is None else env
    try:
        # AUTOTUNE_FLAGS and, under Bazel, the macro's RULES_AUTOTUNE_MACRO_FLAGS.
        env_text = flags_text(env)
        env_settings = parse_flags(env_text, env)
    except AutotuneCacheError as e:
        raise pytest.UsageError(str(e)) from None
    env_given = {name for name, _ in _flag_tokens(env_text)}
    changes: dict[str, Any] = {}
    option_tokens: list[str] = []
    for option in OPTIONS:
        value = values.get(option.dest)
        if isinstance(value, (list, tuple)):
            value = ",".join(value)  # a repeated --autotune-load loads every file
        if value is None or value is False:
            continue
        token = f"--{option.twin}" if value is True else f"--{option.twin}={value}"
        try:
            mine = getattr(parse_flags(token, env), _TWIN_FIELD[option.twin])
        except AutotuneCacheError as e:
            raise _option_error(option, value, e) from None
        field_name = _TWIN_FIELD[option.twin]
        theirs = getattr(env_settings, field_name)
        if field_name == "load_from":
            # Files AUTOTUNE_FLAGS already loads are not loaded twice; the token names only the
            # new ones, so that the combined text means exactly these settings.
            new = [p for p in dict.fromkeys(mine) if p not in theirs]
            mine = (*theirs, *new)
            if not new:
                changes[field_name] = mine
                continue
            token = f"--{option.twin}=" + ",".join(str(p) for p in new)
        elif option.twin in env_given and not _same(theirs, mine):
            shown = "true" if value is True else value
            their_text = next((f"--{n}" + (f"={v}" if v is not None else "")
                               for n, v in reversed(_flag_tokens(env_text)) if n == option.twin))
            raise pytest.UsageError(
                f"{option.name}={shown} conflicts with {ENV_VAR} {their_text}: both set "
                f"--{option.twin}. Give it in one place only (or the same value in both)."
            )
        changes[field_name] = mine
        option_tokens.append(shlex.quote(token))
    combined_text = " ".join(t for t in (env_text.strip(), " ".join(option_tokens)) if t)
    settings = replace(env_settings, **changes)
    # Relative paths are resolved once, now: a test that chdirs must not move them.
    return replace(settings, load_from=tuple(p.absolute() for p in settings.load_from),
                   cache_dir=settings.cache_dir and settings.cache_dir.absolute(),
                   dump_to=settings.dump_to and settings.dump_to.absolute()), combined_text


def _same(a: object, b: object) -> bool:
    """Equal settings values; paths compare by where they point, not how they are spelt."""
    if isinstance(a, Path) and isinstance(b, Path):
        return a == b or a.resolve() == b.resolve()
    return a == b


BLOCK_NAME = "autotune_cache"


def active(config: pytest.Config) -> bool:
    """Whether any of the plugin's options was given, or AUTOTUNE_FLAGS is set: then the
    process-wide cache is configured up front (a bad flag stops the run once, before any
    test) and the run gets the summary, short stale-cache failures and require-complete's
    session verdict.

    `-p no:autotune_cache` keeps the plugin out of the run (the library itself still reads
    AUTOTUNE_FLAGS when a kernel runs); an --autotune-* option given with it is a usage error,
    since it would silently do nothing."""
    if config.pluginmanager.is_blocked(BLOCK_NAME):
        # Ini settings are a project's defaults, which -p no: switches off; the command line is
        # this run's request.
        asked = [o.name for o in OPTIONS if config.getoption(o.dest) not in (None, False)]
        if asked:
            raise pytest.UsageError(
                f"the autotune_cache plugin is disabled with -p no:{BLOCK_NAME}, so {asked[0]} "
                "would do nothing; drop one of the two")
        return False
    given = any(v not in (None, False) for v in option_values(config).values())
    return given or any(autotune_env.get(name).strip() for name in (ENV_VAR, MACRO_ENV_VAR))


def _lines_to_terminal(config: pytest.Config) -> None:
    """Show the library's lines for people (tuning progress) through pytest's terminal
    reporter, with capture suspended, so they appear without -s."""
    tr = config.pluginmanager.get_plugin("terminalreporter")
    capman = config.pluginmanager.get_plugin("capturemanager")
    if tr is None:
        return

    def write(line: str) -> None:
        with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
            tr.ensure_newline()
            tr.write_line(line)

    console.set_sink(write)


# ----- per-test attribution ---------------------------------------------------------------------


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
_KERNEL_SETS = ("kernels_on_triton", "kernels_ran_on_triton", "kernels_tuned_on_triton")


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


# ----- the active plugin -------------------------------------------------------------------------


def _usage_error(error: BaseException, combined: str) -> pytest.UsageError:
    return pytest.UsageError(f"{error}\n(autotune_cache settings: {ENV_VAR}-equivalent "
                             f"{combined!r})")


def _configure_cache(settings: Settings, combined: str) -> Cache:
    try:
        return configure(settings)
    except (AutotuneCacheError, OSError) as e:
        raise _usage_error(e, combined) from None


def _speak_pytest(cache: Cache) -> Cache:
    """Make the cache's messages name this plugin's options, not the AUTOTUNE_FLAGS flags."""
    cache.dump_advice = ("running the suite once with `pytest --autotune-dump=PATH` (on this "
                         "device) and committing PATH")
    cache.require_flag = "--autotune-require-complete"
    return cache


def _missing_error(error: BaseException) -> MissingResultError | None:
    """The MissingResultError that `error` is or was raised from (a kernel wrapper may wrap it)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, MissingResultError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


class RunnerPlugin:
    """The plugin in a process that runs tests: a plain run, or one pytest-xdist worker."""

    def __init__(self, config: pytest.Config, settings: Settings, combined: str) -> None:
        self.config = config
        self.combined = combined
        self.workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
        if self.workerinput is not None:
            partials = self.workerinput.get(_PARTIALS_KEY)
            worker = self.workerinput.get("workerid", "gw")
            if partials:
                # The controller merges the workers' dumps (and applies --autotune-dump-merge).
                settings = replace(settings, dump_to=Path(partials) / f"{worker}.binpb",
                                   dump_merge=False)
            shared = self.workerinput.get(_SHARED_DIR_KEY)
            if shared:
                settings = replace(settings, cache_dir=Path(shared))
        self.cache = _speak_pytest(_configure_cache(settings, combined))
        self.recorder = MissRecorder()
        self.recorder.attach(self.cache)
        self.dumped = 0
        if self.workerinput is None:
            _lines_to_terminal(config)
        else:
            # The controller's summary adds up the workers' numbers; a worker's own exit line
            # would land on pytest's progress line.
            self.cache.stats.shown_elsewhere()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.workerinput is None:
            # The terminal reporter is gone; the terminal summary already said what this cache's
            # exit line would say, after pytest's last line (the Bazel report is still written).
            console.set_sink(None)
            self.cache.stats.shown_elsewhere()

    def _short_failure(self, run: Iterator[None]) -> Iterator[None]:
        """Run one phase; a stale-cache error becomes a short failure (the message, no stack)
        unless --full-trace asks for the stack."""
        try:
            return (yield from run)
        except Exception as e:
            missing = _missing_error(e)
            if missing is None or self.config.getoption("fulltrace", False):
                raise
            message = str(missing).removeprefix("autotune_cache: ")
        # Outside the except block, so the report does not chain the library's error.
        pytest.fail(message, pytrace=False)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Iterator[None]:
        with self.recorder.running(item.nodeid, "setup"):
            return (yield from self._short_failure(_passthrough()))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        before = len(self.recorder.misses)
        with self.recorder.running(item.nodeid, "call"):
            result = yield from self._short_failure(_passthrough())
        strict = [m for m in self.recorder.misses[before:] if m.strict]
        if strict:
            # The kernel's MissingResultError was caught inside the test: fail it all the same.
            pytest.fail("the test caught the stale-cache error of a kernel it launched; under "
                        "--autotune-require-complete a miss fails the test.\n" + strict[0].message,
                        pytrace=False)
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Iterator[None]:
        with self.recorder.running(item.nodeid, "teardown"):
            return (yield from self._short_failure(_passthrough()))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        failed = self.workerinput is None and session.exitstatus != pytest.ExitCode.OK
        try:
            self.dumped = self.cache.finish_dump(failed=failed)
        except (AutotuneCacheError, OSError) as e:
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
            self.config.stash[_DUMP_ERROR] = str(e)
        self.cache.note_bypassed()
        if self.workerinput is not None:
            self.config.workeroutput[_OUTPUT_KEY] = {  # type: ignore[attr-defined]
                "stats": self.cache.stats.as_dict(),
                "misses": [asdict(m) for m in self.recorder.misses],
            }
        elif any(m.strict for m in self.recorder.misses):
            _fail_session(session)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        tr.write_sep("=", "autotune_cache")
        misses = [asdict(m) for m in self.recorder.misses]
        for line in summary_lines(self.cache.stats.as_dict(), misses):
            tr.write_line(line)
        _write_strict_verdict(tr, misses)
        error = self.config.stash.get(_DUMP_ERROR, None)
        if error:
            tr.write_line(f"dump FAILED: {error}", red=True)
        elif self.cache.settings.dump_to is not None:
            tr.write_line(f"dump: wrote {self.dumped} entries to {self.cache.settings.dump_to}"
                          + _kept_note(self.cache.dump_kept))
        if self.cache.strict_off_for_dump:
            tr.write_line(_STRICT_OFF_NOTE)


_STRICT_OFF_NOTE = ("note: --autotune-require-complete was off for this run: a dump run must be "
                    "able to tune (it is how a stale cache is regenerated)")


def _kept_note(kept: int) -> str:
    """What the dump line adds when a failed run kept entries of the file it replaced."""
    if not kept:
        return ""
    return (f" (the run failed, so the {kept} entries the file held that this run did not "
            "reproduce were kept; a passing run's dump drops them)")


def _passthrough() -> Iterator[None]:
    """A generator that yields once and returns what was sent: lets a new-style hook wrapper
    delegate its single `yield` to a helper with `yield from`."""
    return (yield)


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


_DUMP_ERROR = pytest.StashKey[str]()
_KEPT_MARK = "KEPT"  # in the partial dumps' folder of a refused merge: never swept


@dataclass
class MergeResult:
    """What merging the workers' partial dumps did."""

    entries: int = 0
    conflicts: list[str] = field(default_factory=list)
    partial_files: list[Path] = field(default_factory=list)


def merge_partials(files: Sequence[Path]) -> tuple[list[Keyed], MergeResult]:
    """The union of the workers' dump files, or a refusal when two workers hold different
    entries for one key (then nothing is written; the files stay for `autotune-cache merge`)."""
    result = MergeResult(partial_files=list(files))
    by_digest: dict[str, tuple[bytes, Keyed, Path]] = {}
    for path in files:
        for entry in load_results(path):
            key = CacheKey.from_proto(entry.key)
            data = entry.SerializeToString(deterministic=True)
            seen = by_digest.get(key.digest())
            if seen is None:
                by_digest[key.digest()] = (data, (key, entry), path)
            elif seen[0] != data:
                result.conflicts.append(
                    f"  {key.kernel} [{key.problem}] on {key.device}: {seen[2].name} and "
                    f"{path.name} differ")
    return [pair for _, pair, _ in by_digest.values()], result


class XdistControllerPlugin:
    """The plugin in pytest-xdist's controller: hands workers their dump and cache paths, sums
    their counters and writes the run's dump from theirs."""

    def __init__(self, config: pytest.Config, settings: Settings, combined: str) -> None:
        self.config = config
        self.settings = settings
        self.combined = combined
        # Check the loads, the directory and the dump (path, Bazel sharding, a foreign file at
        # the dump path) now, once, as a usage error. This Cache writes nothing.
        self.dump: DumpFile | None = None
        try:
            check_dump_sharding(settings)
            if settings.dump_to is not None:
                self.dump = DumpFile(settings.dump_to, merge=settings.dump_merge,
                                     flag="--autotune-dump")
            Cache(replace(settings, dump_to=None, dump_merge=False))
        except (AutotuneCacheError, OSError) as e:
            raise _usage_error(e, combined) from None
        self.partials: Path | None = None
        self.shared_dir: Path | None = None
        self._alive: Liveness | None = None
        if settings.dump_to is not None:
            try:
                # Beside the dump, so that a refused merge leaves the workers' results where the
                # user looks; removed after a successful merge.
                settings.dump_to.parent.mkdir(parents=True, exist_ok=True)
                # A killed controller's partial dumps are swept; a refused merge's are kept.
                sweep_dead(settings.dump_to.parent, f".{settings.dump_to.name}.xdist-*",
                           unless=_KEPT_MARK)
                self.partials = Path(tempfile.mkdtemp(prefix=f".{settings.dump_to.name}.xdist-",
                                                      dir=settings.dump_to.parent))
                self._alive = Liveness(self.partials)
            except OSError as e:
                raise _usage_error(OSError(f"--autotune-dump={settings.dump_to}: cannot create "
                                           f"the workers' partial dumps ({e})"),
                                   combined) from None
            if settings.cache_dir is None:
                self.shared_dir = self.partials / "shared-cache"
        self.outputs: list[dict[str, Any]] = []
        self.merge: MergeResult | None = None

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[_PARTIALS_KEY] = str(self.partials) if self.partials else ""
        node.workerinput[_SHARED_DIR_KEY] = str(self.shared_dir) if self.shared_dir else ""

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", {}).get(_OUTPUT_KEY)
        if output:
            self.outputs.append(output)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if any(m["strict"] for o in self.outputs for m in o["misses"]):
            _fail_session(session)
        if self.partials is None or self.settings.dump_to is None:
            return
        files = sorted(self.partials.glob("*.binpb"))
        try:
            pairs, self.merge = merge_partials(files)
            if not self.merge.conflicts and self.dump is not None:
                self.merge.entries = self.dump.close(
                    pairs, keep_existing=session.exitstatus != pytest.ExitCode.OK)
        except (AutotuneCacheError, OSError) as e:
            self.merge = MergeResult(conflicts=[f"  {e}"], partial_files=files)
        if self._alive is not None:
            self._alive.release()
        if self.merge.conflicts:
            (self.partials / _KEPT_MARK).write_text(
                "the xdist workers' partial dumps of a refused merge; merge them with "
                "`autotune-cache merge`, then remove this folder\n", encoding="utf-8")
            if self.dump is not None:
                self.dump.abandon()
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        else:
            shutil.rmtree(self.partials, ignore_errors=True)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        tr.write_sep("=", "autotune_cache")
        stats = add_stats(o["stats"] for o in self.outputs)
        misses = [m for o in self.outputs for m in o["misses"]]
        for line in summary_lines(stats, misses, workers=len(self.outputs)):
            tr.write_line(line)
        _write_strict_verdict(tr, misses)
        if self.merge is None:
            return
        dump = self.settings.dump_to
        if self.merge.conflicts:
            files = " ".join(shlex.quote(str(p)) for p in self.merge.partial_files)
            tr.write_line(
                f"dump REFUSED: the xdist workers recorded different results for the same key, "
                f"so {dump} would depend on which worker ran which test:", red=True)
            for line in self.merge.conflicts:
                tr.write_line(line, red=True)
            tr.write_line(
                "Give the workers a shared --autotune-cache-dir in update mode (each key is then "
                "tuned once), or run the dump with -n 0. The workers' results are kept; merge "
                f"them by hand with:\n  autotune-cache merge {files} -o {shlex.quote(str(dump))} "
                "--on-conflict=fastest", red=True)
        else:
            tr.write_line(f"dump: wrote {self.merge.entries} entries to {dump} (merged from "
                          f"{len(self.merge.partial_files)} xdist workers)"
                          + _kept_note(self.dump.kept if self.dump is not None else 0))
        if self.settings.dump_to is not None and self.settings.require_complete:
            tr.write_line(_STRICT_OFF_NOTE)


def _xdist_controller(config: pytest.Config) -> bool:
    if hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("xdist"):
        return False
    return getattr(config.option, "dist", "no") != "no"


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """--autotune-all-kernels (or its ini twin) switches the routing on before pytest imports
    the rootdir's conftest.py files, which often import the library whose kernels it routes.
    (Plugins given with -p are imported earlier still: AUTOTUNE_FLAGS=--autotune_all_kernels
    covers them, at interpreter start-up.)"""
    if early_config.pluginmanager.is_blocked(BLOCK_NAME):
        return
    option = getattr(early_config.known_args_namespace, "autotune_all_kernels", False)
    if option or early_config.getini("autotune_all_kernels"):
        from autotune_cache.triton.routing import install

        install()


def _watch_triton_tuners() -> None:
    """Patch Triton's Autotuner class (triton/classroute.py) where Triton is installed, so the
    summary names the kernels that ran on Triton's own autotuner, and require-complete fails
    any tuning there, routed or not."""
    import importlib.util

    if importlib.util.find_spec("triton") is not None:
        import autotune_cache.triton  # noqa: F401 - patches at import


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    if not active(config):
        return
    settings, combined = resolve_settings(option_values(config))
    _watch_triton_tuners()
    if settings.all_kernels:
        # Before the test modules import the libraries whose kernels it routes.
        from autotune_cache.triton.routing import install_from_settings

        install_from_settings(settings)
    plugin: object
    if _xdist_controller(config):
        plugin = XdistControllerPlugin(config, settings, combined)
    else:
        plugin = RunnerPlugin(config, settings, combined)
    config.pluginmanager.register(plugin, "autotune_cache-session")
