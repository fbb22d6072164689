"""The plugin in a process that runs tests (a plain run, or one pytest-xdist worker): the
process-wide cache configured once, misses attributed to tests, short stale-cache failures,
the dump written at session end."""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

from autotune_cache.cache import Cache, configure
from autotune_cache.config.flags import (
    ENV_VAR,
    Settings,
)
from autotune_cache.errors import AutotuneCacheError, MissingResultError
from autotune_cache.foundation import console
from autotune_cache.pytest.options import _OUTPUT_KEY, _PARTIALS_KEY, _SHARED_DIR_KEY
from autotune_cache.pytest.scope import selection, write_json
from autotune_cache.pytest.summary import (
    _STRICT_OFF_NOTE,
    UNROUTED,
    MissRecorder,
    _fail_session,
    _write_strict_verdict,
    summary_lines,
)
from autotune_cache.store.dumprule import FULL, SUBSET


class _TerminalLines:
    """The library's lines for people (tuning progress) through pytest's terminal reporter,
    with capture suspended, so they appear without -s. Each starts on its own line; a line of
    dots they cut is taken up again with its file's name before the running test's letter, so
    the letter never lands alone at the start of a line (pytest writes it bare, trusting the
    line it began with the name at the test's start)."""

    def __init__(self, tr: Any, capman: Any) -> None:
        self.tr = tr
        self.capman = capman
        self.cut = False  # lines were written since pytest last wrote on its own line

    def __call__(self, line: str) -> None:
        capman = self.capman
        with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
            self.tr.ensure_newline()
            self.tr.write_line(line)
        self.cut = True

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        tr = self.tr
        if not self.cut or tr.currentfspath is not None:
            return
        self.cut = False
        if tr.showfspath and not tr.showlongtestinfo:  # the dots line, not -v
            fspath = tr.config.rootpath / report.nodeid.split("::")[0]
            tr.write(f"{os.path.relpath(fspath, tr.startpath)} ")
            tr.currentfspath = fspath


def _lines_to_terminal(config: pytest.Config) -> None:
    """Send the library's lines for people to pytest's terminal (_TerminalLines)."""
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is None:
        return
    sink = _TerminalLines(tr, config.pluginmanager.get_plugin("capturemanager"))
    config.pluginmanager.register(sink, "autotune_cache-terminal-lines")
    console.set_sink(sink)



# ----- the active plugin -------------------------------------------------------------------------


def _usage_error(error: BaseException, combined: str) -> pytest.UsageError:
    return pytest.UsageError(f"{error}\n(autotune_cache settings: {ENV_VAR}-equivalent "
                             f"{combined!r})")


def _configure_cache(settings: Settings, combined: str) -> Cache:
    try:
        return configure(settings)
    except (AutotuneCacheError, OSError) as e:
        raise _usage_error(e, combined) from None


def regen_command(path: str, *, load_on_command_line: bool = False) -> str:
    """The one command that regenerates a results file in place, on the device at hand
    (docs/cache.md#what-a-dump-keeps): the same for a first dump, an in-place regen and a regen
    on another device. A run whose command line loaded the file (not the ini file, not
    AUTOTUNE_FLAGS) is told to load it there too, so the regen re-tunes only what is stale."""
    load = f"--autotune-load={path} " if load_on_command_line else ""
    return f"pytest {load}--autotune-dump={path}"


def _relative(path: Path, base: Path) -> str:
    """`path` as the user types it from `base` (pytest's invocation directory): relative when
    it is below `base`, so a hint printed on a CI runner names no runner's path."""
    try:
        return str(Path(path).resolve().relative_to(Path(base).resolve()))
    except (ValueError, OSError):
        return str(path)


def _speak_pytest(cache: Cache, config: pytest.Config | None = None) -> Cache:
    """Make the cache's messages name this plugin's options, not the AUTOTUNE_FLAGS flags; a
    run that loads one committed file is told to regenerate that very file."""
    loaded = cache.settings.load_from
    base = config.invocation_params.dir if config is not None else Path.cwd()
    path = shlex.quote(_relative(loaded[0], base)) if len(loaded) == 1 else "PATH"
    # The command line as typed: an ini file's addopts (the recommended setup) load the file
    # for the regen too.
    typed = config.invocation_params.args if config is not None else ()
    given = any(str(a).startswith("--autotune-load") for a in typed)
    command = regen_command(path, load_on_command_line=given and len(loaded) == 1)
    cache.dump_advice = (f"running the suite once with `{command}` (on this device; it keeps "
                         f"the other devices' entries) and committing {path}")
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
        self.cache = _speak_pytest(_configure_cache(settings, combined), config)
        self.recorder = MissRecorder()
        self.recorder.attach(self.cache)
        self.cache.dump_run.show_line_elsewhere()  # the terminal summary shows it
        self.dumped = 0
        self.deselected = 0
        json_path = config.getoption("autotune_dump_json", None) or \
            config.getini("autotune_dump_json")
        self.json_path = Path(json_path).absolute() if json_path else None
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
            # The kernel's MissingResultError (or UnroutedTuningError) was caught inside the
            # test, or by a library falling back: fail it all the same.
            what = ("the test (or a library it called) caught the UnroutedTuningError of a kernel "
                    "left on Triton's own autotuner; under --autotune-require-complete a tuning "
                    "there fails the test." if strict[0].why == UNROUTED else
                    "the test caught the stale-cache error of a kernel it launched; under "
                    "--autotune-require-complete a miss fails the test.")
            pytest.fail(what + "\n" + strict[0].message, pytrace=False)
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Iterator[None]:
        with self.recorder.running(item.nodeid, "teardown"):
            return (yield from self._short_failure(_passthrough()))

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected += len(items)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        failed = self.workerinput is None and session.exitstatus != pytest.ExitCode.OK
        if self.workerinput is None:
            chosen = selection(self.config, self.deselected)
            self.cache.dump_run.select(SUBSET if chosen else FULL, chosen)
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
                "deselected": self.deselected,
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
        elif (outcome := self.cache.dump_run.outcome) is not None:
            tr.write_line(outcome.line())
            try:
                write_json(self.json_path and str(self.json_path), outcome.json())
            except OSError as e:
                tr.write_line(f"--autotune-dump-json={self.json_path}: not written ({e})",
                              red=True)
        if self.cache.strict_off_for_dump:
            tr.write_line(_STRICT_OFF_NOTE)



def _passthrough() -> Iterator[None]:
    """A generator that yields once and returns what was sent: lets a new-style hook wrapper
    delegate its single `yield` to a helper with `yield from`."""
    return (yield)



_DUMP_ERROR = pytest.StashKey[str]()
