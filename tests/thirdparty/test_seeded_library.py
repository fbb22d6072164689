"""A library whose tuner never calls Triton's `run()` (tests/thirdparty/tp_src/bucketlib), through
the pytest plugin as its users would run its own tests: dumped once with the switch, then loaded
strictly with 0 benchmarks by anyone (ours or the library's), from a fresh library database,
with the same outcome test by test. Subprocesses of this interpreter, on Triton's interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from autotune_cache.formats import load_results

ROOT = Path(__file__).resolve().parents[2]
SRC = Path(__file__).parent / "tp_src"
TESTS = SRC / "bucketlib_tests"


def pytest_run(tmp_path: Path, database: str, *options: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("AUTOTUNE_FLAGS", "PYTEST_ADDOPTS", "PYTHONSTARTUP")}
    environment.update(PYTHONPATH=os.pathsep.join([str(ROOT), str(SRC)]), TRITON_INTERPRET="1",
                       AUTOTUNE_PROGRESS="0", BUCKETLIB_DB=str(tmp_path / database))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "autotune_cache.pytest_plugin", "-p",
         "no:cacheprovider", "--rootdir", str(TESTS), str(TESTS / "test_bucketlib.py"),
         "--autotune-all-kernels", *options],
        cwd=tmp_path, env=environment, text=True, capture_output=True, timeout=600)


def outcomes(result: subprocess.CompletedProcess) -> list[str]:
    return sorted(line for line in result.stdout.splitlines()
                  if line.startswith(("PASSED ", "FAILED ")))


def test_a_library_tuner_is_dumped_then_strictly_loaded_with_no_benchmark(
        tmp_path: Path) -> None:
    committed = tmp_path / "bucketlib.autotune.textproto"
    plain = pytest_run(tmp_path, "plain.db")
    dumped = pytest_run(tmp_path, "dump.db", f"--autotune-dump={committed}")
    assert dumped.returncode == 0, dumped.stdout + dumped.stderr
    entries = load_results(committed)
    # 6 tests, 2 kernels, 4 buckets of the library's own key: one entry per bucket.
    assert sorted((e.key.kernel, e.key.problem) for e in entries) == [
        ("bucketlib.ops.halve_kernel", "memo=(224,torch.float32,torch.float32)"),
        ("bucketlib.ops.halve_kernel", "memo=(64,torch.float32,torch.float32)"),
        ("bucketlib.ops.scale_kernel", "memo=(128,torch.float32,torch.float32)"),
        ("bucketlib.ops.scale_kernel", "memo=(512,torch.float32,torch.float32)")]
    assert "2 kernel(s) seeded" in dumped.stdout and "BYPASSED" not in dumped.stdout
    inspected = subprocess.run([sys.executable, "-m", "autotune_cache", "inspect",
                                str(committed)], cwd=ROOT, text=True, capture_output=True)
    assert inspected.returncode == 0, inspected.stderr
    assert "seeded (picked by the library's own tuner" in inspected.stdout
    assert "  bucketlib.ops.scale_kernel: bucketlib.tuner.BucketTuner" in inspected.stdout

    strict = pytest_run(tmp_path, "fresh.db", f"--autotune-load={committed}",
                        "--autotune-require-complete")
    assert strict.returncode == 0, strict.stdout + strict.stderr
    assert "4 hits, 0 misses (0 stale), 0 benchmarks" in strict.stdout
    assert "2 kernel(s) seeded" in strict.stdout
    # Nothing reached the library's own database: it never tuned.
    assert not (tmp_path / "fresh.db").exists() or _picks(tmp_path / "fresh.db") == 0
    assert outcomes(strict) == outcomes(plain) == outcomes(dumped)
    assert len(outcomes(strict)) == 6


def _picks(database: Path) -> int:
    import sqlite3

    with sqlite3.connect(database) as db:
        return db.execute("SELECT COUNT(*) FROM picks").fetchone()[0]
