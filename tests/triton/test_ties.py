"""Ties within noise (store/tuning.pick_winner, docs/decisions/0030-ties-within-noise.md): among
candidates within the timing method's noise band of the fastest, the results file's pick is kept
when it is one of them, else the earliest in the candidate list; a dump that tuned a key again
to the file's pick writes the file's entry unchanged (store/dumprule.confirms), so a dump of an
unchanged suite on the interpreter writes the same bytes."""

from __future__ import annotations

from pathlib import Path

import pytest
import triton
import triton.language as tl

from autotune_cache.formats import keyed, load_results
from autotune_cache.foundation import console
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store import tuning
from autotune_cache.store.dumprule import apply_rule, confirms
from autotune_cache.store.tuning import noise_band, pick_winner, tie_of
from autotune_cache.triton import autotune
from tests.triton import kernels


@pytest.fixture
def noisy_fake(monkeypatch: pytest.MonkeyPatch) -> float:
    """The tests' fake benchmark given the interpreter's noise band, as if its times were
    measured with the interpreter's noise."""
    band = noise_band("cputime-interpreter")
    monkeypatch.setitem(tuning.NOISE_BANDS, "fake", band)
    return band


def test_the_earliest_within_the_band_wins_and_a_tied_committed_pick_is_kept():
    times = {0: 1.2, 1: 1.0, 2: 1.1, 3: 2.0}
    assert pick_winner(times, "cputime-interpreter") == (0, [0, 1, 2])
    assert pick_winner(times, "cputime-interpreter", committed=2) == (2, [0, 1, 2])
    assert pick_winner(times, "cputime-interpreter", committed=3) == (0, [0, 1, 2])
    # No band (a GPU benchmark, the fake): only equal times tie, the earlier kept.
    assert pick_winner(times, "do_bench") == (1, [1])
    assert pick_winner({0: 1.0, 1: 1.0}, "do_bench") == (0, [0, 1])


def test_the_interpreter_band_holds_what_its_noise_reads_and_gpu_methods_have_none():
    assert noise_band("cputime-interpreter") == 0.25
    for method in ("do_bench", "cuda_graph", "do_bench(warmup=10,rep=50)", "user-do_bench",
                   "fake"):
        assert noise_band(method) == 0.0


