"""What every `autotune-cache` verb shares: where it reports (`Out`: lines, or one JSON object
with `--json`) and how it is added to the parser (`add_verb`). Its own module, so that a verb
defined elsewhere (report/cli.py) and the CLI (cli.py) both import it and not each other."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any


class Out:
    """Where a verb reports: lines for people, or fields of one JSON object with `--json`."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.fields: dict[str, Any] = {}

    def line(self, text: str) -> None:
        """A line of the human report (dropped under --json, where the fields say it)."""
        if not self.as_json:
            print(text)

    def note(self, text: str) -> None:
        """A note for people, on stderr in both modes."""
        print(text, file=sys.stderr)

    def set(self, **fields: Any) -> None:
        self.fields.update(fields)

    def finish(self, command: str, status: int) -> None:
        if self.as_json:
            print(json.dumps({"command": command, "exit": status, **self.fields}, indent=2,
                             sort_keys=True))


Verb = Callable[[argparse.Namespace, Out], int]


def add_verb(sub: argparse._SubParsersAction, name: str, func: Verb, help_text: str,
             example: str) -> argparse.ArgumentParser:
    """A subcommand with its one-line help, an example in its --help, and --json."""
    s = sub.add_parser(name, help=help_text, description=help_text + ".",
                       epilog=f"example:\n  {example}\n\nexit status: see `autotune-cache "
                              "--help`",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("--json", action="store_true",
                   help='one JSON object on stdout: {"command", "exit", ...}')
    s.set_defaults(func=func)
    return s


AddVerb = Callable[[argparse._SubParsersAction, str, Verb, str, str], argparse.ArgumentParser]
