"""native_text: large text files parsed by protoc's C++ parser give the message Python's parser
gives, and every failure falls back to the Python parser and its messages."""

from __future__ import annotations

import logging

import pytest
from google.protobuf import text_format

from autotune_cache import formats, native_text
from autotune_cache.errors import CorruptFileError
from autotune_cache.formats import parse_results, save_results
from autotune_cache.proto import autotune_results_pb2 as pb
from tests.cachetools import fake_tune, make_key

KEYS = [make_key(problem={"M": m, "N": 128, "a": "float16"}) for m in range(1, 31)]

needs_protoc = pytest.mark.skipif(not native_text.available(),
                                  reason="grpcio-tools (the fast-text extra) is not installed")


@pytest.fixture
def any_size(monkeypatch):
    """The native parser for files of any size (the real threshold is 1 MiB)."""
    monkeypatch.setattr(native_text, "MIN_BYTES", 0)


@pytest.fixture
def python_parses(monkeypatch):
    """Count the files protobuf's Python text parser parses."""
    calls = []
    original = text_format.Parse

    def parse(text, msg, *args, **kwargs):
        calls.append(len(text))
        return original(text, msg, *args, **kwargs)

    monkeypatch.setattr(formats.text_format, "Parse", parse)
    return calls


def committed(tmp_path):
    path = tmp_path / "cache.textproto"
    save_results(path, [fake_tune(k, tuning_seconds=i / 3) for i, k in enumerate(KEYS)])
    return path


@needs_protoc
def test_protoc_builds_the_message_pythons_parser_builds(tmp_path, any_size, python_parses):
    path = committed(tmp_path)
    data = path.read_bytes()
    native = parse_results(data, path)
    assert python_parses == []  # protoc parsed it
    python = pb.AutotuneResultsFile()
    text_format.Parse(data.decode(), python)
    assert native == python and len(native.entries) == len(KEYS)


@needs_protoc
@pytest.mark.parametrize("text", [
    # Spellings both parsers accept: comments, other field order, escapes, floats, a trailing
    # separator, an enum-free message with every scalar kind the schema uses.
    'version: 1  # the schema\nentries { result { tuning_seconds: 1e-3 } }',
    'entries { result { tuning_seconds: 2.5 } } version: 1;',
    'version: 1 entries { key { kernel: "caf\\303\\251 \\"q\\"" } }',
    'version: 1 entries: { key: { kernel: \'single\' } }',
])
def test_protoc_and_python_agree_on_valid_spellings(tmp_path, any_size, python_parses, text):
    native = formats.parse_message(text.encode(), pb.AutotuneResultsFile, tmp_path / "r.textproto",
                                   text=True, what="autotune results file")
    assert python_parses == []
    python = pb.AutotuneResultsFile()
    text_format.Parse(text, python)
    assert native == python


@needs_protoc
@pytest.mark.parametrize(("text", "expected"), [
    ("version: 1\nentries { key { kernel: 1 2 } }\n", r"cache.textproto: not a valid text-format"
                                                       r" autotune results file: 2:25"),
    ("version: 1\nentries { bogus_field: 3 }\n", "has no field named \"bogus_field\""),
    ("version: 1\nversion: 1\n", "should not have multiple \"version\" fields"),
])
def test_a_file_protoc_refuses_gets_pythons_message(tmp_path, any_size, python_parses, text,
                                                     expected):
    path = tmp_path / "cache.textproto"
    with pytest.raises(CorruptFileError, match=expected) as raised:
        parse_results(text.encode(), path)
    assert python_parses, "the Python parser was not asked for its message"
    assert str(path) in str(raised.value)


def test_without_grpc_tools_python_parses_and_a_big_file_says_how_to_speed_up(
        tmp_path, monkeypatch, python_parses, caplog):
    monkeypatch.setattr(native_text, "available", lambda: False)
    monkeypatch.setattr(native_text, "MIN_BYTES", 0)
    monkeypatch.setattr(native_text, "HINT_BYTES", 0)
    monkeypatch.setattr(native_text, "_hinted", [])
    path = committed(tmp_path)
    with caplog.at_level(logging.WARNING, logger="autotune_cache"):
        loaded = parse_results(path.read_bytes(), path)
        parse_results(path.read_bytes(), path)
    assert len(loaded.entries) == len(KEYS) and len(python_parses) == 2
    hints = [r for r in caplog.records if "fast-text" in r.getMessage()]
    assert len(hints) == 1 and str(path) in hints[0].getMessage()


def test_a_protoc_that_cannot_start_leaves_the_file_to_python(tmp_path, any_size, monkeypatch,
                                                              python_parses):
    monkeypatch.setattr(native_text, "available", lambda: True)
    monkeypatch.setattr(native_text.sys, "executable", str(tmp_path / "no-such-python"))
    path = committed(tmp_path)
    assert len(parse_results(path.read_bytes(), path).entries) == len(KEYS)
    assert len(python_parses) == 1


def test_small_files_never_start_protoc(tmp_path, python_parses, monkeypatch):
    monkeypatch.setattr(native_text.subprocess, "run", lambda *a, **k: pytest.fail("protoc ran"))
    path = committed(tmp_path)
    assert path.stat().st_size < native_text.MIN_BYTES
    parse_results(path.read_bytes(), path)
    assert len(python_parses) == 1


@needs_protoc
def test_xla_files_whose_any_fields_name_other_types_go_through_protoc(any_size, python_parses):
    """XLA's legacy results file packs each result's backend config in a google.protobuf.Any;
    protoc resolves its type from the descriptor set as Python does from its pool."""
    from pathlib import Path

    from autotune_cache.xla.proto import xla_autotuner_pb2, xla_autotuning_pb2

    assert xla_autotuner_pb2.BackendConfig  # the Any's type, in this process's pool
    path = Path(__file__).parents[1] / "fixtures" / "xla_h200_jax0.11.2" / "legacy.textproto"
    data = path.read_bytes()
    assert b"type.googleapis.com/xla.autotuner.BackendConfig" in data
    native = formats.parse_message(data, xla_autotuning_pb2.AutotuneResults, path, text=True,
                                   what="XLA autotune results file")
    assert python_parses == []
    python = xla_autotuning_pb2.AutotuneResults()
    text_format.Parse(data.decode(), python)
    assert native == python


@needs_protoc
def test_a_module_planted_in_the_working_directory_is_not_run(tmp_path, any_size, monkeypatch,
                                                              python_parses):
    """protoc's child Python runs isolated: a json.py (or grpc_tools/) in a shared working
    directory is neither imported nor run, and the fast path still works."""
    planted = tmp_path / "shared"
    planted.mkdir()
    marker = tmp_path / "ran"
    (planted / "json.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (planted / "grpc_tools").mkdir()
    (planted / "grpc_tools" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(planted)
    path = committed(tmp_path)
    assert len(parse_results(path.read_bytes(), path).entries) == len(KEYS)
    assert python_parses == [] and not marker.exists()
