"""store/searched.py: a canonical text file is searched in place. A load reads its two ends, a
lookup a few blocks; the answers are a full parse's; whatever the writer would not have written
makes the file be read whole, and a miss is proven before anyone acts on it."""

from __future__ import annotations

import logging
import os
import threading

import pytest

from autotune_cache import Cache, CorruptFileError, MissingResultError, Settings
from autotune_cache.formats import load_results, save_results, serialize_results
from autotune_cache.foundation.key import CacheKey
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store import results_index, searched
from autotune_cache.store.searched import SearchedFile
from tests.cachetools import CPU, H200, fake_tune, make_key

KERNELS = ["attention", "layer_norm", "matmul", "softmax"]


def entry(kernel: str, m: int, wide: bool = False) -> pb.Entry:
    """An entry of `kernel` at problem M=m; `wide` ones have 400 candidates (a block of about
    40 kB, wider than a search's read window)."""
    out = fake_tune(make_key(kernel=kernel, problem={"M": m, "name": "x" * (m % 7)}))
    if wide:
        extra = list(out.result.candidates) * 67
        out.result.candidates.extend(extra[:394])
    return out


@pytest.fixture
def big(tmp_path):
    """A canonical file of 4 kernels x 300 problems, every 37th entry wide."""
    path = tmp_path / "suite.textproto"
    save_results(path, [entry(k, m, wide=m % 37 == 0) for k in KERNELS for m in range(300)])
    return path


@pytest.fixture
def reads(monkeypatch):
    """The bytes os.pread returns, summed."""
    total = [0]
    pread = os.pread

    def counting(fd: int, n: int, offset: int) -> bytes:
        got = pread(fd, n, offset)
        total[0] += len(got)
        return got

    monkeypatch.setattr(os, "pread", counting)
    return total


def test_a_load_reads_the_ends_and_a_lookup_a_few_blocks(big, reads):
    size = big.stat().st_size
    loaded = results_index.load_file(big)
    assert isinstance(loaded, SearchedFile) and reads[0] < 64
    key = make_key(kernel="matmul", problem={"M": 123, "name": "x" * (123 % 7)})
    assert loaded.get(key)[0] == key
    # Each probe reads on to the next block's start; half this file's bytes are wide blocks.
    assert reads[0] < size / 8 and len(loaded.entries) == 1
    assert loaded.searched


def test_every_key_and_every_kernel_answer_as_a_full_parse(big):
    full = {CacheKey.from_proto(e.key): e for e in load_results(big)}
    loaded = results_index.load_file(big)
    for key, want in full.items():
        got = loaded.get(key)
        assert got is not None and got[0] == key
        assert got[1].SerializeToString(deterministic=True) == want.SerializeToString(
            deterministic=True)
    for m in (-1, 5000):  # before the first problem, after the last: misses
        assert loaded.get(make_key(kernel="matmul", problem={"M": m})) is None
    for kernel in ("aardvark", "matmul2", "zeta"):  # before, between and after the kernels
        assert loaded.get(make_key(kernel=kernel)) is None and loaded.count_of(kernel) == 0
    assert loaded.kernels() == set(KERNELS)
    for kernel in KERNELS:
        assert loaded.count_of(kernel) == 300
        assert {k for k, _ in loaded.items(kernel)} == {k for k in full if k.kernel == kernel}
        assert loaded.unparsed_bytes_of(kernel) == 0
    assert loaded.searched  # the writer's file never made it read whole
    assert len(loaded) == len(full)


def test_a_file_out_of_order_is_read_whole_and_says_how_to_fix_it(tmp_path, caplog):
    keys = [make_key(problem={"M": m}) for m in range(40)]
    blocks = [serialize_results([fake_tune(k)], text=True).removeprefix(b"version: 1\n")
              for k in keys]
    blocks[5], blocks[30] = blocks[30], blocks[5]  # a hand-edit that moved two entries
    path = tmp_path / "cache.textproto"
    path.write_bytes(b"version: 1\n" + b"".join(blocks))
    cache = Cache(Settings(load_from=(path,), require_complete=True))
    with caplog.at_level(logging.INFO, logger="autotune_cache"):
        for key in keys:
            assert cache.lookup(key) is not None, key
    (loaded,) = cache.memory.loaded
    assert not loaded.searched
    said = [r.getMessage() for r in caplog.records if "read whole" in r.getMessage()]
    assert len(said) == 1 and "not in the writer's order" in said[0]
    assert f"autotune-cache convert {path} {path}" in said[0]


def test_a_key_a_search_cannot_see_is_found_before_a_miss_is_reported(tmp_path):
    """An entry of kernel `aaa` moved to the end by hand: a bisection looks for it before the
    first block and misses; the memory tier reads the file whole before calling it a miss, so a
    strict run finds it."""
    moved = make_key(kernel="aaa")
    blocks = [serialize_results([fake_tune(k)], text=True).removeprefix(b"version: 1\n")
              for k in [*(make_key(problem={"M": m}) for m in range(10)), moved]]
    path = tmp_path / "cache.textproto"
    path.write_bytes(b"version: 1\n" + b"".join(blocks))
    assert results_index.load_file(path).get(moved) is None  # the search alone misses it
    cache = Cache(Settings(load_from=(path,), require_complete=True))
    assert cache.lookup(moved) is not None


def test_the_file_read_is_the_one_the_load_found(big):
    loaded = results_index.load_file(big)
    key = make_key(kernel="softmax", problem={"M": 7, "name": "x" * 0})
    replacement = big.with_suffix(".new.textproto")
    save_results(replacement, [entry("other", 1)])
    os.replace(replacement, big)  # a regen's atomic write, after this process loaded
    assert loaded.get(key)[0] == key


