"""Generate the tables of docs/reference.md from their one source each.

    python tools/gen_reference.py          # rewrite docs/reference.md
    python tools/gen_reference.py --check  # exit 1, naming what differs, when it is out of date

Each table sits between two marker comments in docs/reference.md,
`<!-- BEGIN GENERATED <name> ... -->` and `<!-- END GENERATED <name> -->`; everything between
them is replaced, everything outside is left as written. The sources:

- `flags`: `FLAGS` in autotune_cache/config/flags.py (each flag's syntax, example, `Settings`
  field and doc);
- `pytest-options`: `OPTIONS` in autotune_cache/pytest_plugin.py;
- `environment`: `VARIABLES` in autotune_cache/foundation/env.py;
- `macro-attributes`: the signature and the docstring's `Args:` section of `autotuned_py_test`
  in rules/private/autotuned_py_test.bzl. Starlark is not Python, so the macro is read by a small
  parser of that one `def` and its docstring, which fails naming the file when a parameter is
  undocumented or documented but absent.

tests/docs/test_reference.py runs `--check` in the normal suite, so CI fails when the reference
and its sources differ.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

REFERENCE = ROOT / "docs" / "reference.md"
MACRO_FILE = ROOT / "rules" / "private" / "autotuned_py_test.bzl"
MACRO = "autotuned_py_test"
COMMAND = "python tools/gen_reference.py"

_BEGIN = re.compile(r"^<!-- BEGIN GENERATED ([\w-]+)\b.*-->$")
_END = "<!-- END GENERATED {} -->"


class ReferenceError(Exception):
    """A source cannot be read, or docs/reference.md's markers are wrong; the message says how
    to fix it."""


@dataclass(frozen=True)
class Attribute:
    """One parameter of the macro: its name, its default as written (None: required), its doc."""

    name: str
    default: str | None
    doc: str


# ----- the Starlark macro ------------------------------------------------------------------------

def _split_top_level(text: str) -> list[str]:
    """`text` split at the commas outside brackets and string literals."""
    parts, depth, quote, start, i = [], 0, "", 0, 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _signature(text: str, macro: str, where: str) -> tuple[list[tuple[str, str | None]], int]:
    """The macro's parameters as (name, default or None), and where its body starts."""
    match = re.search(rf"^def {re.escape(macro)}\(", text, re.MULTILINE)
    if match is None:
        raise ReferenceError(f"{where}: no `def {macro}(` found; update MACRO in {__file__}.")
    depth, i = 1, match.end()
    while depth and i < len(text):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    if depth:
        raise ReferenceError(f"{where}: the signature of {macro} never closes.")
    params = []
    for part in _split_top_level(text[match.end():i - 1]):
        name, eq, default = part.partition("=")
        params.append((name.strip(), default.strip() if eq else None))
    body = text.index(":", i) + 1
    return params, body


def _docstring(text: str, start: int, macro: str, where: str) -> str:
    """The docstring right after the signature, dedented (its first line as written)."""
    match = re.compile(r'\s*"""(.*?)"""', re.DOTALL).match(text, start)
    if match is None:
        raise ReferenceError(f'{where}: {macro} has no """docstring""" after its signature.')
    first, _, rest = match.group(1).partition("\n")
    lines = rest.splitlines()
    indent = min((len(s) - len(s.lstrip()) for s in lines if s.strip()), default=0)
    return "\n".join([first] + [s[indent:] for s in lines])


def docstring_args(docstring: str, where: str) -> dict[str, str]:
    """The `Args:` section of a Google-style docstring: each name (`**kwargs` too) and its text,
    continuation lines joined with single spaces."""
    lines = docstring.splitlines()
    try:
        start = next(i for i, s in enumerate(lines) if s.strip() == "Args:")
    except StopIteration:
        raise ReferenceError(f"{where}: the docstring has no `Args:` section.") from None
    base = len(lines[start]) - len(lines[start].lstrip())
    args: dict[str, list[str]] = {}
    current: list[str] | None = None
    entry_indent = None
    for line in lines[start + 1:]:
        indent = len(line) - len(line.lstrip())
        if not line.strip() or indent <= base:
            break
        entry = re.match(r"(\*{0,2}\w+):(?:\s+(.*))?$", line.strip())
        if entry_indent is None:
            entry_indent = indent
        if indent == entry_indent and entry:
            current = args.setdefault(entry.group(1), [])
            current.append(entry.group(2) or "")
        elif indent > entry_indent and current is not None:
            current.append(line.strip())
        else:
            raise ReferenceError(f"{where}: cannot read this line of the Args: section: "
                                 f"{line.strip()!r}; write `name: text`, continuation lines "
                                 "indented further.")
    return {name: " ".join(p for p in parts if p) for name, parts in args.items()}


