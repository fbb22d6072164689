"""launch.py: a config's launch keywords leave out the options the backend would fill in."""

from __future__ import annotations

import types

import pytest
import triton

from autotune_cache.triton import device, launch


@pytest.fixture
def cuda_like_backend(monkeypatch):
    """A stand-in for a GPU backend whose defaults are CUDA's (num_warps 4, num_ctas 1,
    num_stages 3, no maxnreg); counts how often its defaults are read."""
    import triton.compiler.compiler as compiler
    from triton.runtime import driver

    parsed = []

    class Backend:
        def parse_options(self, options):
            parsed.append(dict(options))
            return types.SimpleNamespace(num_warps=4, num_ctas=1, num_stages=3, maxnreg=None)

    class Driver:
        @staticmethod
        def get_current_target():
            return ("cuda", 90, 32)

    monkeypatch.setattr(device, "interpreter_active", lambda: False)
    monkeypatch.setattr(driver, "_active", Driver())
    monkeypatch.setattr(compiler, "make_backend", lambda target: Backend())
    monkeypatch.setattr(launch, "_defaults", {})
    return parsed


def test_options_equal_to_the_backends_defaults_are_left_out(cuda_like_backend):
    config = triton.Config({"BLOCK": 64}, num_warps=8, num_stages=3, num_ctas=1)
    assert launch.launch_kwargs(config) == {"BLOCK": 64, "num_warps": 8}
    assert launch.launch_kwargs(triton.Config({"BLOCK": 32}, maxnreg=128)) == {
        "BLOCK": 32, "maxnreg": 128}
    assert cuda_like_backend == [{}]  # read once per target


def test_every_option_is_kept_where_the_defaults_cannot_be_read(monkeypatch):
    import triton.compiler.compiler as compiler

    def broken(target):
        raise AttributeError("make_backend moved")

    monkeypatch.setattr(device, "interpreter_active", lambda: False)
    monkeypatch.setattr(compiler, "make_backend", broken)
    monkeypatch.setattr(launch, "_defaults", {})
    config = triton.Config({"BLOCK": 64}, num_warps=4)
    assert launch.launch_kwargs(config) == config.all_kwargs()


def test_under_the_interpreter_the_config_is_launched_as_given():
    config = triton.Config({"BLOCK": 64}, num_warps=4, num_stages=2)
    assert launch.launch_kwargs(config) == config.all_kwargs()


def test_the_full_path_works_out_a_configs_launch_keywords_once(use_cache, fake, monkeypatch):
    """A kernel with one config takes the full path on every launch: the backend's defaults are
    read for its config once, not per launch (each read asks the driver for the target)."""
    import torch

    from autotune_cache.triton import autotuner
    from tests.triton import kernels

    use_cache()
    fake({64: 1.0})
    calls = []

    def counted(config):
        calls.append(config)
        return launch.launch_kwargs(config)

    monkeypatch.setattr(autotuner, "launch_kwargs", counted)
    kernel = kernels.tuned_add(blocks=(64,))
    for _ in range(3):
        out, expected = kernels.launch_add(kernel, n=100)
        torch.testing.assert_close(out, expected)
    assert calls == [kernel.configs[0]]
