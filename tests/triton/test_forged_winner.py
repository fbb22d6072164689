"""A cached winner that fails to compile or launch is a miss, never a dead end (issue 49).

A writer of a shared tier (a cache directory, a Redis server) can make an entry whose winner is
a candidate that fails on the readers' device (on a GPU, a config over the shared-memory limit)
and clear its failure mark: the entry passes every check a lookup can make. Its first launch
here then fails; the cache never serves that entry again in this process, one warning names the
key and where the entry came from, and the key is tuned again (or, under require-complete, is
the usual strict miss). Here the failing candidate is BLOCK_SIZE=24, which the interpreter
refuses (tl.arange needs a power of 2), as a GPU refuses a config over its limits.
"""

from __future__ import annotations

import logging

import pytest
import torch

from autotune_cache import MissingResultError, get_cache
from autotune_cache.formats import load_results, save_results
from tests.triton import kernels

BLOCKS = (16, 32, 24)
TABLE = {16: 2.0, 32: 1.0, 24: 5.0}


def _forged(use_cache, fake, tmp_path):
    """A results file whose entry for n=100 names BLOCK_SIZE=24 its winner, unmarked."""
    path = tmp_path / "shared.textproto"
    use_cache(dump_to=path)
    fake(TABLE)
    kernels.launch_add(kernels.tuned_add(blocks=BLOCKS), n=100)
    get_cache().finish_dump()
    (entry,) = load_results(path)
    forged = next(t for t in entry.result.candidates
                  if any(p.name == "BLOCK_SIZE" and p.int_value == 24 for p in t.config.params))
    forged.ClearField("failure")
    forged.time_ms = 0.01
    entry.result.config.CopyFrom(forged.config)
    entry.result.time_ms = forged.time_ms
    save_results(path, [entry])
    return path


def test_a_winner_that_fails_to_launch_is_tuned_again_and_named(use_cache, fake, tmp_path,
                                                                caplog):
    path = _forged(use_cache, fake, tmp_path)
    use_cache(load_from=(path,))
    bench = fake(TABLE)
    kernel = kernels.tuned_add(blocks=BLOCKS)
    with caplog.at_level(logging.WARNING, logger="autotune_cache.cache"):
        out, expected = kernels.launch_add(kernel, n=100)
    torch.testing.assert_close(out, expected)
    assert kernel.best_config.kwargs == {"BLOCK_SIZE": 32} and sorted(bench.calls) == [16, 24, 32]
    (warning,) = [r.getMessage() for r in caplog.records if "failed to compile" in r.getMessage()]
    assert str(path) in warning and "add_kernel" in warning and "InterpreterError" in warning
    # Never again in this process: a new tuner of the same kernel finds the re-tuned entry.
    again = kernels.tuned_add(blocks=BLOCKS)
    bench.calls.clear()
    out, expected = kernels.launch_add(again, n=100)
    torch.testing.assert_close(out, expected)
    assert again.best_config.kwargs == {"BLOCK_SIZE": 32} and bench.calls == []


def test_a_forged_winner_in_a_shared_cache_directory_is_tuned_again_and_overwritten(
        use_cache, fake, tmp_path, caplog):
    """The finding's own shape: the writer shares the cache directory. The tuning after the
    failed launch takes the key's lock there and re-reads the directory for a peer's result: the
    forged entry must not be served by that re-read either (it once was, and the launch then
    failed with Triton's error)."""
    (entry,) = load_results(_forged(use_cache, fake, tmp_path))
    shared = tmp_path / "shared-dir"
    use_cache(cache_dir=shared).record(entry)  # the other account's write
    use_cache(cache_dir=shared)  # a reader's process
    bench = fake(TABLE)
    with caplog.at_level(logging.WARNING, logger="autotune_cache.cache"):
        out, expected = kernels.launch_add(kernels.tuned_add(blocks=BLOCKS), n=100)
    torch.testing.assert_close(out, expected)
    assert sorted(bench.calls) == [16, 24, 32]
    assert any(str(shared) in r.getMessage() and "failed to compile" in r.getMessage()
               for r in caplog.records)
    # The directory now holds the re-tuned entry: the next reader benchmarks nothing.
    use_cache(cache_dir=shared)
    bench = fake(TABLE)
    again = kernels.tuned_add(blocks=BLOCKS)
    kernels.launch_add(again, n=100)
    assert again.best_config.kwargs == {"BLOCK_SIZE": 32} and bench.calls == []


def test_under_require_complete_it_is_the_strict_miss(use_cache, fake, tmp_path):
    path = _forged(use_cache, fake, tmp_path)
    use_cache(load_from=(path,), require_complete=True)
    fake(TABLE)
    with pytest.raises(MissingResultError):
        kernels.launch_add(kernels.tuned_add(blocks=BLOCKS), n=100)


def test_when_every_candidate_fails_the_caller_sees_tritons_own_error(use_cache, fake,
                                                                      tmp_path):
    """A launch that fails whatever the config (here: no candidate can run on the interpreter)
    was not the entry's fault: after the re-tune the caller sees Triton's own error, as without
    a cache, not an AllConfigsFailedError about their configs."""
    path = tmp_path / "r.textproto"
    use_cache(dump_to=path)
    fake({3: 1.0, 5: 2.0})  # a fake benchmark launches nothing: the dump has a winner
    with pytest.raises(Exception) as tuned:
        kernels.launch_add(kernels.tuned_add(blocks=(3, 5)), n=100)
    get_cache().finish_dump()
    use_cache(load_from=(path,))
    fake({3: 1.0, 5: 2.0})
    with pytest.raises(Exception) as loaded:
        kernels.launch_add(kernels.tuned_add(blocks=(3, 5)), n=100)
    assert type(loaded.value).__name__ == type(tuned.value).__name__ == "InterpreterError"
