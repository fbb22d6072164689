"""results_index: a canonical text file is searched in place (store/searched.py) or, read whole,
indexed by (kernel, problem), and either way only the entries a lookup needs are parsed;
anything else is parsed whole, with the same answers."""

from __future__ import annotations

import logging

import pytest
from google.protobuf import text_format

from autotune_cache import Cache, CorruptFileError, Settings
from autotune_cache.formats import load_results, save_results, serialize_results
from autotune_cache.foundation.key import CacheKey
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store import results_index
from autotune_cache.store.searched import SearchedFile
from tests.cachetools import CPU, fake_tune, make_key

# Names and strings a careless splitter would trip on: braces, quotes, backslashes, newlines,
# non-ASCII, NUL, and the words the index looks for.
ODD_KERNELS = ["matmul", "entries_kernel", 'a"b', "br{ace}\n}", "x\\y", "é", "key problem",
               "entries {", "\x00z", "kernel: \"k\""]
ODD_PROBLEMS = ["", "M=1", 'p{q}"r"', 'problem: "x"', "entries {\n}\nentries {", "ü=2"]


def odd_entries() -> list[pb.Entry]:
    out = []
    for i, kernel in enumerate(ODD_KERNELS):
        for j, problem in enumerate(ODD_PROBLEMS):
            key = make_key(kernel=kernel, problem={"p": j} if not problem else None)
            key = CacheKey(kernel, key.source_fingerprint, key.configs_fingerprint, problem,
                           CPU if (i + j) % 2 else key.device, {"triton": f"3.{j}"})
            entry = fake_tune(key, tuning_seconds=float(i * 10 + j))
            entry.result.triton_specialization = '{"entries": [1], "key": "}\\n{"}'
            out.append(entry)
    return out


def keyed(entries):
    return {CacheKey.from_proto(e.key): e for e in entries}


def proven_get(loaded, key):
    """A lookup as the memory tier makes one: a search's miss is proven (searched.py)."""
    got = loaded.get(key)
    if got is None and isinstance(loaded, SearchedFile):
        loaded.prove()
        got = loaded.get(key)
    return got


def assert_same_as_full_parse(path, loaded):
    full = keyed(load_results(path))
    for key, entry in full.items():
        got = proven_get(loaded, key)
        assert got is not None, key
        assert got[0] == key
        assert got[1].SerializeToString(deterministic=True) == entry.SerializeToString(
            deterministic=True)
    assert {k: e.SerializeToString() for k, e in loaded.items()} == {
        k: e.SerializeToString() for k, e in full.items()}


# How a canonical text file is loaded: searched in place (load_file), or read whole and indexed
# (what a search falls back to).
LOADERS = {"searched": results_index.load_file,
           "read whole": lambda path: results_index.load_bytes(path, path.read_bytes())}


@pytest.mark.parametrize("how", sorted(LOADERS))
def test_the_index_gives_the_entries_of_a_full_parse(tmp_path, how):
    path = tmp_path / "cache.textproto"
    save_results(path, odd_entries())
    loaded = LOADERS[how](path)
    assert isinstance(loaded, SearchedFile) == (how == "searched")
    assert not loaded.entries  # nothing parsed by the load itself
    assert loaded.indexed and len(loaded) == len(ODD_KERNELS) * len(ODD_PROBLEMS)
    assert_same_as_full_parse(path, loaded)


@pytest.mark.parametrize("how", sorted(LOADERS))
def test_a_lookup_parses_only_its_own_problem(tmp_path, how):
    path = tmp_path / "cache.textproto"
    entries = [fake_tune(make_key(problem={"M": m})) for m in range(20)]
    save_results(path, entries)
    loaded = LOADERS[how](path)
    key = make_key(problem={"M": 7})
    assert loaded.get(key)[0] == key
    assert len(loaded.entries) == 1
    near = make_key(problem={"M": 7}, toolchain={"triton": "9.9"})
    assert loaded.get(near) is None and len(loaded.entries) == 1
    assert [k for k, _ in loaded.same_problem(near)] == [key]
    assert loaded.count_of("matmul") == 20 and loaded.count_of("other") == 0
    blocks = path.read_bytes().count(b"entries {")
    assert 0 < loaded.unparsed_bytes_of("matmul") < path.stat().st_size * (blocks - 1) / blocks
    list(loaded.items("matmul"))
    assert loaded.unparsed_bytes_of("matmul") == 0 and len(loaded.entries) == 20


