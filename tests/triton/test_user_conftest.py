"""A user's suite as users write it: a conftest.py that sets TRITON_INTERPRET when there is no GPU.

Triton reads TRITON_INTERPRET at its import and builds its language helpers (`tl.sum`, `tl.max`,
`tl.zeros`) for the mode it finds: imported before the conftest ran, they fail under the
interpreter with "Cannot call @triton.jit'd outside of the scope of a kernel". The package
must import Triton no earlier than the user's code does (autotune_cache/startup.py), in each
of the three setups the docs give for strict runs:

- `ini`: pytest.ini's addopts load the committed file with require-complete;
- `flags`: AUTOTUNE_FLAGS="--load_autotune_results_from=F --require_complete_autotune_results"
  (the README's own example), which the start-up hook sees at interpreter start;
- `all-kernels`: `--autotune-all-kernels`, a library's plain `@triton.autotune` routed through
  the cache.

The conftest sits in a sub-directory, so pytest imports it only while collecting, after its
plugins loaded: the latest a user's setting can come. Each setup dumps the committed file, then
loads it strictly (benchmarking nothing), from a process started with nothing exported.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CONFTEST = """
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
"""

KERNELS = """
import torch
import triton
import triton.language as tl

from autotune_cache.triton import autotune

CONFIGS = [triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})]


@autotune(configs=CONFIGS, key=["n"])
@triton.jit
def ours_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n, other=-float("inf"))
    tl.store(out_ptr, tl.max(x, axis=0))
    y = tl.where(offsets < n, x, 0.0)
    tl.store(out_ptr + 1, tl.sum(y, axis=0))


@triton.autotune(configs=CONFIGS, key=["n"], do_bench=lambda fn, quantiles=None: [1.0, 1.0, 1.0])
@triton.jit
def library_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    x = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc + x, axis=0))


def device():
    return "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
""".replace("import torch\n", "import os\n\nimport torch\n", 1)

TEST_OURS = """
import torch

from suite import kernels


def test_max_and_sum():
    x = torch.arange(10, dtype=torch.float32, device=kernels.device())
    out = torch.zeros(2, device=kernels.device())
    kernels.ours_kernel[(1,)](x, out, 10)
    assert out.tolist() == [9.0, 45.0]
"""

TEST_LIBRARY = """
import torch

from suite import kernels


def test_library_kernel():
    x = torch.ones(8, device=kernels.device())
    out = torch.zeros(1, device=kernels.device())
    kernels.library_kernel[(1,)](x, out, 8)
    assert out.tolist() == [8.0]
"""


def _project(root: Path, ini: str = "") -> Path:
    suite = root / "suite"
    suite.mkdir(parents=True)
    (suite / "__init__.py").write_text("")
    (suite / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (suite / "kernels.py").write_text(textwrap.dedent(KERNELS))
    (suite / "test_ours.py").write_text(textwrap.dedent(TEST_OURS))
    (suite / "test_library.py").write_text(textwrap.dedent(TEST_LIBRARY))
    (root / "pytest.ini").write_text("[pytest]\n" + ini)
    return root


def _pytest(root: Path, *args: str, flags: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TRITON_", "AUTOTUNE_", "PYTEST_"))}
    env["TRITON_CACHE_DIR"] = str(root / "triton-cache")
    # The project, then this checkout's package (whatever the venv's install points at).
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(Path(__file__).parents[2])])
    if flags:
        env["AUTOTUNE_FLAGS"] = flags
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         *args], cwd=root, env=env, capture_output=True, text=True, timeout=600)


def _passed(proc: subprocess.CompletedProcess[str]) -> str:
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "Cannot call @triton.jit'd outside of the scope of a kernel" not in output
    return output


@pytest.mark.parametrize("setup", ["ini", "flags", "all-kernels"])
def test_a_conftest_setting_triton_interpret_holds(setup, tmp_path):
    results = "suite.autotune.textproto"
    if setup == "ini":
        root = _project(tmp_path, f"addopts = --autotune-load={results} "
                                  "--autotune-require-complete\n")
        _passed(_pytest(root, f"--autotune-dump={results}", "-o", "addopts=",
                        "suite/test_ours.py"))
        strict = _passed(_pytest(root, "suite/test_ours.py"))
    elif setup == "flags":
        root = _project(tmp_path)
        _passed(_pytest(root, "suite/test_ours.py",
                        flags=f"--dump_autotune_results_to={results}"))
        strict = _passed(_pytest(
            root, "suite/test_ours.py",
            flags=f"--load_autotune_results_from={results} --require_complete_autotune_results"))
    else:
        root = _project(tmp_path)
        _passed(_pytest(root, "--autotune-all-kernels", f"--autotune-dump={results}"))
        strict = _passed(_pytest(root, "--autotune-all-kernels", f"--autotune-load={results}",
                                 "--autotune-require-complete"))
    assert (root / results).exists()
    assert "passed" in strict
    assert "MissingResultError" not in strict and "UnroutedTuningError" not in strict
