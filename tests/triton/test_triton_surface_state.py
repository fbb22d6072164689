"""More of the `triton.autotune` surface against Triton's own Autotuner (issue 21, item 5), and
`cache_results=True` (item 4). Split from test_triton_surface.py, whose helpers it uses.

What libraries read after a launch (`.best_config`, `.configs`, `.cache`, `.nargs`; Liger reads
`.best_config` to drive another kernel), `isinstance(kernel, Autotuner)` (what
`torch.library.wrap_triton` checks), and `triton.Config` subclasses, each with the same kernel
built under both decorators on the CPU interpreter and the same deterministic do_bench."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
import triton
from triton.runtime.autotuner import Autotuner as TritonAutotuner

from autotune_cache.triton import engine, install, uninstall
from tests.triton import kernels
from tests.triton.test_triton_surface import DECORATORS, OrderedBench, grid_1d


def tuned(decorator: Any, bench: OrderedBench, configs: list[triton.Config] | None = None) -> Any:
    return decorator(configs=configs or kernels.configs(16, 32, 64), key=["n"],
                     do_bench=bench)(kernels.add_kernel)


def launch(kernel: Any, n: int, dtype: torch.dtype = torch.float32) -> None:
    x = torch.rand(n, dtype=dtype)
    out = torch.empty_like(x)
    kernel[grid_1d(n)](x, x, out, n)
    torch.testing.assert_close(out, x + x)


def test_best_config_configs_cache_and_nargs_read_like_tritons(use_cache) -> None:
    use_cache()
    state = {}
    for name, decorator in DECORATORS.items():
        kernel = tuned(decorator, OrderedBench([3.0, 1.0, 2.0]))
        launch(kernel, 64)
        launch(kernel, 80, torch.float64)
        state[name] = {
            "best": (kernel.best_config.kwargs, kernel.best_config.num_warps,
                     kernel.best_config.num_stages),
            "best_is_a_candidate": any(kernel.best_config is c for c in kernel.configs),
            "configs": [c.kwargs for c in kernel.configs],
            "cache": {key: config.kwargs for key, config in kernel.cache.items()},
            "nargs": kernel.nargs,
        }
    assert state["ours"] == state["triton"]
    assert state["ours"]["best"] == ({"BLOCK_SIZE": 32}, 4, 2)
    assert len(state["ours"]["cache"]) == 2  # one memo per (key, dtypes), as Triton's


def test_isinstance_of_tritons_autotuner_and_wrap_triton(use_cache) -> None:
    use_cache()
    for name, decorator in DECORATORS.items():
        kernel = tuned(decorator, OrderedBench([1.0]))
        assert isinstance(kernel, TritonAutotuner), name
        wrap_triton = getattr(torch.library, "wrap_triton", None)
        if wrap_triton is not None:  # torch >= 2.6: it accepts JITFunction or Autotuner only
            assert wrap_triton(kernel) is not None, name


class NamedConfig(triton.Config):
    """A Config subclass carrying a label, as some libraries keep one."""

    def __init__(self, kwargs: dict[str, Any], label: str, **options: Any) -> None:
        super().__init__(kwargs, **options)
        self.label = label


def test_config_subclasses_are_kept_and_picked_like_tritons(use_cache) -> None:
    use_cache()
    picked = {}
    for name, decorator in DECORATORS.items():
        configs = [NamedConfig({"BLOCK_SIZE": b}, f"block-{b}", num_warps=4) for b in (16, 32)]
        kernel = tuned(decorator, OrderedBench([2.0, 1.0]), configs)
        launch(kernel, 100)
        assert isinstance(kernel.best_config, NamedConfig), name
        picked[name] = kernel.best_config.label
    assert picked == {"triton": "block-32", "ours": "block-32"}


# ----- cache_results (issue 21, item 4) -------------------------------------------------------

@pytest.fixture
def triton_cache(monkeypatch: pytest.MonkeyPatch, tmp_path) -> Any:
    """Triton's cache directory in tmp_path; the directory where results persist there."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.delenv("TRITON_CACHE_AUTOTUNING", raising=False)
    monkeypatch.setattr(engine, "_honoured", set())
    return tmp_path / "triton" / engine.CACHE_RESULTS_DIR


