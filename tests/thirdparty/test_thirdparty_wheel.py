"""Issue 21, "Prove it" on the CPU interpreter: a third-party wheel's kernels through the switch.

tp_kernels (tests/thirdparty/tp_src) is built into a real wheel and installed by pip into a
fresh virtual environment. Its four kernels use the four spellings of Triton's decorator. The
venv sees this interpreter's torch and Triton through a `_deps.pth`, and autotune_cache through
PYTHONPATH with its start-up hook `autotune_cache_all_kernels.pth` in site-packages, as our
wheel installs it (tests/triton/test_install_pth.py checks the wheel itself). Routed through
the pytest option and through AUTOTUNE_FLAGS in a plain process that starts a subprocess, each
dumps and then loads strictly with 0 benchmarks; the import-order warning names the kernels.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from autotune_cache.formats import load_results

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SRC = Path(__file__).parent / "tp_src"
PTH = ROOT / "autotune_cache" / "triton" / "autotune_cache_all_kernels.pth"
KERNELS = {f"tp_kernels.ops.{k}_kernel" for k in ("scale", "add", "square", "negate")}


def build_wheel(out: Path) -> Path:
    """tp_kernels-1.0 as a py3-none-any wheel (METADATA, WHEEL, RECORD with hashes)."""
    wheel = out / "tp_kernels-1.0-py3-none-any.whl"
    info = "tp_kernels-1.0.dist-info"
    files = {f"tp_kernels/{p.name}": p.read_bytes()
             for p in sorted((SRC / "tp_kernels").glob("*.py"))}
    files[f"{info}/METADATA"] = b"Metadata-Version: 2.1\nName: tp_kernels\nVersion: 1.0\n"
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                              b"Tag: py3-none-any\n")
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return wheel


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the tp_kernels wheel pip-installed; returns its python."""
    base = tmp_path_factory.mktemp("tp")
    wheel = build_wheel(base)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base / "venv")],
                   check=True, timeout=120)
    python = base / "venv" / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, timeout=300)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig."
                                "get_paths()['purelib'])"], check=True, text=True,
                               capture_output=True).stdout.strip())
    assert (site / "tp_kernels" / "ops.py").is_file()
    paths = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                           *(p for p in sys.path if p.endswith(("site-packages",
                                                                "dist-packages")))])
    (site / "_deps.pth").write_text("\n".join(paths) + "\n")  # sorts before our hook
    (site / PTH.name).write_bytes(PTH.read_bytes())
    return python


def run(python: Path, args: list[str], cwd: Path, flags: str = "",
        **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("AUTOTUNE_FLAGS", "PYTEST_ADDOPTS", "PYTHONSTARTUP")}
    environment.update(PYTHONPATH=str(ROOT), TRITON_INTERPRET="1", AUTOTUNE_PROGRESS="0",
                       AUTOTUNE_FLAGS=flags)
    environment.update(env)
    result = subprocess.run([str(python), *args], cwd=cwd, env=environment, text=True,
                            capture_output=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def dumped_kernels(path: Path) -> set[str]:
    return {entry.key.kernel for entry in load_results(path)}


def pytest_pass(venv: Path, tmp_path: Path, name: str, *options: str) -> dict:
    """tp_kernels' own tests under pytest with the plugin; the probe's record of the run."""
    probe = tmp_path / f"{name}.json"
    run(venv, ["-m", "pytest", "-p", "autotune_cache.pytest_plugin", "-p", "suite_probe", "-q",
               "-p", "no:cacheprovider", "--rootdir", str(SRC / "tp_tests"),
               str(SRC / "tp_tests"), *options], cwd=tmp_path,
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "bench")]),
        SUITE_PROBE_OUT=str(probe))
    return json.loads(probe.read_text())