@pytest.mark.parametrize("how", sorted(LOADERS))
def test_an_absent_key_is_a_miss_that_parses_nothing(tmp_path, how):
    path = tmp_path / "cache.textproto"
    save_results(path, odd_entries())
    loaded = LOADERS[how](path)
    assert loaded.get(make_key(kernel="no_such_kernel")) is None
    assert loaded.get(make_key(kernel="matmul", problem={"M": 999})) is None
    assert not loaded.entries


def test_an_empty_file_of_ours_is_indexed(tmp_path):
    path = tmp_path / "cache.textproto"
    save_results(path, [])
    loaded = results_index.load_file(path)
    assert loaded.indexed and len(loaded) == 0 and loaded.get(make_key()) is None


def test_duplicate_keys_keep_the_last_as_a_full_parse_does(tmp_path):
    key = make_key()
    first, last = fake_tune(key, tuning_seconds=1.0), fake_tune(key, tuning_seconds=2.0)
    other = fake_tune(make_key(problem={"M": 1}))
    # The writer drops duplicates, so join three canonical blocks by hand.
    blocks = [serialize_results([e], text=True).removeprefix(b"version: 1\n")
              for e in (first, other, last)]
    path = tmp_path / "cache.textproto"
    path.write_bytes(b"version: 1\n" + b"".join(blocks))
    loaded = results_index.load_file(path)
    assert loaded.indexed and len(loaded) == 3
    assert loaded.get(key)[1].result.tuning_seconds == 2.0
    assert [e.result.tuning_seconds for _, e in loaded.items()] == [2.0, 2.5]
    assert_same_as_full_parse(path, loaded)


# ----- files the index must not trust --------------------------------------------------------

def canonical(tmp_path, entries=None):
    path = tmp_path / "cache.textproto"
    save_results(path, entries or [fake_tune(make_key(problem={"M": m})) for m in (1, 2, 3)])
    return path


def one_line(text: bytes) -> bytes:
    msg = pb.AutotuneResultsFile()
    text_format.Parse(text.decode(), msg)
    return text_format.MessageToString(msg, as_one_line=True).encode()


def reorder(text: bytes) -> bytes:
    """The first entry with its result before its key."""
    head, rest = text.split(b"entries {\n", 1)
    block, tail = rest.split(b"\n}\n", 1)
    key, result = block.split(b"\n  result {", 1)
    return head + b"entries {\n  result {" + result + b"\n" + key + b"\n}\n" + tail


NON_CANONICAL = {
    "one line": one_line,
    "a comment": lambda t: t.replace(b"  key {\n", b"  # reviewed\n  key {\n", 1),
    "CRLF": lambda t: t.replace(b"\n", b"\r\n"),
    "fields reordered": reorder,
    # The first entry closed by an indented `}` and a second entry opened inside its block: a
    # valid file of four entries whose blocks say three.
    "a hidden entry": lambda t: t.replace(
        b"\n}\n", b"\n  }\n  entries {\n  key {\n    kernel: \"hidden\"\n  }\n}\n", 1),
    "a problem set after the device": lambda t: t.replace(
        b'    problem: "M=1"\n', b"", 1).replace(b"    toolchain {", b'    problem: "M=1"\n'
                                                b"    toolchain {", 1),
    "a string continued on the next line": lambda t: t.replace(
        b'    problem: "M=1"\n', b'    problem: "M="\n    "1"\n', 1),
}


@pytest.mark.parametrize("edit", sorted(NON_CANONICAL))
def test_a_non_canonical_file_is_parsed_whole_with_a_hint(tmp_path, caplog, edit):
    path = canonical(tmp_path)
    path.write_bytes(NON_CANONICAL[edit](path.read_bytes()))
    full = load_results(path)  # every edit keeps the file valid
    results_index._hinted.discard(str(path))
    with caplog.at_level(logging.INFO, logger="autotune_cache"):
        loaded = results_index.load_file(path)
        assert_same_as_full_parse(path, loaded)  # a search meets the edit and reads it whole
        assert_same_as_full_parse(path, results_index.load_file(path))
    assert not loaded.indexed and len(loaded) == len(full)
    hints = [r for r in caplog.records if "not canonical" in r.getMessage()]
    assert len(hints) == 1 and f"autotune-cache convert {path} {path}" in hints[0].getMessage()