@pytest.fixture
def routed(triton_cache) -> Any:
    """The switch on, Triton's cache directory in tmp_path; off again afterwards."""
    install()
    yield triton_cache
    uninstall()


def routed_add(**kwargs: Any) -> Any:
    return triton.autotune(configs=kernels.configs(16, 32), key=["n"],
                           **kwargs)(kernels.add_kernel)


def _a_second_process_benchmarks_nothing(use_cache, fake, make) -> None:
    """A later process (a new process cache) finds the entry on disk: no benchmark."""
    again = use_cache()
    engine._honoured.clear()
    fake({16: 2.0, 32: 1.0}, fail={16: "benchmarked", 32: "benchmarked"})
    out, expected = kernels.launch_add(make())
    torch.testing.assert_close(out, expected)
    assert again.stats.hits == 1 and again.stats.benchmarks == 0


@pytest.mark.parametrize("asked", ["argument", "TRITON_CACHE_AUTOTUNING"])
def test_our_decorator_keeps_cache_results_per_machine_as_triton_does(
        use_cache, fake, triton_cache, monkeypatch, caplog, asked) -> None:
    """Issue 52: a user switching from `triton.autotune(cache_results=True)` (or
    TRITON_CACHE_AUTOTUNING=1) loses nothing: with no flags, the results persist in Triton's
    cache location and a second run benchmarks nothing."""
    kwargs = {"cache_results": True} if asked == "argument" else {}
    if asked != "argument":
        monkeypatch.setenv("TRITON_CACHE_AUTOTUNING", "1")
    cache = use_cache()
    fake({16: 2.0, 32: 1.0})
    with caplog.at_level(logging.INFO, logger="autotune_cache.triton.engine"):
        first = kernels.tuned_add(blocks=(16, 32), **kwargs)
        out, expected = kernels.launch_add(first)
        kernels.launch_add(kernels.tuned_add(blocks=(16, 32), **kwargs), n=300)
    torch.testing.assert_close(out, expected)
    assert first.cache_results is False  # Triton's own JSON file is not written
    messages = [r.getMessage() for r in caplog.records if "cache_results" in r.getMessage()]
    assert len(messages) == 1 and str(triton_cache) in messages[0]
    assert cache.settings.cache_dir == triton_cache and list(triton_cache.glob("*.textproto"))
    _a_second_process_benchmarks_nothing(
        use_cache, fake, lambda: kernels.tuned_add(blocks=(16, 32), **kwargs))


def test_routed_cache_results_keeps_results_under_tritons_cache_dir(use_cache, fake,
                                                                    routed) -> None:
    cache = use_cache()
    fake({16: 2.0, 32: 1.0})
    kernel = routed_add(cache_results=True)
    out, expected = kernels.launch_add(kernel)
    torch.testing.assert_close(out, expected)
    assert cache.settings.cache_dir == routed
    assert any(t.name == "directory" for t in cache.tiers)
    assert list(routed.glob("*.textproto"))  # the entry is on disk
    _a_second_process_benchmarks_nothing(use_cache, fake,
                                         lambda: routed_add(cache_results=True))


def test_routed_cache_results_follows_the_triton_env_var_too(use_cache, fake, routed,
                                                             monkeypatch) -> None:
    cache = use_cache()
    fake({16: 2.0, 32: 1.0})
    monkeypatch.setenv("TRITON_CACHE_AUTOTUNING", "1")
    kernels.launch_add(routed_add())
    assert cache.settings.cache_dir == routed


def test_flags_that_name_where_results_live_decide_instead(use_cache, fake, routed,
                                                           tmp_path) -> None:
    cache = use_cache(dump_to=tmp_path / "dump.textproto")
    fake({16: 2.0, 32: 1.0})
    kernels.launch_add(routed_add(cache_results=True))
    assert cache.settings.cache_dir is None
    assert not any(t.name == "directory" for t in cache.tiers)
    plain = use_cache()
    kernels.launch_add(routed_add(), n=300)  # no cache_results asked: nothing added either
    assert plain.settings.cache_dir is None


