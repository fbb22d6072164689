"""The Starlark <-> Python contract: every name the macro gives its targets (tags, the dump file,
environment variables, target suffixes, path prefixes) is spelled the same on both sides.

rules/private/constants.bzl is the one Starlark source; the Python copies live in the tools,
the test wrapper and the library, which cannot load Starlark. A rename on one side fails here
instead of silently breaking `regen_cache`, the wrapper or the regen hint.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

from autotune_cache.config import flags as library_flags
from autotune_cache.xla import jax_test_helper

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import regen_bazel  # noqa: E402


def starlark_constants(path: Path) -> dict[str, str]:
    """The top-level `NAME = "string"` (or string concatenation) assignments of a .bzl file.

    Starlark's assignment syntax is Python's, so Python's parser reads them; anything that is
    not a plain string constant is skipped."""
    constants: dict[str, str] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                node.targets[0], ast.Name):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            if isinstance(value, str):
                constants[node.targets[0].id] = value
    return constants


STARLARK = starlark_constants(REPO / "rules/private/constants.bzl")
DUMP_TEST = starlark_constants(REPO / "rules/private/dump_test.bzl")


def _wrapper():
    spec = importlib.util.spec_from_file_location(
        "rules_autotune_test_wrapper", REPO / "rules/private/rules_autotune_test_wrapper.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


WRAPPER = _wrapper()

PAIRS = [
    # (Starlark name, Python value, where the Python copy lives)
    ("AUTOTUNED_TAG", regen_bazel.AUTOTUNED_TAG, "tools/regen_bazel.py"),
    ("DUMP_TAG", regen_bazel.DUMP_TAG, "tools/regen_bazel.py"),
    ("CACHE_PATH_TAG_PREFIX", regen_bazel.CACHE_PATH_TAG_PREFIX, "tools/regen_bazel.py"),
    ("DUMP_FILE_NAME", regen_bazel.DUMP_FILE_NAME, "tools/regen_bazel.py"),
    ("DUMP_TARGET_SUFFIX", regen_bazel.DUMP_TARGET_SUFFIX, "tools/regen_bazel.py"),
    ("TEST_MAIN_ENV", WRAPPER.TEST_MAIN_ENV, "rules/private/rules_autotune_test_wrapper.py"),
    ("DUMP_TARGET_ENV", WRAPPER.DUMP_TARGET_ENV, "rules/private/rules_autotune_test_wrapper.py"),
    ("SHARD_TEST_CASES_ENV", WRAPPER.SHARD_TEST_CASES_ENV,
     "rules/private/rules_autotune_test_wrapper.py"),
    ("RUNNER_ENV", WRAPPER.RUNNER_ENV, "rules/private/rules_autotune_test_wrapper.py"),
    ("MACRO_FLAGS_ENV", library_flags.MACRO_ENV_VAR, "autotune_cache/config/flags.py"),
    ("MACRO_FLAGS_ENV", WRAPPER.MACRO_FLAGS_ENV, "rules/private/rules_autotune_test_wrapper.py"),
    ("MACRO_XLA_FLAGS_ENV", WRAPPER.MACRO_XLA_FLAGS_ENV,
     "rules/private/rules_autotune_test_wrapper.py"),
    ("XLA_FLAGS_ENV", WRAPPER.XLA_FLAGS_ENV, "rules/private/rules_autotune_test_wrapper.py"),
    ("AUTOTUNE_FLAGS_ENV", WRAPPER.AUTOTUNE_FLAGS_ENV,
     "rules/private/rules_autotune_test_wrapper.py"),
    ("ENV_ARG_PREFIX", WRAPPER.ENV_ARG_PREFIX, "rules/private/rules_autotune_test_wrapper.py"),
    ("REGEN_HINT_ENV", library_flags.REGEN_HINT_ENV, "autotune_cache/config/flags.py"),
    ("AUTOTUNE_FLAGS_ENV", library_flags.ENV_VAR, "autotune_cache/config/flags.py"),
    ("WORKSPACE_PREFIX", library_flags.WORKSPACE_PREFIX, "autotune_cache/config/flags.py"),
    ("OUTPUTS_PREFIX", library_flags.OUTPUTS_PREFIX, "autotune_cache/config/flags.py"),
    ("XLA_FLAGS_ENV", jax_test_helper.XLA_FLAGS_ENV, "autotune_cache/xla/jax_test_helper.py"),
]


@pytest.mark.parametrize(("name", "python_value", "where"), PAIRS,
                         ids=[f"{p[0]}-{p[2]}" for p in PAIRS])
def test_python_copy_matches_the_starlark_constant(name: str, python_value: str,
                                                   where: str) -> None:
    assert name in STARLARK, f"rules/private/constants.bzl no longer defines {name}"
    assert python_value == STARLARK[name], (
        f"{where} spells {name} {python_value!r}, rules/private/constants.bzl {STARLARK[name]!r}")


def test_backend_tag_prefix_matches_regen_bazel() -> None:
    assert DUMP_TEST["BACKEND_TAG_PREFIX"] == regen_bazel.BACKEND_TAG_PREFIX


def test_xla_default_dump_is_the_dump_file_the_macro_reads_back() -> None:
    assert STARLARK["OUTPUTS_PREFIX"] + STARLARK["DUMP_FILE_NAME"] == jax_test_helper.DEFAULT_DUMP


def test_every_python_copy_is_checked() -> None:
    """A new constant in constants.bzl must get its Python counterpart added above (or be
    Starlark-only on purpose: REGEN_TARGET_SUFFIX, which only the macro's hint uses)."""
    checked = {name for name, _, _ in PAIRS} | {"REGEN_TARGET_SUFFIX"}
    assert set(STARLARK) == checked, set(STARLARK) ^ checked


def test_one_dump_target_suffix() -> None:
    """The tools have one name for the `.dump` suffix (regen_diff's DUMP_SUFFIX is the dump
    file's extension, a different thing, and is checked against the dump file name)."""
    import regen_diff

    assert not hasattr(regen_bazel, "DUMP_SUFFIX")
    extension = getattr(regen_diff, "DUMP_SUFFIX", None)
    if extension is not None:
        assert STARLARK["DUMP_FILE_NAME"].endswith(extension)