def test_a_tuning_picks_the_earliest_tied_config_and_its_line_says_so(
        use_cache, fake, noisy_fake, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AUTOTUNE_PROGRESS", "1")
    lines: list[str] = []
    console.set_sink(lines.append)
    try:
        use_cache()
        fake({16: 4.0, 32: 1.2, 64: 1.0, 128: 1.1})  # 32 and 128 within 25 % of 64
        kernel = kernels.tuned_add()
        kernels.launch_add(kernel, n=100)
    finally:
        console.set_sink(None)
    assert kernel.best_config.kwargs == {"BLOCK_SIZE": 32}
    assert tie_of(kernel.last_entry) == (3, noisy_fake)
    assert ("BLOCK_SIZE=32 num_warps=4 num_stages=2 num_ctas=1 (1.2000 ms; a tie of 3 configs "
            "within 25 % of the fastest, decided by the rule: the earliest in the list)"
            ) in lines[-1]


def test_outside_the_band_the_fastest_wins_and_the_line_says_no_tie(use_cache, fake, noisy_fake):
    use_cache()
    fake({16: 4.0, 32: 2.0, 64: 1.0, 128: 1.6})
    kernel = kernels.tuned_add()
    kernels.launch_add(kernel, n=100)
    assert kernel.best_config.kwargs == {"BLOCK_SIZE": 64}
    assert tie_of(kernel.last_entry) is None


def _entry(times: dict[int, float], winner: int, method: str = "cputime-interpreter",
           tuned_at: str = "2026-01-01T00:00:00Z") -> pb.Entry:
    """An entry of kernels.tuned_add's add_kernel over `times` ({BLOCK_SIZE: ms})."""
    entry = pb.Entry()
    entry.key.kernel = "add_kernel"
    entry.key.problem = "n=100"
    result = entry.result
    for block, ms in times.items():
        timing = result.candidates.add(time_ms=ms)
        timing.config.params.add(name="BLOCK_SIZE", int_value=block)
    result.config.CopyFrom(result.candidates[list(times).index(winner)].config)
    result.time_ms, result.timing_method, result.tuned_at = times[winner], method, tuned_at
    return entry


INTERPRETER = "cputime-interpreter"


@pytest.mark.parametrize(("method", "now", "winner", "kept"), [
    (INTERPRETER, {16: 2.0, 32: 1.1, 64: 1.0}, 64, True),    # the same pick
    (INTERPRETER, {16: 2.0, 32: 1.0, 64: 1.2}, 32, True),    # the file's pick, still tied
    (INTERPRETER, {16: 2.0, 32: 1.0, 64: 1.6}, 32, False),   # the file's pick, now slow
    ("do_bench", {16: 2.0, 32: 1.0, 64: 1.01}, 32, False),   # no band on a GPU
    ("do_bench", {16: 2.0, 32: 1.1, 64: 1.0}, 64, True),     # the same pick
])
def test_a_dump_keeps_the_files_entry_when_the_tuning_confirms_its_pick(method, now, winner,
                                                                         kept):
    old = _entry({16: 2.2, 32: 1.05, 64: 1.0}, 64, method)
    new = _entry(now, winner, method, tuned_at="2026-02-02T00:00:00Z")
    assert confirms(old, new) is kept
    ((key, _),) = keyed([old])
    digest = key.digest()
    merged, outcome = apply_rule({digest: (key, old)}, {digest: (key, new)}, path="f")
    assert merged[digest][1] == (old if kept else new)
    assert (outcome.confirmed, outcome.replaced) == ((1, 0) if kept else (0, 1))
    assert ("1 tuned again to the file's pick, written unchanged" in outcome.line()) is kept


def test_a_tuning_by_another_method_never_confirms():
    old = _entry({16: 2.2, 32: 1.05, 64: 1.0}, 64, "fake")
    assert not confirms(old, _entry({16: 2.2, 32: 1.05, 64: 1.0}, 64, INTERPRETER))


def test_a_redump_whose_timings_moved_within_noise_writes_the_same_bytes(
        use_cache, fake, noisy_fake, tmp_path: Path):
    """Run to run the fake's leaders swap, as the interpreter's do: the file stays the same."""
    dump = tmp_path / "add.autotune.textproto"
    written = []
    for table in ({16: 4.0, 32: 1.0, 64: 1.2, 128: 1.1},   # 32 fastest: picked
                  {16: 4.1, 32: 1.2, 64: 1.0, 128: 1.15},  # 64 fastest, 32 tied: the file's
                  {16: 4.0, 32: 1.22, 64: 1.1, 128: 1.0}):  # 128 fastest, 32 tied: the file's
        cache = use_cache(dump_to=dump)
        bench = fake(table)
        kernels.launch_add(kernels.tuned_add(), n=100)
        assert bench.calls == [16, 32, 64, 128]  # tuned again, not loaded
        cache.close()
        written.append(dump.read_bytes())
    assert written[0] == written[1] == written[2]
    (entry,) = load_results(dump)
    assert entry.result.config.params[0].int_value == 32


@triton.jit
def _scaled_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out = x * (the sum of x's block)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, x * tl.sum(x, axis=0), mask=mask)


def _scaled():
    """A fresh tuner over _scaled_kernel (a new process's): num_warps is the interpreter's no-op,
    so the first three configs do the same work and differ only by noise; the last runs four
    times the programs."""
    return autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=w) for w in (1, 2, 4)]
                    + [triton.Config({"BLOCK": 16}, num_warps=1)], key=["n"])(_scaled_kernel)


def test_a_real_interpreter_kernel_redumped_gives_a_byte_identical_file(use_cache, tmp_path):
    import torch

    dump = tmp_path / "scaled.autotune.textproto"
    written = []
    for _ in range(2):
        cache = use_cache(dump_to=dump)
        kernel = _scaled()
        for n in (64, 256):
            x = torch.ones(n)
            out = torch.empty_like(x)
            kernel[lambda meta, n=n: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
            assert torch.equal(out, x * 64)
        assert cache.stats.benchmarks == 8  # both keys tuned again
        cache.close()
        written.append(dump.read_bytes())
    assert written[0] == written[1]
    for entry in load_results(dump):
        assert entry.result.timing_method == INTERPRETER
        assert entry.result.config.num_warps == 1  # the earliest of the three tied