def test_a_file_truncated_under_a_process_is_named_not_a_crash(big):
    loaded = results_index.load_file(big)
    with open(big, "r+b") as f:  # an editor that rewrites in place
        f.truncate(big.stat().st_size // 2)
    with pytest.raises(CorruptFileError, match=str(big)):
        for kernel in KERNELS:
            list(loaded.items(kernel))


def test_an_entry_over_the_size_limit_is_refused_when_used(big, monkeypatch):
    monkeypatch.setattr(searched, "MAX_ENTRY_BYTES", 20_000)
    loaded = results_index.load_file(big)
    assert loaded.get(make_key(kernel="matmul", problem={"M": 1, "name": "x"})) is not None
    with pytest.raises(CorruptFileError, match="more than the"):
        loaded.get(make_key(kernel="matmul", problem={"M": 37, "name": "x" * 2}))


def test_threads_looking_up_at_once_get_their_own_entries(big):
    loaded = results_index.load_file(big)
    wrong: list[CacheKey] = []

    def look(kernel: str) -> None:
        for m in range(0, 300, 3):
            key = make_key(kernel=kernel, problem={"M": m, "name": "x" * (m % 7)})
            got = loaded.get(key)
            if got is None or got[0] != key:
                wrong.append(key)

    threads = [threading.Thread(target=look, args=(k,)) for k in KERNELS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == [] and loaded.searched


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_searches_even_if_a_parent_thread_held_the_file(big):
    loaded = results_index.load_file(big)
    key = make_key(kernel="layer_norm", problem={"M": 11, "name": "x" * 4})
    with loaded._lock():  # what a compile-ahead thread holds while it scans, at the fork
        pid = os.fork()
        if pid == 0:  # the child: its lookup must not wait for the parent's thread
            got = loaded.get(key)
            os._exit(0 if got is not None and got[0] == key else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert loaded.get(key)[0] == key


def test_a_whole_read_that_fails_keeps_failing_and_reads_no_other_file(tmp_path):
    """Damage in the last block: a proof of a miss reads the file whole and fails; the next
    questions fail the same way and never read a descriptor since given to another file."""
    a, b = make_key(kernel="a"), make_key(kernel="b")
    path = tmp_path / "r.textproto"
    save_results(path, [fake_tune(a), fake_tune(b)])
    data = path.read_bytes()
    at = data.rindex(b"tuner_version")
    path.write_bytes(data[:at] + b"entries garbage\n  " + data[at:])
    loaded = results_index.load_file(path)
    assert loaded.get(a)[0] == a
    with pytest.raises(CorruptFileError, match=str(path)):
        loaded.prove()
    other = tmp_path / "other.textproto"
    save_results(other, [fake_tune(make_key(kernel="b", source="zzz"))])
    with open(other, "rb"):  # may take the number of a closed descriptor
        for key in (b, make_key(kernel="b", source="zzz")):  # never the other file's entry
            with pytest.raises(CorruptFileError, match=str(path)):
                loaded.get(key)


def test_a_hit_in_an_earlier_file_reads_no_later_file_whole(tmp_path):
    """A monorepo loading one file per team: a key of the first file misses in the second by
    search alone, which is not proven (the key was found); a key in neither proves both."""
    first, second = tmp_path / "team_a.textproto", tmp_path / "team_b.textproto"
    save_results(first, [fake_tune(make_key(kernel="a_kernel", problem={"M": m}))
                         for m in range(30)])
    save_results(second, [fake_tune(make_key(kernel="b_kernel", problem={"M": m}))
                          for m in range(30)])
    cache = Cache(Settings(load_from=(first, second), require_complete=True))
    for m in range(30):
        assert cache.lookup(make_key(kernel="a_kernel", problem={"M": m})) is not None
        assert cache.lookup(make_key(kernel="b_kernel", problem={"M": m})) is not None
    assert all(f.searched for f in cache.memory.loaded)
    with pytest.raises(MissingResultError, match="c_kernel"):
        cache.lookup(make_key(kernel="c_kernel"))
    assert not any(f.searched for f in cache.memory.loaded)


def test_a_run_of_several_entries_parses_only_the_key_s_own(tmp_path, monkeypatch):
    """A file's history (other devices, another Triton) puts several entries under one kernel
    and problem; a lookup parses each one's key alone and only its own entry whole, and a key
    written otherwise than the writer writes it is parsed whole, never skipped."""
    keys = [make_key(problem={"M": 1}, device=device, toolchain={"triton": version})
            for device in (H200, CPU) for version in ("3.5.0", "3.6.0")]
    path = tmp_path / "cache.textproto"
    save_results(path, [fake_tune(k) for k in keys])
    parsed: list[int] = []
    parse = searched.parse_block
    monkeypatch.setattr(searched, "parse_block",
                        lambda *a, **kw: parsed.append(kw["start"]) or parse(*a, **kw))
    loaded = results_index.load_file(path)
    for n, key in enumerate(keys, 1):
        assert loaded.get(key)[0] == key
        assert len(parsed) == n  # each entry parsed once, by its own lookup
    # The last key's closing line indented otherwise: its key cannot be read alone.
    text = path.read_bytes()
    last = text.rindex(b"entries {")
    close = b"\n  }\n  result {"
    at = text.index(close, last)
    path.write_bytes(text[:at] + b"\n   }\n  result {" + text[at + len(close):])
    parsed.clear()
    loaded = results_index.load_file(path)
    assert loaded.get(keys[-1])[0] == keys[-1] and parsed[-1] > last - 1
