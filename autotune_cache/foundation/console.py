"""Lines for people (tuning progress, the exit summary): one place decides where they go.

- Under pytest, the plugin installs a sink that writes through pytest's terminal reporter, so
  progress shows without `-s` and nothing lands after pytest's last line.
- Where the program has configured logging (its root logger or the `autotune_cache` logger has a
  handler; pytest's capture handlers do not count), the lines are INFO records of
  `logging.getLogger("autotune_cache")`, and the program's levels decide.
- Otherwise they go to stderr, unless the `autotune_cache` logger's level was set above INFO:
  `logging.getLogger("autotune_cache").setLevel(logging.WARNING)` silences them.

Warnings and errors are logged by the modules that find them (WARNING and above reach stderr
through logging's last-resort handler when nothing is configured).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

LOGGER = logging.getLogger("autotune_cache")

Sink = Callable[[str], None]
_sink: Sink | None = None


def say(line: str) -> None:
    """Show `line` to the person running the program (see the module docstring for where)."""
    if _sink is not None:
        _sink(line)
    elif _logging_configured():
        LOGGER.info(line)
    elif LOGGER.level <= logging.INFO:  # NOTSET (0) included: nobody set a level
        print(line, file=sys.stderr, flush=True)


def _logging_configured() -> bool:
    """Whether the program gave the root or the `autotune_cache` logger a handler. pytest's own
    capture handlers do not count: under pytest without the plugin, lines stay on stderr, where
    pytest shows them with a failing test's captured output."""
    handlers = [*LOGGER.handlers, *logging.getLogger().handlers]
    return any(not type(h).__module__.startswith("_pytest") for h in handlers)


def set_sink(target: Sink | None) -> None:
    """Send every line to `target` from now on (None: back to logging or stderr)."""
    global _sink
    _sink = target
