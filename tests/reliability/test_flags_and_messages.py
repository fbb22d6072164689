"""Items 10 and 11 of issue 11: flags that were silently dropped or misread, files accepted that
are not ours, and messages that pointed the wrong way. Each case gets a named error (or warning)
that says what is wrong and what to do."""

from __future__ import annotations

import logging

import pytest

from autotune_cache import (
    Cache,
    CorruptFileError,
    FlagError,
    Settings,
    parse_flags,
)
from autotune_cache.cli import main as cli_main
from autotune_cache.formats import save_results, serialize_results
from autotune_cache.store.dirstore import DirectoryStore
from tests.cachetools import fake_tune, make_key
from tests.reliability.conftest import ROOT, run_python

XLA = ROOT / "tests" / "fixtures" / "xla_h200_jax0.11.2"
KEY = make_key()


# ----- flags ---------------------------------------------------------------------------------

def test_repeated_load_flag_loads_every_file(tmp_path):
    a, b = tmp_path / "a.textproto", tmp_path / "b.textproto"
    settings = parse_flags(f"--load_autotune_results_from={a} --load_autotune_results_from={b}",
                           env={})
    assert settings.load_from == (a, b)


def test_other_flag_given_twice_with_different_values_is_an_error(tmp_path):
    with pytest.raises(FlagError, match="--autotune_cache_dir.*twice"):
        parse_flags(f"--autotune_cache_dir={tmp_path}/a --autotune_cache_dir={tmp_path}/b",
                    env={})


def test_empty_remote_cache_flag_is_an_error():
    with pytest.raises(FlagError, match="--autotune_remote_cache="):
        parse_flags("--autotune_remote_cache=", env={})


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6379/notadb", "redis://h:p/0",
                                 "http://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0/extra"])
def test_malformed_redis_url_is_an_error(url):
    with pytest.raises(FlagError, match="--autotune_remote_cache"):
        parse_flags(f"--autotune_remote_cache={url}", env={})


def test_non_numeric_shard_count_is_a_named_error(tmp_path):
    code = """
from autotune_cache import get_cache, AutotuneCacheError
try:
    get_cache()
except AutotuneCacheError as e:
    print("named:", e)
"""
    res = run_python(code, env={"AUTOTUNE_FLAGS": f"--dump_autotune_results_to={tmp_path}/d.pb",
                                "TEST_TOTAL_SHARDS": "abc"})
    res.assert_no_traceback()
    assert res.out.startswith("named:") and "TEST_TOTAL_SHARDS=abc" in res.out, res.text


# ----- wrong files accepted ------------------------------------------------------------------

def test_foreign_protobuf_message_is_not_an_empty_results_file(tmp_path):
    from google.protobuf import timestamp_pb2

    path = tmp_path / "foreign.pb"
    path.write_bytes(timestamp_pb2.Timestamp(seconds=1, nanos=5).SerializeToString())
    with pytest.raises(CorruptFileError, match="foreign.pb"):
        Cache(Settings(load_from=path))
    assert cli_main(["verify", str(path)]) == 1


def test_two_entries_with_one_key_fail_verify(tmp_path, capsys):
    from autotune_cache.formats import FORMAT_VERSION
    from autotune_cache.proto import autotune_results_pb2 as pb

    first, second = fake_tune(KEY), fake_tune(KEY)
    second.result.time_ms = 0.5
    path = tmp_path / "dup.textproto"
    from google.protobuf import text_format

    path.write_text(text_format.MessageToString(
        pb.AutotuneResultsFile(version=FORMAT_VERSION, entries=[first, second])))
    assert cli_main(["verify", str(path)]) == 1
    assert "same key" in capsys.readouterr().out


# ----- messages that pointed the wrong way ---------------------------------------------------

def test_xla_legacy_file_is_named_as_xla_not_as_an_old_version():
    with pytest.raises(CorruptFileError) as e:
        Cache(Settings(load_from=XLA / "legacy.textproto"))
    assert "XLA" in str(e.value) and "Regenerate the file with this version" not in str(e.value)


@pytest.mark.parametrize("name", ["legacy.textproto", "res.textproto"])
def test_xla_binary_files_are_named_as_xla_too(tmp_path, name):
    """Issue 22, item 10: XLA's binary files (legacy AutotuneResults, version 3, and the newer
    AutotuneCache) given to the load flag are named as XLA's own files, as their text is."""
    binary = tmp_path / name.replace(".textproto", ".pb")
    assert cli_main(["convert", str(XLA / name), str(binary)]) == 0
    with pytest.raises(CorruptFileError) as e:
        Cache(Settings(load_from=binary))
    message = str(e.value)
    assert "XLA autotune results file" in message and str(binary) in message, message
    assert "--xla_gpu_load_autotune_results_from" in message, message
    assert "Regenerate" not in message and "line" not in message, message


def test_file_without_a_version_line_is_not_blamed_on_xla(tmp_path, capsys):
    path = tmp_path / "nover.textproto"
    entry_text = serialize_results([fake_tune(KEY)], text=True).decode()
    path.write_text(entry_text.replace("version: 1\n", ""))
    assert cli_main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert "XLA" not in err and "version" in err, err
    with pytest.raises(CorruptFileError, match="version"):
        Cache(Settings(load_from=path))


def test_cli_messages_never_name_the_library_flag(tmp_path, capsys):
    src = tmp_path / "in.textproto"
    save_results(src, [fake_tune(KEY)])
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cli_main(["convert", str(src), str(blocker / "dir") + "/"]) == 2
    err = capsys.readouterr().err
    assert "--autotune_cache_dir" not in err and str(blocker) in err, err


def test_diff_across_formats_is_an_error(tmp_path, capsys):
    ours = tmp_path / "ours.textproto"
    save_results(ours, [fake_tune(KEY)])
    assert cli_main(["diff", str(ours), str(XLA / "res.textproto")]) == 2
    err = capsys.readouterr().err
    assert "format" in err, err


def test_convert_reports_damaged_entries_and_a_merge_into_an_existing_dir(tmp_path, capsys):
    src = tmp_path / "src"
    store = DirectoryStore(src)
    store.put(fake_tune(KEY))
    damaged = store.path_for(make_key(problem={"i": 9}))
    damaged.write_text("garbage {")
    dst = tmp_path / "dst"
    DirectoryStore(dst).put(fake_tune(make_key(problem={"i": 1})))
    rc = cli_main(["convert", str(src), str(dst)])
    out = capsys.readouterr()
    text = out.out + out.err
    assert damaged.name in text, "the damaged entry was dropped silently"
    assert "already" in text and "1" in text, "the merge into an existing directory was silent"
    assert rc == 1


def test_damaged_entry_warning_is_printed_once(tmp_path, caplog):
    store = DirectoryStore(tmp_path)
    store.path_for(KEY).write_text("garbage {")
    cache = Cache(Settings(cache_dir=tmp_path))
    with caplog.at_level(logging.WARNING, logger="autotune_cache"):
        assert cache.lookup(KEY) is None
        with cache.tune_lock(KEY) as held:
            assert held
            assert cache.refresh(KEY) is None
            cache.record(fake_tune(KEY))
    warnings = [r for r in caplog.records if str(store.path_for(KEY)) in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]

