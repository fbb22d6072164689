"""Whether a pytest run is a full run or selected a subset of the tests, for the dump's rule
(store/dumprule.py): only a full run that passed may drop this device's entries no test used;
a run that selected a subset keeps every entry it did not reproduce, since it cannot know which
of them the unselected tests use.

A run selected a subset when it was given `-k`, `-m`, `--lf`, `--sw` or `--deselect`, when
collection deselected any test (a conftest's hook, a plugin), or when a path it was given does
not cover the whole suite: a `file::test` id, or a path that is not the rootdir (or a folder
above it) nor one of the ini file's `testpaths`. Ini `addopts` count like the command line
(a project whose addopts hold `-m "not slow"` keeps every entry its runs did not reproduce).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Options that select a subset of the collected tests, and how the dump line shows them.
_SELECTING = (("keyword", "-k"), ("markexpr", "-m"), ("lf", "--lf"), ("stepwise", "--sw"),
              ("deselect", "--deselect"))


def _covers_suite(config: pytest.Config, arg: str) -> bool:
    """Whether a path argument names the whole suite (the rootdir, a folder above it, or one of
    the `testpaths`, or a folder above one of them)."""
    if "::" in arg:
        return False
    try:
        path = (config.invocation_params.dir / arg).resolve()
    except OSError:
        return False
    if not path.is_dir():
        return False
    root = config.rootpath.resolve()
    suites = [root, *((root / t).resolve() for t in config.getini("testpaths") or ())]
    return any(s == path or s.is_relative_to(path) for s in suites)


def selection(config: pytest.Config, deselected: int = 0) -> str:
    """How the run selected a subset of the tests ('' for a full run), e.g. `-k add`."""
    parts = []
    for dest, flag in _SELECTING:
        value = config.getoption(dest, None)
        if value in (None, False, "", [], ()):
            continue
        parts.append(flag if value is True else f"{flag} {_shown(value)}")
    if config.args_source != pytest.Config.ArgsSource.TESTPATHS:
        narrower = [a for a in config.args if not _covers_suite(config, a)]
        parts += [_relative(config, a) for a in narrower]
    if deselected and not parts:
        parts.append(f"{deselected} test(s) deselected")
    return " ".join(parts)


def _shown(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    return str(value)


def _relative(config: pytest.Config, arg: str) -> str:
    """An argument as the user would write it from the rootdir (no runner's absolute path)."""
    path, sep, rest = arg.partition("::")
    try:
        full = (config.invocation_params.dir / path).resolve()
        shown = os.path.relpath(full, config.rootpath)
    except (OSError, ValueError):
        return arg
    return shown + sep + rest if not shown.startswith("..") else arg


def write_json(path: str | None, payload: str) -> None:
    """Write the dump's outcome for scripts (--autotune-dump-json=PATH)."""
    if path:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(payload, encoding="utf-8")
