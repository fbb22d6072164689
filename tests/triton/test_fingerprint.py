"""Key parts: source fingerprints, candidate-list fingerprints, config round trips, problems."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path
from types import ModuleType

import pytest
import torch
import triton

from autotune_cache.triton.configs import (
    canonical_config,
    canonical_proto_config,
    config_from_proto,
    config_to_proto,
    configs_fingerprint,
)
from autotune_cache.triton.fingerprint import source_fingerprint
from autotune_cache.triton.problem import problem_key

KERNEL_MODULE = """
import triton
import triton.language as tl

SCALE = tl.constexpr({scale})


@triton.jit
def helper(x):
    return x * {helper_factor} * SCALE


@triton.jit
def kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, helper(tl.load(x_ptr + offs)){kernel_tail})
"""


def _load(tmp_path: Path, name: str, prefix: str = "", scale: int = 2, helper_factor: int = 1,
          kernel_tail: str = "") -> ModuleType:
    path = tmp_path / f"{name}.py"
    path.write_text(prefix + textwrap.dedent(KERNEL_MODULE.format(
        scale=scale, helper_factor=helper_factor, kernel_tail=kernel_tail)))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_source_fingerprint_ignores_position_but_not_code(tmp_path: Path) -> None:
    base = source_fingerprint(_load(tmp_path, "base").kernel)
    moved = _load(tmp_path, "moved", prefix="# a comment\nimport os\n\n\n")
    assert source_fingerprint(moved.kernel) == base
    assert source_fingerprint(_load(tmp_path, "body", kernel_tail=" + 1").kernel) != base
    assert source_fingerprint(_load(tmp_path, "dep", helper_factor=3).kernel) != base
    assert source_fingerprint(_load(tmp_path, "const", scale=4).kernel) != base


CONSTANTS_MODULE = """
import types

import triton
import triton.language as tl

cfg = types.ModuleType("cfg")
cfg.FACTOR = {module_factor}


class Consts:
    OFFSET = {class_offset}


def make_kernel(scale):
    @triton.jit
    def closure_kernel(x_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) * cfg.FACTOR * scale + Consts.OFFSET)

    return closure_kernel
"""


def _load_constants(tmp_path: Path, name: str, module_factor: int = 2, class_offset: float = 0.5,
                    ) -> ModuleType:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(CONSTANTS_MODULE.format(
        module_factor=module_factor, class_offset=class_offset)))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_module_class_and_closure_constants_are_part_of_the_fingerprint(tmp_path: Path) -> None:
    base = source_fingerprint(_load_constants(tmp_path, "c_base").make_kernel(3))
    assert source_fingerprint(_load_constants(tmp_path, "c_same").make_kernel(3)) == base
    assert source_fingerprint(_load_constants(tmp_path, "c_closure").make_kernel(4)) != base
    assert source_fingerprint(
        _load_constants(tmp_path, "c_module", module_factor=5).make_kernel(3)) != base
    assert source_fingerprint(
        _load_constants(tmp_path, "c_class", class_offset=1.5).make_kernel(3)) != base


@pytest.mark.parametrize("interpret", ["0", "1"])
def test_jit_source_is_the_one_compiled_not_the_file_edited_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interpret: str) -> None:
    """A JITFunction compiles the `.src` it read when decorated; the fingerprint hashes that text,
    equal to what the interpreter path (which reads the file) hashes for an unedited file."""
    monkeypatch.setenv("TRITON_INTERPRET", interpret)  # read by @triton.jit at decoration
    module = _load(tmp_path, f"edited_{interpret}")
    before = source_fingerprint(module.kernel)
    assert (type(module.kernel).__name__ == "JITFunction") == (interpret == "0")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert before == source_fingerprint(_load(tmp_path, f"fresh_{interpret}").kernel)

    path = Path(module.__file__)
    text = path.read_text()
    assert "(x_ptr + offs)))" in text
    path.write_text(text.replace("(x_ptr + offs)))", "(x_ptr + offs)) + 1)") + "\n# edited\n")
    after = source_fingerprint(module.kernel)
    if interpret == "0":
        assert after == before  # what was compiled, not the file on disk
    else:
        assert after != before  # the interpreter runs the file as it is at first launch


def test_configs_fingerprint_is_order_independent_and_content_sensitive() -> None:
    a = triton.Config({"B": 16}, num_warps=4, num_stages=2)
    b = triton.Config({"B": 32}, num_warps=8, num_stages=3)
    assert configs_fingerprint([a, b]) == configs_fingerprint([b, a])
    assert configs_fingerprint([a, b]) != configs_fingerprint([a])
    c = triton.Config({"B": 32}, num_warps=4, num_stages=3)
    assert configs_fingerprint([a, b]) != configs_fingerprint([a, c])


@pytest.mark.parametrize("config", [
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "SPLIT": True, "ALPHA": 0.5, "MODE": "fast"},
                  num_warps=8, num_stages=4, num_ctas=2, maxnreg=128),
    triton.Config({}, num_warps=2, num_stages=1),
])
def test_config_round_trips_through_the_results_file(config: triton.Config) -> None:
    msg = config_to_proto(config)
    assert [p.name for p in msg.params] == sorted(config.kwargs)
    back = config_from_proto(msg)
    assert back.all_kwargs() == config.all_kwargs()
    assert canonical_proto_config(msg) == canonical_config(config)


def test_problem_key_mirrors_tritons_key() -> None:
    a = torch.empty(4, 8, dtype=torch.float16)
    args = {"a_ptr": a, "b_ptr": a.float(), "M": 4, "N": 8, "alpha": 0.5, "flag": True}
    names = list(args) + ["BLOCK"]
    problem = problem_key(names, ["M", "N", "missing"], {**args, "grid": (1,), "BLOCK": 16})
    assert problem == {"M": 4, "N": 8, "a_ptr": "float16", "b_ptr": "float32"}
    assert problem_key(names, ["a_ptr"], args)["a_ptr"] == "float16[4x8]"


def test_source_fingerprint_follows_the_key_scheme(tmp_path: Path, monkeypatch) -> None:
    from autotune_cache.triton import fingerprint

    kernel = _load(tmp_path, "scheme").kernel
    base = source_fingerprint(kernel)
    monkeypatch.setattr(fingerprint, "KEY_SCHEME", 2)
    assert source_fingerprint(kernel) != base  # a new recipe never matches an old entry
