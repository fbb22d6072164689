"""Fuzzing: arbitrary or mutated bytes give CorruptFileError (or parse), never a crash."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune_cache import CorruptFileError
from autotune_cache.formats import parse_results, serialize_results
from autotune_cache.store.dirstore import DirectoryStore
from tests.cachetools import fake_tune, make_key

VALID_TEXT = serialize_results([fake_tune(make_key())], text=True)
VALID_BINARY = serialize_results([fake_tune(make_key())], text=False)


def mutate(data: bytes, flips: list[tuple[int, int]], cut: int) -> bytes:
    buf = bytearray(data[: max(0, len(data) - cut)])
    for pos, val in flips:
        if buf:
            buf[pos % len(buf)] = val
    return bytes(buf)


def check_parse(data: bytes, text: bool) -> None:
    try:
        msg = parse_results(data, "fuzz.textproto" if text else "fuzz.pb", text=text)
    except CorruptFileError:
        return
    assert msg.version == 1
    assert all(e.key.kernel for e in msg.entries)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512), st.booleans())
def test_random_bytes(data, text):
    check_parse(data, text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=8),
       st.integers(0, 64), st.booleans())
def test_mutated_valid_files(flips, cut, text):
    check_parse(mutate(VALID_TEXT if text else VALID_BINARY, flips, cut), text)


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=8),
       st.integers(0, 64))
def test_directory_lookup_never_raises_on_damage(tmp_path, flips, cut):
    store = DirectoryStore(tmp_path)
    store.path_for(make_key()).write_bytes(mutate(VALID_TEXT, flips, cut))
    entry = store.get(make_key())
    assert entry is None or entry.key.kernel == "matmul"