def macro_attributes(text: str, macro: str = MACRO, where: str = str(MACRO_FILE)
                     ) -> list[Attribute]:
    """The macro's parameters, in signature order, with their defaults and docstring texts."""
    params, body = _signature(text, macro, where)
    docs = docstring_args(_docstring(text, body, macro, where), where)
    names = [name for name, _ in params]
    undocumented = [n for n in names if n not in docs]
    unknown = [n for n in docs if n not in names]
    if undocumented or unknown:
        problems = []
        if undocumented:
            problems.append(f"parameters without an Args: entry: {', '.join(undocumented)}")
        if unknown:
            problems.append(f"Args: entries that are not parameters: {', '.join(unknown)}")
        raise ReferenceError(f"{where}: the docstring of {macro} does not match its signature "
                             f"({'; '.join(problems)}). Fix the docstring, then run {COMMAND}.")
    return [Attribute(name, default, docs[name]) for name, default in params]


# ----- tables -------------------------------------------------------------------------------------

def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{text}`".replace("|", "\\|")


def _table(header: Sequence[str], rows: list[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def flags_table() -> str:
    from autotune_cache.config.flags import FLAGS

    return _table(["flag", "example", "`Settings` field", "meaning"], [
        [_code(f.syntax), _code(f.example), _code(f.field), _cell(f.doc)] for f in FLAGS])


def pytest_options_table() -> str:
    from autotune_cache.pytest_plugin import OPTIONS

    return _table(["option", "`AUTOTUNE_FLAGS` twin", "ini key", "meaning"], [
        [_code(o.name if o.metavar is None else f"{o.name}={o.metavar}"), _code(f"--{o.twin}"),
         _code(o.dest), _cell(o.help)] for o in OPTIONS])


def environment_table() -> str:
    from autotune_cache.foundation.env import VARIABLES

    return _table(["variable", "set by", "read by", "meaning"], [
        [_code(v.name), _cell(v.set_by), _cell(v.read_by), _cell(v.meaning)] for v in VARIABLES])


def macro_table() -> str:
    rows = []
    for a in macro_attributes(MACRO_FILE.read_text(encoding="utf-8")):
        if a.name.startswith("**"):
            rows.append([f"any other py_test attribute ({_code(a.name)})", "", _cell(a.doc)])
        else:
            default = "required" if a.default is None else _code(a.default)
            rows.append([_code(a.name), default, _cell(a.doc)])
    return _table(["attribute", "default", "meaning"], rows)


SECTIONS: dict[str, tuple[str, Callable[[], str]]] = {
    "flags": ("FLAGS in autotune_cache/config/flags.py", flags_table),
    "pytest-options": ("OPTIONS in autotune_cache/pytest_plugin.py", pytest_options_table),
    "environment": ("VARIABLES in autotune_cache/foundation/env.py", environment_table),
    "macro-attributes": ("the docstring of autotuned_py_test in "
                         "rules/private/autotuned_py_test.bzl", macro_table),
}


def render(text: str, where: str = str(REFERENCE)) -> str:
    """`text` (docs/reference.md) with every generated section rewritten from its source."""
    lines = text.splitlines()
    out: list[str] = []
    seen: set[str] = set()
    i = 0
    while i < len(lines):
        begin = _BEGIN.match(lines[i])
        if begin is None:
            out.append(lines[i])
            i += 1
            continue
        name = begin.group(1)
        if name not in SECTIONS:
            raise ReferenceError(f"{where}:{i + 1}: unknown generated section {name!r}; known: "
                                 f"{', '.join(SECTIONS)}.")
        end = _END.format(name)
        try:
            stop = lines.index(end, i + 1)
        except ValueError:
            raise ReferenceError(f"{where}:{i + 1}: section {name!r} has no closing "
                                 f"{end!r} line.") from None
        source, make = SECTIONS[name]
        out += [f"<!-- BEGIN GENERATED {name} from {source}; edit that, then run {COMMAND} -->",
                make(), end]
        seen.add(name)
        i = stop + 1
    missing = [n for n in SECTIONS if n not in seen]
    if missing:
        raise ReferenceError(f"{where}: no generated section for {', '.join(missing)}; add a "
                             f"`<!-- BEGIN GENERATED <name> -->` / `{_END.format('<name>')}` "
                             "pair where the table belongs.")
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when docs/reference.md is out of date; write nothing")
    args = parser.parse_args(argv)
    try:
        current = REFERENCE.read_text(encoding="utf-8")
        wanted = render(current)
    except ReferenceError as e:
        print(f"gen_reference: {e}", file=sys.stderr)
        return 2
    if current == wanted:
        return 0
    if args.check:
        diff = difflib.unified_diff(current.splitlines(), wanted.splitlines(),
                                    "docs/reference.md", "generated", lineterm="", n=1)
        print("\n".join(diff), file=sys.stderr)
        print(f"docs/reference.md is out of date with its sources; regenerate it with {COMMAND}",
              file=sys.stderr)
        return 1
    REFERENCE.write_text(wanted, encoding="utf-8")
    print(f"wrote {REFERENCE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
