"""docs/reference.md's tables are generated from their one source each (tools/gen_reference.py)."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import gen_reference  # noqa: E402

from autotune_cache.config.flags import FLAGS, Settings  # noqa: E402
from autotune_cache.foundation import env  # noqa: E402


def test_reference_is_up_to_date_with_its_sources():
    current = gen_reference.REFERENCE.read_text(encoding="utf-8")
    wanted = gen_reference.render(current)
    if current != wanted:
        diff = "\n".join(difflib.unified_diff(current.splitlines(), wanted.splitlines(),
                                              "docs/reference.md", "generated", lineterm=""))
        pytest.fail(f"docs/reference.md is out of date with its sources; regenerate it with "
                    f"{gen_reference.COMMAND}\n{diff}")


def test_check_mode_names_the_command_and_writes_nothing(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "reference.md"
    text = gen_reference.REFERENCE.read_text(encoding="utf-8")
    stale.write_text(text.replace("| `--autotune_cache_dir=DIR` |", "| `--old_flag=DIR` |"))
    monkeypatch.setattr(gen_reference, "REFERENCE", stale)
    assert gen_reference.main(["--check"]) == 1
    assert "regenerate it with python tools/gen_reference.py" in capsys.readouterr().err
    assert "--old_flag" in stale.read_text()
    assert gen_reference.main([]) == 0
    assert stale.read_text() == text


def test_every_source_row_is_in_the_reference():
    text = gen_reference.REFERENCE.read_text(encoding="utf-8")
    for flag in FLAGS:
        assert f"| {gen_reference._code(flag.syntax)} |" in text, flag.name
    for variable in env.VARIABLES:
        assert f"| `{variable.name}` |" in text, variable.name
    assert {f.field for f in FLAGS} == set(Settings.__dataclass_fields__)


def test_every_variable_env_names_is_documented():
    constants = {value for name, value in vars(env).items()
                 if name.isupper() and isinstance(value, str) and value == name}
    assert constants == {v.name for v in env.VARIABLES}


MACRO = '''
def my_macro(
        name,
        env = {"A": "1", "B": "2"},
        tags = [],
        **kwargs):
    """One line.

    More text.

    Args:
      name: the name; it may be
        long, and continues here.
      env: a dict, written {"A": "1"}.
      tags: tags.
      **kwargs: the rest.
    """
    pass
'''


def test_macro_parser_reads_defaults_and_continued_docs():
    attrs = gen_reference.macro_attributes(MACRO, "my_macro", "x.bzl")
    assert [(a.name, a.default) for a in attrs] == [
        ("name", None), ("env", '{"A": "1", "B": "2"}'), ("tags", "[]"), ("**kwargs", None)]
    assert attrs[0].doc == "the name; it may be long, and continues here."


def test_macro_parser_names_an_undocumented_parameter():
    text = MACRO.replace("        tags = [],\n", "        tags = [],\n        extra = 1,\n")
    with pytest.raises(gen_reference.ReferenceError,
                       match=r"x.bzl: .*without an Args: entry: extra.*gen_reference.py"):
        gen_reference.macro_attributes(text, "my_macro", "x.bzl")
    with pytest.raises(gen_reference.ReferenceError, match="no `def other_macro\\(` found"):
        gen_reference.macro_attributes(MACRO, "other_macro", "x.bzl")


def test_a_missing_marker_is_named():
    text = gen_reference.REFERENCE.read_text(encoding="utf-8")
    with pytest.raises(gen_reference.ReferenceError, match="no generated section for flags"):
        gen_reference.render(text.replace("<!-- BEGIN GENERATED flags", "<!-- flags"), "r.md")
    with pytest.raises(gen_reference.ReferenceError, match="has no closing"):
        gen_reference.render(text.replace("<!-- END GENERATED flags -->", ""), "r.md")
