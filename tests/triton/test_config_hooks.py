"""Config pre_hooks and ir_overrides survive the cache: the launched config is the candidate
object itself, on the tuned launch and on a hit, with its own recorded timings."""

from __future__ import annotations

from pathlib import Path

import torch
import triton

from autotune_cache.triton import Autotuner, autotune
from tests.triton import kernels
from tests.triton.kernels import TABLE


def _zeroing_configs(calls: list[int]) -> list[triton.Config]:
    def zero_out(nargs: dict) -> None:
        calls.append(nargs["BLOCK_SIZE"])
        nargs["out_ptr"].zero_()

    return [triton.Config({"BLOCK_SIZE": b}, num_warps=4, num_stages=2, pre_hook=zero_out)
            for b in (16, 32, 64, 128)]


def _launch_accumulate(kernel: Autotuner, n: int = 90) -> tuple[torch.Tensor, torch.Tensor]:
    """out += x on an `out` that starts at 5: right only if the zeroing pre_hook ran."""
    x = torch.rand(n, generator=torch.Generator().manual_seed(3))
    out = torch.full((n,), 5.0)
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, out, n)
    return out, x


def test_config_pre_hook_runs_on_the_tuned_and_the_cached_launch(use_cache, fake,
                                                                  tmp_path: Path) -> None:
    calls: list[int] = []
    configs = _zeroing_configs(calls)
    cache = use_cache(cache_dir=tmp_path / "dir")
    bench = fake(TABLE)  # no benchmark launches: only the real launch touches `out`
    kernel = autotune(configs=configs, key=["n"])(kernels.accumulate_kernel)
    out, x = _launch_accumulate(kernel)
    torch.testing.assert_close(out, x)
    assert kernel.best_config is configs[2]  # BLOCK_SIZE=64, the candidate object itself
    assert calls == [64]
    assert {c.kwargs["BLOCK_SIZE"]: t[0] for c, t in kernel.configs_timings.items()} == TABLE
    assert all(c in configs for c in kernel.configs_timings)
    assert bench.calls == [16, 32, 64, 128] and cache.stats.tuned == 1

    # A fresh process: a new Cache reading the directory, a new autotuner, no benchmark allowed.
    calls.clear()
    cache = use_cache(cache_dir=tmp_path / "dir")
    bench = fake({})
    configs = _zeroing_configs(calls)
    again = autotune(configs=configs, key=["n"])(kernels.accumulate_kernel)
    out, x = _launch_accumulate(again)
    torch.testing.assert_close(out, x)
    assert (cache.stats.hits, cache.stats.misses, bench.calls) == (1, 0, [])
    assert again.best_config is configs[2] and calls == [64]
    assert len(again.configs_timings) == 4
    out, x = _launch_accumulate(again)  # the in-process memo keeps the candidate too
    torch.testing.assert_close(out, x)
    assert calls == [64, 64]


def test_candidates_differing_only_in_pre_hook_keep_their_own_timings(use_cache,
                                                                        tmp_path: Path) -> None:
    """Two candidates with the same parameters, one with a zeroing pre_hook: the recorded winner
    (the hooked one, timed faster) is launched with its hook on a hit as well."""
    calls: list[int] = []

    def zero_out(nargs: dict) -> None:
        calls.append(1)
        nargs["out_ptr"].zero_()

    def build() -> tuple[Autotuner, list[triton.Config]]:
        configs = [triton.Config({"BLOCK_SIZE": 32}, num_warps=4, num_stages=2),
                   triton.Config({"BLOCK_SIZE": 32}, num_warps=4, num_stages=2,
                                 pre_hook=zero_out)]
        return autotune(configs=configs, key=["n"])(kernels.accumulate_kernel), configs

    from autotune_cache.triton import fake_benchmark

    for attempt in range(2):  # tuning run, then a hit in a fresh Cache
        cache = use_cache(cache_dir=tmp_path / "dir")
        kernel, configs = build()
        with fake_benchmark(lambda config, problem: 1.0 if config.pre_hook else 2.0):
            out, x = _launch_accumulate(kernel)
        torch.testing.assert_close(out, x)
        assert kernel.best_config is configs[1]
        assert {id(c): t[0] for c, t in kernel.configs_timings.items()} == {
            id(configs[0]): 2.0, id(configs[1]): 1.0}
        assert (cache.stats.tuned, cache.stats.hits) == ((1, 0) if attempt == 0 else (0, 1))
    assert calls == [1, 1]


def test_match_candidates_pairs_ir_override_and_hook_configs_with_recorded_timings() -> None:
    from autotune_cache.proto import autotune_results_pb2 as pb
    from autotune_cache.triton.autotuner import match_candidates
    from autotune_cache.triton.configs import config_to_proto, winning_candidate

    plain = triton.Config({"B": 16}, num_warps=4)
    override = triton.Config({"B": 16}, num_warps=4, ir_override="/x/kernel.ttgir")
    other = triton.Config({"B": 32}, num_warps=4, pre_hook=lambda nargs: None)
    entry = pb.Entry(result=pb.Result(config=config_to_proto(override), time_ms=1.0, candidates=[
        pb.Timing(config=config_to_proto(c), time_ms=ms)
        for c, ms in ((plain, 3.0), (override, 1.0), (other, 2.0))]))
    pairs = match_candidates(entry, [other, plain, override])
    assert [(c, t.time_ms) for c, t in pairs] == [(plain, 3.0), (override, 1.0), (other, 2.0)]
    assert winning_candidate(entry, pairs) is override