def test_the_pytest_option_routes_the_wheel_dump_then_strict_load(venv: Path,
                                                                    tmp_path: Path) -> None:
    dump = tmp_path / "tp.autotune.textproto"
    cold = pytest_pass(venv, tmp_path, "cold", "--autotune-all-kernels",
                       f"--autotune-dump={dump}")
    assert dumped_kernels(dump) == KERNELS
    assert sorted(cold["ours"]["kernels_served"]) == sorted(KERNELS)
    assert cold["ours"]["benchmarks"] == 2 * 4 * 3  # two sizes, four kernels, three configs
    warm = pytest_pass(venv, tmp_path, "warm", "--autotune-all-kernels",
                       f"--autotune-load={dump}", "--autotune-require-complete")
    assert warm["ours"]["benchmarks"] == 0 and warm["ours"]["hits"] == 8
    assert warm["timers"].get("triton_autotuner_bench") is None  # nothing on Triton's tuner
    outcomes = {t: r["outcome"] for t, r in warm["tests"].items()}
    assert outcomes == {t: r["outcome"] for t, r in cold["tests"].items()}
    assert sorted(outcomes.values()) == ["passed", "passed"]


def processes(result: subprocess.CompletedProcess) -> dict[str, dict]:
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return {line["process"]: line for line in lines}


def test_autotune_flags_route_a_plain_process_and_its_subprocess(venv: Path,
                                                                 tmp_path: Path) -> None:
    dump = tmp_path / "driver.autotune.textproto"
    driver = str(SRC / "driver.py")
    cold = processes(run(venv, [driver], tmp_path,
                         f"--autotune_all_kernels --dump_autotune_results_to={dump}"))
    assert set(cold) == {"parent", "child"}
    assert all(p["ours"] == [True, True] and p["stats"]["benchmarks"] == 2 * 3
               for p in cold.values())
    assert dumped_kernels(dump) == KERNELS  # the child's entries joined the parent's dump
    warm = processes(run(venv, [driver], tmp_path,
                         f"--autotune_all_kernels --load_autotune_results_from={dump} "
                         "--require_complete_autotune_results"))
    assert {n: (p["stats"]["benchmarks"], p["stats"]["hits"]) for n, p in warm.items()} == \
        {"parent": (0, 2), "child": (0, 2)}
    off = processes(run(venv, [driver], tmp_path))  # no flag: Triton's own autotuner
    assert off["parent"]["ours"] == [False, False] and off["child"]["ours"] == [False, False]


IMPORTED_FIRST = """
import warnings, tp_kernels
from autotune_cache.triton import UnroutedKernelsWarning, install
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    install()
messages = [str(w.message) for w in caught if issubclass(w.category, UnroutedKernelsWarning)]
assert len(messages) == 1, messages
print(messages[0])
"""


def test_a_library_imported_before_the_switch_is_named_with_the_fix(venv: Path,
                                                                    tmp_path: Path) -> None:
    message = run(venv, ["-c", IMPORTED_FIRST], tmp_path).stdout
    assert "tp_kernels.ops" in message and "Fix:" in message
    assert all(kernel in message for kernel in KERNELS)
    # The same under pytest: a plugin that imports the library before ours configures.
    out = run(venv, ["-m", "pytest", "-p", "autotune_cache.pytest_plugin", "-p", "tp_kernels",
                     "-q", "-p", "no:cacheprovider", "-W", "always", "--rootdir",
                     str(SRC / "tp_tests"), str(SRC / "tp_tests"), "--autotune-all-kernels"],
              tmp_path)
    text = out.stdout + out.stderr
    assert "UnroutedKernelsWarning" in text and "tp_kernels.ops.scale_kernel" in text, text


def test_a_rootdir_conftest_that_imports_the_library_is_routed(venv: Path,
                                                               tmp_path: Path) -> None:
    """The option takes effect before pytest imports the initial conftest.py files."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text("import tp_kernels  # noqa: F401\n")
    test = SRC / "tp_tests" / "test_tp_kernels.py"
    (suite / test.name).write_text(test.read_text())
    dump = tmp_path / "tp.autotune.textproto"
    out = run(venv, ["-m", "pytest", "-p", "autotune_cache.pytest_plugin", "-q",
                     "-p", "no:cacheprovider", "-W", "always", "--rootdir", str(suite),
                     str(suite), "--autotune-all-kernels", f"--autotune-dump={dump}"], tmp_path)
    assert "UnroutedKernelsWarning" not in out.stdout + out.stderr, out.stdout + out.stderr
    assert dumped_kernels(dump) == KERNELS
