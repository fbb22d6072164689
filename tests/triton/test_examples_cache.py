"""The committed example caches are complete for the CPU interpreter with the Triton release they
were tuned with (3.6.0): every example test passes loading them with
--require_complete_autotune_results, benchmarking nothing. Fails when a kernel or its candidate
list changes without `<kernel>_test.autotune.textproto` being regenerated.

Under any other Triton release (the version-matrix stage of tools/dev.sh runs the newest), the
same caches must be reported as stale, naming the toolchain difference, and never crash: with
--require_complete_autotune_results every lookup fails with that message, and without it the
examples re-tune and pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import triton

from autotune_cache.formats import load_results

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "triton"
NAMES = ("vector_add", "fused_softmax", "layer_norm", "matmul")
CACHES = [EXAMPLES / f"{name}_test.autotune.textproto" for name in NAMES]


def _committed_triton_versions() -> set[str]:
    """The Triton versions the committed interpreter entries were tuned with."""
    return {v.version for cache in CACHES for entry in load_results(cache)
            if entry.key.device.arch == "interpreter"
            for v in entry.key.toolchain if v.name == "triton"}


def _run_examples(tmp_path: Path, flags: str) -> tuple[subprocess.CompletedProcess, dict]:
    env = dict(os.environ)
    env.update(
        TRITON_INTERPRET="1",
        AUTOTUNE_FLAGS="--load_autotune_results_from=" + ",".join(map(str, CACHES)) + flags,
        TEST_UNDECLARED_OUTPUTS_DIR=str(tmp_path),
        AUTOTUNE_REGEN_HINT="see docs/triton.md, 'Examples and their committed caches'",
        PYTHONPATH=os.pathsep.join(filter(None, [str(EXAMPLES), str(ROOT),
                                                 env.get("PYTHONPATH")])),
    )
    code = ("import sys, unittest; s = unittest.defaultTestLoader.loadTestsFromNames("
            f"{[n + '_test' for n in NAMES]!r}); "
            "sys.exit(0 if unittest.TextTestRunner().run(s).wasSuccessful() else 1)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    report = json.loads((tmp_path / "autotune_report.json").read_text())
    return proc, report


@pytest.mark.slow
def test_examples_pass_from_committed_caches_without_tuning(tmp_path: Path) -> None:
    assert all(c.exists() for c in CACHES)
    committed = _committed_triton_versions()
    if committed != {triton.__version__}:
        pytest.skip(f"the caches are keyed to Triton {sorted(committed)}, this is "
                    f"{triton.__version__}: see the stale test below")
    proc, report = _run_examples(tmp_path, " --require_complete_autotune_results")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert report["misses"] == 0 and report["benchmarks"] == 0
    assert report["hits"] == 8  # two problems per example


@pytest.mark.slow
def test_another_triton_reports_the_committed_caches_stale(tmp_path: Path) -> None:
    committed = _committed_triton_versions()
    if committed == {triton.__version__}:
        pytest.skip(f"Triton {triton.__version__} is the version the caches are keyed to")
    (old,) = committed
    proc, report = _run_examples(tmp_path / "strict", " --require_complete_autotune_results")
    assert proc.returncode == 1
    assert proc.stderr.count("errors.MissingResultError: autotune_cache: no tuned result") == 8, \
        proc.stderr[-4000:]
    assert f"toolchain [triton={old}] != [triton={triton.__version__}]" in proc.stderr
    assert (report["hits"], report["misses"], report["stale"]) == (0, 8, 8)

    proc, report = _run_examples(tmp_path / "retune", "")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (report["hits"], report["misses"], report["stale"], report["tuned"]) == (0, 8, 8, 8)