def test_the_parser_refuses_a_second_kernel_key_or_problem():
    """The index relies on this (results_index's docstring): if protobuf's parser ever let a
    later field override the one in a block's first lines, the index would have to check
    those words too."""
    for text in ('entries { key { kernel: "a" kernel: "b" } }',
                 'entries { key { kernel: "a" } key { problem: "p" } }',
                 'entries { key { kernel: "a" problem: "x" problem: "y" } }'):
        with pytest.raises(text_format.ParseError, match="should not have multiple"):
            text_format.Parse(text, pb.AutotuneResultsFile())


# ----- damage --------------------------------------------------------------------------------

def test_a_corrupt_block_names_the_file_and_its_line_when_used(tmp_path):
    path = canonical(tmp_path)
    text = path.read_bytes()
    second = text.index(b'problem: "M=2"')
    bad_at = text.index(b"time_ms:", second)
    path.write_bytes(text[:bad_at] + b"time_ms: fast" + text[text.index(b"\n", bad_at):])
    line = text.count(b"\n", 0, bad_at) + 1
    loaded = results_index.load_file(path)  # the load does not parse entries
    assert loaded.get(make_key(problem={"M": 1})) is not None
    with pytest.raises(CorruptFileError) as e:
        loaded.get(make_key(problem={"M": 2}))
    assert str(e.value).startswith(f"{path}: not a valid text-format autotune results file: "
                                   f"{line}:")
    with pytest.raises(CorruptFileError, match=f"{line}:"):  # a full parse names the same line
        load_results(path)


def test_a_block_with_a_newer_field_gets_the_newer_schema_hint(tmp_path):
    path = canonical(tmp_path)
    path.write_bytes(path.read_bytes().replace(b"    time_ms:", b"    speedup: 2\n    time_ms:", 1))
    with pytest.raises(CorruptFileError, match="newer release"):
        results_index.load_file(path).get(make_key(problem={"M": 1}))


def test_a_block_over_the_escape_budget_is_refused(tmp_path, monkeypatch):
    path = canonical(tmp_path)
    path.write_bytes(path.read_bytes().replace(b'tuner_version: "0.1.0"',
                                               b'tuner_version: "' + b"\\001" * 50 + b'"', 1))
    monkeypatch.setattr("autotune_cache.foundation.limits.MAX_TEXT_ESCAPES", 10)
    loaded = results_index.load_file(path)
    with pytest.raises(CorruptFileError, match="backslash escapes"):
        loaded.get(make_key(problem={"M": 1}))


def test_binary_files_answer_the_same(tmp_path):
    path = tmp_path / "cache.pb"
    save_results(path, odd_entries())
    loaded = results_index.load_file(path)
    assert loaded.indexed and loaded.binary  # entries parsed on use, as for canonical text
    assert_same_as_full_parse(path, loaded)


def test_a_cache_hits_near_misses_and_misses_through_the_index(tmp_path):
    path = canonical(tmp_path)
    cache = Cache(Settings(load_from=(path,)))
    assert cache.memory.loaded[0].indexed
    assert cache.lookup(make_key(problem={"M": 2})) is not None
    assert cache.lookup(make_key(problem={"M": 4})) is None
    near = cache.near_misses(make_key(problem={"M": 3}, toolchain={"triton": "9.9"}))
    assert [f.key for f in near] == [make_key(problem={"M": 3})]
    assert [f.origin for f in near] == [str(path)]


def test_an_empty_kernel_string_is_the_full_parses_error(tmp_path):
    """`kernel: ""` is not what the writer writes: the file is parsed whole, which names it
    (at the load, read whole; at the first lookup, searched)."""
    path = canonical(tmp_path)
    path.write_bytes(path.read_bytes().replace(b'kernel: "matmul"', b'kernel: ""', 1))
    with pytest.raises(CorruptFileError, match="has no key.kernel"):
        results_index.load_bytes(path, path.read_bytes())
    with pytest.raises(CorruptFileError, match="has no key.kernel"):
        results_index.load_file(path).get(make_key(problem={"M": 2}))


@pytest.mark.parametrize("suffix", [".textproto", ".pb"])
def test_a_file_over_several_index_chunks_answers_like_a_full_parse(tmp_path, suffix):
    """The text index is built in chunks of blocks; entries on either side of a chunk's edge,
    and a kernel named like a field (`entries`), are found as a full parse finds them."""
    count = results_index._CHUNK + 7
    path = tmp_path / f"cache{suffix}"
    save_results(path, [fake_tune(make_key(kernel="entries" if i % 997 == 0 else "k",
                                           problem={"M": i})) for i in range(count)])
    loaded = results_index.load_file(path)
    assert loaded.indexed and len(loaded) == count
    assert_same_as_full_parse(path, loaded)
