"""Deferred tuning in a dump run (autotune_cache/triton/deferred.py).

On the CPU interpreter nothing compiles, so deferral is off there by design; these tests turn
its one condition on (`_compiles_to_overlap`) to drive the protocol itself: the provisional
launch, the snapshot, the tuning at the dump's final write, and every case tuned at the launch
instead. The compile queue runs the real sm_90 compiler in a subprocess (no GPU needed); the
H200 run is in test_gpu.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import triton

from autotune_cache.config.flags import parse_flags
from autotune_cache.errors import AutotuneCacheError
from autotune_cache.formats import load_results
from autotune_cache.triton import deferred, process
from tests.triton import kernels
from tests.triton.kernels import TABLE

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def overlap(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Deferral as on a GPU: compiles to overlap; a fresh engine state (process.py)."""
    monkeypatch.setattr(deferred, "_compiles_to_overlap", lambda tuning: True)
    monkeypatch.setattr(process, "_state", process.ProcessState())
    yield


def _winner_block(entry) -> int:
    return next(p.int_value for p in entry.result.config.params if p.name == "BLOCK_SIZE")


def test_dump_run_launches_a_provisional_config_and_tunes_at_the_final_write(
        use_cache, fake, overlap, tmp_path: Path) -> None:
    dump = tmp_path / "regen.textproto"
    cache = use_cache(dump_to=dump)
    bench = fake(TABLE)
    kernel = kernels.tuned_add()
    out, expected = kernels.launch_add(kernel, n=64)
    torch.testing.assert_close(out, expected)  # the provisional config computes the same
    assert bench.calls == []  # nothing benchmarked during the test
    assert kernel.best_config.kwargs["BLOCK_SIZE"] == 16  # the cheapest to compile
    assert (cache.stats.misses, cache.stats.deferred, cache.stats.tuned) == (1, 1, 0)
    kernels.launch_add(kernel, n=64)  # the same key again: still provisional, still deferred
    assert cache.stats.deferred == 1

    assert cache.finish_dump() == 1
    assert sorted(bench.calls) == [16, 32, 64, 128]
    assert cache.stats.tuned == 1
    assert kernel.best_config.kwargs["BLOCK_SIZE"] == 64
    assert _winner_block(kernel.last_entry) == 64
    [entry] = load_results(dump)
    assert _winner_block(entry) == 64
    assert "at the end of the run" in cache.stats.summary_line()


def test_the_snapshot_keeps_values_strides_and_aliasing(use_cache, fake, overlap,
                                                        tmp_path: Path) -> None:
    use_cache(dump_to=tmp_path / "d.textproto")
    fake(TABLE)
    kernel = kernels.tuned_add()
    base = torch.arange(200, dtype=torch.float32)
    x = base[8:72]  # a view at an offset
    out = torch.empty(64)
    kernel[lambda meta: (triton.cdiv(64, meta["BLOCK_SIZE"]),)](x, x, out, 64)
    [pending] = deferred._state().pending
    sx, sy, sout, n = pending.tuning.args
    assert n == 64
    assert torch.equal(sx, torch.arange(8, 72, dtype=torch.float32))
    assert (sx.storage_offset(), sx.stride(), sx.size()) == (8, (1,), (64,))
    assert sx.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
    assert sx.untyped_storage().data_ptr() == sy.untyped_storage().data_ptr()  # still aliased
    base.zero_()  # the test goes on changing its tensors: the snapshot does not follow
    assert float(sx.sum()) == float(torch.arange(8, 72).sum())


