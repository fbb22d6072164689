"""Strict mode is total even where the error is caught: a library that falls back to torch when
its kernel fails (`except Exception`) swallows the UnroutedTuningError of a kernel left on
Triton's own autotuner; the strict run must fail all the same, naming the kernel (issue 49)."""

from __future__ import annotations

import textwrap

from tests.triton.test_user_conftest import _passed, _project, _pytest

LIBRARY = """
import torch

from suite import kernels


def total(x):
    out = torch.zeros(1, device=x.device)
    try:
        kernels.library_kernel[(1,)](x, out, x.numel())
    except Exception:  # a library's fallback: torch when the kernel cannot run
        return x.sum()
    return out[0]


def test_falls_back_quietly():
    x = torch.ones(8, device=kernels.device())
    assert total(x).item() == 8.0
"""


def test_a_caught_unrouted_tuning_error_still_fails_the_strict_run(tmp_path):
    root = _project(tmp_path)
    (root / "suite" / "test_library.py").write_text(textwrap.dedent(LIBRARY))
    results = "suite.autotune.textproto"
    _passed(_pytest(root, f"--autotune-dump={results}", "suite/test_ours.py"))
    proc = _pytest(root, f"--autotune-load={results}", "--autotune-require-complete",
                   "suite/test_library.py")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "FAILED suite/test_library.py::test_falls_back_quietly" in out
    assert "caught the UnroutedTuningError of a kernel left on Triton's own autotuner" in out
    assert "suite.kernels.library_kernel" in out
