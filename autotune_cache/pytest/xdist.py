"""The plugin in pytest-xdist's controller: hands the workers their partial-dump and shared
cache paths, sums their counters, and writes the run's dump from theirs (a key tuned differently
by two workers keeps the faster winner, named in a warning; a killed controller's partial dumps
are swept by the next run)."""

from __future__ import annotations

import shlex
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from autotune_cache.cache import Cache, check_dump_sharding
from autotune_cache.config.flags import (
    Settings,
)
from autotune_cache.errors import AutotuneCacheError
from autotune_cache.formats import Keyed, load_results
from autotune_cache.foundation import compile_helpers
from autotune_cache.foundation.key import CacheKey
from autotune_cache.foundation.locking import Liveness, sweep_dead
from autotune_cache.pytest.options import (
    _HELPERS_KEY,
    _OUTPUT_KEY,
    _PARTIALS_KEY,
    _SHARED_DIR_KEY,
)
from autotune_cache.pytest.runner import _usage_error
from autotune_cache.pytest.scope import selection, write_json
from autotune_cache.pytest.summary import (
    _STRICT_OFF_NOTE,
    _fail_session,
    _write_strict_verdict,
    add_stats,
    summary_lines,
)
from autotune_cache.store.dumpfile import DumpFile, merge_run
from autotune_cache.store.dumprule import FULL, SUBSET

_KEPT_MARK = "KEPT"  # in the partial dumps' folder of a dump not written: never swept


@dataclass
class MergeResult:
    """What merging the workers' partial dumps did: the entries written, the keys two workers
    tuned (dumpfile.merge_run kept the faster), or why nothing could be written."""

    entries: int = 0
    tuned_twice: list[str] = field(default_factory=list)
    error: str = ""
    partial_files: list[Path] = field(default_factory=list)


def merge_partials(files: Sequence[Path]) -> tuple[list[Keyed], MergeResult]:
    """The workers' dump files merged by the run's one rule (dumpfile.merge_run: a key two
    workers tuned differently keeps the faster winner, whichever worker ran which test)."""
    sources = [[(CacheKey.from_proto(e.key), e) for e in load_results(path)] for path in files]
    merged, twice = merge_run(sources)
    return list(merged.values()), MergeResult(
        tuned_twice=[f"{key.kernel} [{key.problem}] on {key.device}" for key, _ in twice],
        partial_files=list(files))


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
                # Beside the dump, so that a dump not written leaves the workers' results where the
                # user looks; removed after a successful merge.
                settings.dump_to.parent.mkdir(parents=True, exist_ok=True)
                # A killed controller's partial dumps are swept; those of a dump not written stay.
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
        json_path = config.getoption("autotune_dump_json", None) or \
            config.getini("autotune_dump_json")
        self.json_path = Path(json_path).absolute() if json_path else None

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[_PARTIALS_KEY] = str(self.partials) if self.partials else ""
        node.workerinput[_SHARED_DIR_KEY] = str(self.shared_dir) if self.shared_dir else ""
        # The compile helpers this controller started, for the workers to wait on.
        node.workerinput[_HELPERS_KEY] = compile_helpers.shared()

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
        # The workers collected and deselected; the controller has the same options and args.
        chosen = selection(self.config, sum(o.get("deselected", 0) for o in self.outputs))
        try:
            pairs, self.merge = merge_partials(files)
            if self.dump is not None:
                self.merge.entries = self.dump.close(
                    pairs, keep_existing=session.exitstatus != pytest.ExitCode.OK,
                    kind=SUBSET if chosen else FULL, selection=chosen)
        except (AutotuneCacheError, OSError) as e:
            self.merge = MergeResult(error=str(e), partial_files=files)
        if self._alive is not None:
            self._alive.release()
        if self.merge.error:
            (self.partials / _KEPT_MARK).write_text(
                "the xdist workers' partial dumps of a dump that was not written; merge them with "
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
        if self.merge.error:
            files = " ".join(shlex.quote(str(p)) for p in self.merge.partial_files)
            tr.write_line(f"dump NOT WRITTEN: {self.merge.error}", red=True)
            tr.write_line(
                "The workers' results are kept; fix the cause above, then merge them with:\n"
                f"  autotune-cache merge {files} -o {shlex.quote(str(dump))} --on-conflict=fastest",
                red=True)
        else:
            twice = self.merge.tuned_twice
            outcome = self.dump.outcome if self.dump is not None else None
            if outcome is not None:
                tr.write_line(f"{outcome.line()} (summed over "
                              f"{len(self.merge.partial_files)} xdist workers)")
                try:
                    write_json(self.json_path and str(self.json_path), outcome.json())
                except OSError as e:
                    tr.write_line(f"--autotune-dump-json={self.json_path}: not written ({e})",
                                  red=True)
            if twice:
                shown = "; ".join(twice[:5]) + (f"; and {len(twice) - 5} more"
                                                if len(twice) > 5 else "")
                tr.write_line(
                    f"{len(twice)} key(s) were tuned by more than one worker, with different "
                    f"results; the dump keeps the faster winner of each: {shown}. Give the "
                    "workers a shared --autotune-cache-dir in update mode to tune each key once.")
        if self.settings.dump_to is not None and self.settings.require_complete:
            tr.write_line(_STRICT_OFF_NOTE)


def _xdist_controller(config: pytest.Config) -> bool:
    if hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("xdist"):
        return False
    return getattr(config.option, "dist", "no") != "no"