def test_a_regen_after_a_config_was_added_compiles_only_the_new_one(
        use_cache, fake, overlap, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A regen in place (load the committed file, dump) after a config was appended to the
    kernel's list: the deferred tuning compiles ahead only the candidates without a recorded
    timing (on Liger-Kernel's suite it had compiled all 17 of 18), and benchmarks only the new
    one at the end."""
    committed = tmp_path / "committed.textproto"
    use_cache(dump_to=committed)
    fake(TABLE)
    kernels.launch_add(kernels.tuned_add((16, 32, 64)), n=64)
    from autotune_cache import get_cache

    assert get_cache().finish_dump() == 1

    queued: list[list[int]] = []

    def queue_candidates(kernel, args, kwargs, configs, workers, prepare=None, skip=()):
        queued.append(sorted(i for i in range(len(configs)) if i not in skip))
        return deferred.Queued()

    monkeypatch.setattr(deferred, "interpreter_active", lambda: False)  # queue as on a GPU
    monkeypatch.setattr(deferred, "queue_candidates", queue_candidates)
    monkeypatch.setattr(deferred, "_provisional",
                        lambda tuner, configs, order, *rest: configs[order[0]])
    cache = use_cache(load_from=(committed,), dump_to=committed)
    bench = fake(TABLE)
    kernel = kernels.tuned_add((16, 32, 64, 128))
    kernels.launch_add(kernel, n=64)
    assert queued == [[3]]  # BLOCK_SIZE=128, the new config: 16 is provisional, 32-64 reused
    assert cache.finish_dump() == 1
    assert bench.calls == [128]
    assert kernels.candidate_times(kernel) == {b: TABLE[b] for b in (16, 32, 64, 128)}
    assert _winner_block(load_results(committed)[0]) == 64


@pytest.mark.parametrize("settings", [{}, {"deferred_tuning": False}],
                         ids=["no dump", "flag off"])
def test_tuned_at_the_launch_without_a_dump_or_with_the_flag_off(
        use_cache, fake, overlap, tmp_path: Path, settings: dict) -> None:
    if settings:
        settings = {**settings, "dump_to": tmp_path / "d.textproto"}
    cache = use_cache(**settings)
    bench = fake(TABLE)
    kernel = kernels.tuned_add()
    kernels.launch_add(kernel, n=64)
    assert sorted(bench.calls) == [16, 32, 64, 128]
    assert kernel.best_config.kwargs["BLOCK_SIZE"] == 64
    assert (cache.stats.deferred, cache.stats.tuned) == (0, 1)


def test_the_flag_parses() -> None:
    assert parse_flags("--autotune_deferred_tuning=false").deferred_tuning is False
    assert parse_flags("").deferred_tuning is True


def test_not_deferred_without_a_device_to_compile_for(use_cache, fake, tmp_path: Path) -> None:
    cache = use_cache(dump_to=tmp_path / "d.textproto")
    bench = fake(TABLE)
    kernels.launch_add(kernels.tuned_add(), n=64)  # the interpreter: nothing to overlap
    assert (cache.stats.deferred, len(bench.calls)) == (0, 4)


def test_an_argument_that_cannot_be_snapshotted_is_tuned_at_the_launch(
        use_cache, fake, overlap, tmp_path: Path) -> None:
    cache = use_cache(dump_to=tmp_path / "d.textproto")
    bench = fake(TABLE)
    kernel = kernels.tuned_add()
    tuning = type("T", (), {"configs": kernel.configs, "args": (object(),), "kwargs": {}})()
    assert deferred.defer(cache, kernel, tuning, lambda: None, ()) is None
    kernels.launch_add(kernel, n=64)
    assert cache.stats.deferred == 1 and not bench.calls  # the tensors' launch is deferred


def test_past_the_memory_budget_keys_are_tuned_at_the_launch(
        use_cache, fake, overlap, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dump = tmp_path / "d.textproto"
    cache = use_cache(dump_to=dump)
    bench = fake(TABLE)
    monkeypatch.setattr(deferred, "MAX_SNAPSHOT_BYTES", 3 * 64 * 4)  # one key's three tensors
    kernel = kernels.tuned_add()
    kernels.launch_add(kernel, n=64)
    kernels.launch_add(kernel, n=48)
    assert (cache.stats.deferred, cache.stats.tuned, len(bench.calls)) == (1, 1, 4)
    assert cache.finish_dump() == 2
    assert deferred._state().held_bytes == 0  # released at the end


def test_a_dump_run_tunes_even_under_require_complete(use_cache, fake, overlap,
                                                    tmp_path: Path) -> None:
    """A dump run must be able to tune (issue 36: the stale hint under an ini file's
    require-complete once failed the regen and shrank the committed file)."""
    dump = tmp_path / "d.textproto"
    cache = use_cache(dump_to=dump, require_complete=True)
    assert cache.strict_off_for_dump and not cache.settings.require_complete
    fake(TABLE)
    kernels.launch_add(kernels.tuned_add(), n=64)
    cache.finish_dump()
    assert deferred._state().pending == []
    assert len(list(load_results(dump))) == 1


def test_a_key_failing_at_the_end_is_named_and_the_others_are_recorded(
        use_cache, fake, overlap, tmp_path: Path) -> None:
    dump = tmp_path / "d.textproto"
    cache = use_cache(dump_to=dump)
    fake(TABLE, fail={16: "boom", 32: "boom", 64: "boom", 128: "boom"})
    broken = kernels.tuned_add()
    kernels.launch_add(broken, n=64)
    fine = kernels.tuned_add(blocks=(16, 32))
    fake({16: 2.0, 32: 1.0})
    kernels.launch_add(fine, n=80)
    fake(TABLE, fail={16: "boom", 32: "boom", 64: "boom", 128: "boom"})
    with pytest.raises(AutotuneCacheError) as err:
        cache.finish_dump()
    message = str(err.value)
    assert "add_kernel" in message and "--autotune_deferred_tuning=false" in message
    assert "1 key(s)" in message
    assert len(load_results(dump)) == 1  # the key that could be tuned is in the dump


@pytest.mark.slow
def test_the_compile_queue_overlaps_keys_and_compiles_each_binary_once(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TRITON_", "AUTOTUNE_"))}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "tc")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-m", "tests.triton.deferred_queue_worker"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["done_at_return"] == 0  # add() queued, it did not wait
    assert out["first_failures"] == out["second_failures"] == [1]  # BLOCK_SIZE=24
    assert out["first_timed"] == [1, 2, 3]  # the skipped candidate 0 was not queued
    assert out["second_timed"] == [0]  # 1-3 were the first key's binaries: not compiled again
    # Each binary's specialization data is recorded once at least: Triton 3.6 calls the compile
    # hook again for the second key's queued binaries, Triton 3.9 finds them in its JIT cache.
    assert 0 in out["second_specs"]
    assert set(out["first_specs"]) | set(out["second_specs"]) == {0, 1, 2, 3}
    assert out["jit_cache_size"] == 3


def test_a_key_launched_often_is_tuned_at_that_launch(use_cache, fake, overlap, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    cache = use_cache(dump_to=tmp_path / "d.textproto")
    bench = fake(TABLE)
    monkeypatch.setattr(deferred, "HOT_LAUNCHES", 3)
    kernel = kernels.tuned_add()
    kernels.launch_add(kernel, n=64)
    kernels.launch_add(kernel, n=64)
    assert bench.calls == [] and kernel.best_config.kwargs["BLOCK_SIZE"] == 16
    out, expected = kernels.launch_add(kernel, n=64)  # the third launch tunes, then launches
    torch.testing.assert_close(out, expected)
    assert sorted(bench.calls) == [16, 32, 64, 128]
    assert kernel.best_config.kwargs["BLOCK_SIZE"] == 64
    state = deferred._state()
    assert (cache.stats.tuned, state.pending, state.held_bytes) == (1, [], 0)
    kernels.launch_add(kernel, n=64)  # the winner from now on, on the hit path
    assert kernel.best_config.kwargs["BLOCK_SIZE"] == 64 and len(bench.calls) == 4
    assert cache.finish_dump() == 1


def test_tune_deferred_tunes_at_a_point_the_program_chooses(use_cache, fake, overlap,
                                                            tmp_path: Path) -> None:
    from autotune_cache.triton import tune_deferred

    dump = tmp_path / "d.textproto"
    cache = use_cache(dump_to=dump)
    bench = fake(TABLE)
    kernel = kernels.tuned_add()
    kernels.launch_add(kernel, n=64)
    tune_deferred()
    assert len(bench.calls) == 4 and cache.stats.tuned == 1
    kernels.launch_add(kernel, n=64)
    assert kernel.best_config.kwargs["BLOCK_SIZE"] == 64
    assert cache.finish_dump() == 1 and len(bench.calls) == 4
    assert _winner_block(load_results(dump)[0]) == 64
