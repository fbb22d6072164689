"""The committed example caches are complete for the CPU interpreter: every example test passes
loading them with --require_complete_autotune_results, benchmarking nothing. Fails when a kernel
or its candidate list changes without `<kernel>_test.autotune.textproto` being regenerated."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "triton"
NAMES = ("vector_add", "fused_softmax", "layer_norm", "matmul")


@pytest.mark.slow
def test_examples_pass_from_committed_caches_without_tuning(tmp_path: Path) -> None:
    caches = [EXAMPLES / f"{name}_test.autotune.textproto" for name in NAMES]
    assert all(c.exists() for c in caches)
    env = dict(os.environ)
    env.update(
        TRITON_INTERPRET="1",
        AUTOTUNE_FLAGS=("--load_autotune_results_from=" + ",".join(str(c) for c in caches)
                        + " --require_complete_autotune_results"),
        TEST_UNDECLARED_OUTPUTS_DIR=str(tmp_path),
        AUTOTUNE_REGEN_HINT="see docs/triton.md, 'Examples and their committed caches'",
        PYTHONPATH=os.pathsep.join(filter(None, [str(EXAMPLES), str(ROOT),
                                                 env.get("PYTHONPATH")])),
    )
    code = ("import sys, unittest; s = unittest.defaultTestLoader.loadTestsFromNames("
            f"{[n + '_test' for n in NAMES]!r}); "
            "sys.exit(0 if unittest.TextTestRunner().run(s).wasSuccessful() else 1)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads((tmp_path / "autotune_report.json").read_text())
    assert report["misses"] == 0 and report["benchmarks"] == 0
    assert report["hits"] == 8  # two problems per example
