"""Issue 35's held-out shape: a library with a tuner of its own (tests/thirdparty/tp_src/tunerlib).

`tunerlib.rownorm` is built from a subclass of Triton's `Autotuner` with its own `run()` (as
flash-linear-attention's `fla_cache_autotune` is), `tunerlib.shift` by plain `@triton.autotune`.
Its own tests run under pytest with the plugin, and a plain script under AUTOTUNE_FLAGS, in
subprocesses of this interpreter on Triton's CPU interpreter:
- with the switch both kernels are dumped, then loaded strictly with 0 benchmarks;
- without it a strict load fails the tests, naming the kernels and the switch, and the summary
  says which kernels bypassed the cache and which loaded entries went unused;
- under `python -S` (no start-up hook) the flag is honoured where autotune_cache is imported
  first, and said to have come late where it is not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from autotune_cache.formats import load_results

ROOT = Path(__file__).resolve().parents[2]
SRC = Path(__file__).parent / "tp_src"
TESTS = SRC / "tunerlib_tests"
ROWNORM = "tunerlib.ops.rownorm_kernel"
SHIFT = "tunerlib.ops.shift_kernel"


def run(args: list[str], cwd: Path, flags: str = "", python: list[str] | None = None,
        **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("AUTOTUNE_FLAGS", "PYTEST_ADDOPTS", "PYTHONSTARTUP")}
    environment.update(PYTHONPATH=os.pathsep.join([str(ROOT), str(SRC)]), TRITON_INTERPRET="1",
                       AUTOTUNE_PROGRESS="0", AUTOTUNE_FLAGS=flags)
    environment.update(env)
    return subprocess.run([*(python or [sys.executable]), *args], cwd=cwd, env=environment,
                          text=True, capture_output=True, timeout=600)


def pytest_run(tmp_path: Path, *options: str) -> subprocess.CompletedProcess:
    # -p names the plugin: a checkout on PYTHONPATH has no entry point (the same plugin when
    # the package is installed too).
    return run(["-m", "pytest", "-q", "-p", "autotune_cache.pytest_plugin", "-p",
                "no:cacheprovider", "--rootdir", str(TESTS),
                str(TESTS / "test_tunerlib.py"), *options], tmp_path)


def summary(result: subprocess.CompletedProcess) -> str:
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith("=") and line.strip("= ") == "autotune_cache")
    return "\n".join(lines[start + 1:start + 4])


@pytest.fixture(scope="module")
def committed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tunerlib's suite dumped once with the switch: the file a team commits (read only)."""
    tmp_path = tmp_path_factory.mktemp("dump")
    dump = tmp_path / "tunerlib.autotune.textproto"
    cold = pytest_run(tmp_path, "--autotune-all-kernels", f"--autotune-dump={dump}")
    assert cold.returncode == 0, cold.stdout + cold.stderr
    assert sorted(e.key.kernel for e in load_results(dump)) == [ROWNORM, SHIFT]
    assert "BYPASSED" not in cold.stdout
    return dump


def test_with_the_switch_both_kernels_are_dumped_and_strictly_loaded(
        committed: Path, tmp_path: Path) -> None:
    dump = committed
    warm = pytest_run(tmp_path, "--autotune-all-kernels", f"--autotune-load={dump}",
                      "--autotune-require-complete")
    assert warm.returncode == 0, warm.stdout + warm.stderr
    text = summary(warm)
    assert "2 hits, 0 misses" in text and "0 benchmarks" in text, text
    assert "BYPASSED" not in warm.stdout


def test_without_the_switch_a_strict_load_fails_naming_the_kernels_and_the_switch(
        committed: Path, tmp_path: Path) -> None:
    dump = committed
    strict = pytest_run(tmp_path, f"--autotune-load={dump}", "--autotune-require-complete")
    assert strict.returncode != 0
    out = strict.stdout
    assert "2 failed" in out, out
    for kernel in (ROWNORM, SHIFT):
        assert f"Triton's own autotuner is tuning {kernel}" in out, out
    assert "--autotune-require-complete forbids tuning here" in out
    assert "Fix: route it through the cache: pytest --autotune-all-kernels" in out
    assert "0 active drivers" not in out  # Triton's own failure on the CPU, never reached
    text = summary(strict)
    assert f"BYPASSED: 2 autotuned kernel(s) ran on Triton's own autotuner, uncached (2 tuned " \
           f"there): {ROWNORM}, {SHIFT}" in text, text
    assert f"2 loaded entries went unused because their kernel stayed on Triton's autotuner: " \
           f"{ROWNORM} (1), {SHIFT} (1)" in text, text


HOOK_INSTALLED = (Path(sysconfig.get_paths()["purelib"]) / "autotune_cache_all_kernels.pth"
                  ).is_file()


@pytest.mark.skipif(not HOOK_INSTALLED, reason="needs the pip-installed package's start-up "
                    "hook (autotune_cache_all_kernels.pth in site-packages), as tools/dev.sh "
                    "setup installs it")
def test_a_plain_strict_process_without_the_switch_fails_naming_the_kernel(
        committed: Path, tmp_path: Path) -> None:
    dump = committed
    # The script never imports autotune_cache: the start-up hook watches Triton's tuners.
    result = run([str(TESTS / "drive.py")], tmp_path,
                 f"--load_autotune_results_from={dump} --require_complete_autotune_results")
    assert result.returncode != 0
    assert "UnroutedTuningError" in result.stderr, result.stderr
    assert f"Triton's own autotuner is tuning {ROWNORM}" in result.stderr
    assert "AUTOTUNE_FLAGS=--autotune_all_kernels" in result.stderr


def test_under_python_dash_s_the_flag_is_honoured_or_its_failure_said(tmp_path: Path) -> None:
    """No start-up hook runs: site-packages (torch, Triton) comes from PYTHONPATH, whose .pth
    files Python never processes."""
    site = os.pathsep.join(dict.fromkeys([sysconfig.get_paths()["purelib"],
                                          sysconfig.get_paths()["platlib"]]))
    path = os.pathsep.join([str(ROOT), str(SRC), site])
    dump = tmp_path / "first.autotune.textproto"
    first = run([str(TESTS / "drive.py")], tmp_path,
                f"--autotune_all_kernels --dump_autotune_results_to={dump}",
                python=[sys.executable, "-S"], PYTHONPATH=path, DRIVE_ORDER="package-first")
    assert first.returncode == 0, first.stderr
    assert sorted(e.key.kernel for e in load_results(dump)) == [ROWNORM, SHIFT]

    late = tmp_path / "late.autotune.textproto"
    result = run([str(TESTS / "drive.py")], tmp_path,
                 f"--autotune_all_kernels --dump_autotune_results_to={late}",
                 python=[sys.executable, "-S"], PYTHONPATH=path, DRIVE_ORDER="library-first")
    assert result.returncode == 0, result.stderr
    assert "--autotune_all_kernels took effect late" in result.stderr, result.stderr
    assert "python -S" in result.stderr and ROWNORM in result.stderr and SHIFT in result.stderr
    assert list(load_results(late)) == []
