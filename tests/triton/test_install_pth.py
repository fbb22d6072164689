"""AUTOTUNE_FLAGS=--autotune_all_kernels in plain `python` processes and their subprocesses.

The package is built as a wheel and as an editable wheel (setup.py adds
autotune_cache_all_kernels.pth to both) and installed by pip into fresh virtual environments. Their
Triton, torch and protobuf come from this interpreter's site-packages through a `_deps.pth`,
which sorts before ours, so they are importable when the hook runs, as packages installed in the
same site-packages would be."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PTH = "autotune_cache_all_kernels.pth"

pytestmark = pytest.mark.slow
# Looked up, not imported: setuptools' distutils shim refuses to load after torch imported
# distutils; the builds run in subprocesses.
_MISSING = [m for m in ("pip", "setuptools") if importlib.util.find_spec(m) is None]
if _MISSING:
    pytest.skip(f"builds the wheels with setuptools and installs them with pip; missing: "
                f"{', '.join(_MISSING)}", allow_module_level=True)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{'wheel': the regular wheel, 'editable': the PEP 660 wheel}, built from a copy of the
    source (the build leaves its directories in the tree it builds)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "autotune_cache", src / "autotune_cache",
                    ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheels")
    for hook in ("build_wheel", "build_editable"):  # one process per hook, as pip calls them
        subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                        f"build_meta.{hook}(sys.argv[1])", str(out)],
                       cwd=src, check=True, capture_output=True, timeout=300)
    built = {"editable" if ".editable" in w.name else "wheel": w for w in out.glob("*.whl")}
    assert sorted(built) == ["editable", "wheel"], sorted(out.iterdir())
    return built


def make_venv(path: Path, wheel: Path, *, with_deps: bool) -> Path:
    """A fresh virtual environment with `wheel` pip-installed; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True,
                   timeout=120)
    python = path / "bin" / "python"
    # Without PYTHONPATH: a checkout on it (its autotune_cache.egg-info) would make pip think the
    # wheel is already installed.
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, timeout=300, env=clean)
    site = subprocess.run([str(python), "-c", "import sysconfig; "
                           "print(sysconfig.get_paths()['purelib'])"], check=True, text=True,
                          capture_output=True).stdout.strip()
    assert (Path(site) / PTH).is_file()
    if with_deps:
        # This interpreter's site-packages directories, including those it reaches through
        # .pth files of its own (a Triton venv layered over another one).
        paths = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                               *(p for p in sys.path
                                 if p.endswith(("site-packages", "dist-packages")))])
        (Path(site) / "_deps.pth").write_text("\n".join(paths) + "\n")
    return python


def run(python: Path, code: str, flags: str | None, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("AUTOTUNE_FLAGS", "PYTHONPATH", "PYTHONSTARTUP")}
    if flags is not None:
        environment["AUTOTUNE_FLAGS"] = flags
    environment.update(env)
    return subprocess.run([str(python), "-c", code], env=environment, text=True,
                          capture_output=True, timeout=300)


ROUTED = ("import sys, triton; from autotune_cache.triton import routing; "
          "print(triton.autotune is routing.routed_autotune, routing.__file__)")


def test_both_wheels_carry_the_pth_file_with_its_record_line(wheels: dict[str, Path]) -> None:
    source = (ROOT / "autotune_cache" / "triton" / PTH).read_bytes()
    for wheel in wheels.values():
        with zipfile.ZipFile(wheel) as zf:
            assert zf.read(PTH) == source, wheel.name
            record = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
            assert f"{PTH},sha256=" in zf.read(record).decode(), wheel.name


# A process that starts a subprocess, which runs the fake third-party package's kernels on the
# interpreter with a deterministic benchmark (or one that fails, when nothing may be tuned).
CHILD = """
import json, torch, triton
from autotune_cache import get_cache
from autotune_cache.triton import routing, set_fake_benchmark
assert triton.autotune is routing.routed_autotune, "not routed"
def fake(config, problem):
    if FAIL:
        raise AssertionError("benchmarked")
    return float(config.kwargs["BLOCK_SIZE"])
set_fake_benchmark(fake)
from thirdparty_pkg import attn_a, attn_b, spellings
x = torch.arange(64, dtype=torch.float32)
torch.testing.assert_close(attn_a.forward(x), x + 1)
torch.testing.assert_close(attn_b.forward(x), x + 1)
torch.testing.assert_close(spellings.accumulate(x), x)
print(json.dumps(get_cache().stats.as_dict()))
"""
PARENT = """
import subprocess, sys, triton
from autotune_cache.triton import routing
assert triton.autotune is routing.routed_autotune, "the parent is not routed"
sys.stdout.write(subprocess.run([sys.executable, "-c", sys.argv[1]], check=True, text=True,
                                stdout=subprocess.PIPE).stdout)
"""


def test_the_flag_routes_a_process_and_its_subprocess_dump_then_strict_load(
        wheels: dict[str, Path], tmp_path: Path) -> None:
    python = make_venv(tmp_path / "venv", wheels["wheel"], with_deps=True)
    shutil.copytree(Path(__file__).parent / "thirdparty_pkg", tmp_path / "pkgs" / "thirdparty_pkg",
                    ignore=shutil.ignore_patterns("__pycache__"))
    dump = tmp_path / "thirdparty.autotune.textproto"
    env = {"PYTHONPATH": str(tmp_path / "pkgs"), "TRITON_INTERPRET": "1",
           "TRITON_CACHE_DIR": str(tmp_path / "triton")}

    def parent(flags: str, fail: bool) -> dict:
        result = subprocess.run(
            [str(python), "-c", PARENT, f"FAIL = {fail}\n{CHILD}"], text=True,
            capture_output=True, timeout=300,
            env={**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **env,
                 "AUTOTUNE_FLAGS": flags})
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.strip().splitlines()[-1])

    dumped = parent(f"--autotune_all_kernels --dump_autotune_results_to={dump}", fail=False)
    assert dumped["benchmarks"] == 3 * 4
    assert dumped["kernels_served"] == ["thirdparty_pkg.attn_a._fwd_kernel",
                                        "thirdparty_pkg.attn_b._fwd_kernel",
                                        "thirdparty_pkg.spellings.accumulate_kernel"]
    loaded = parent(f"--autotune_all_kernels --load_autotune_results_from={dump} "
                    "--require_complete_autotune_results", fail=True)
    assert (loaded["hits"], loaded["misses"], loaded["benchmarks"]) == (3, 0, 0)


def test_editable_install_routes_too(wheels: dict[str, Path], tmp_path: Path) -> None:
    python = make_venv(tmp_path / "venv", wheels["editable"], with_deps=True)
    result = run(python, ROUTED, "--autotune_all_kernels")
    assert result.returncode == 0, result.stderr
    routed, where = result.stdout.split()
    assert routed == "True"
    assert not where.startswith(str(ROOT))  # the copy the editable wheel points at


def test_without_the_flag_the_hook_imports_nothing(wheels: dict[str, Path],
                                                    tmp_path: Path) -> None:
    python = make_venv(tmp_path / "venv", wheels["wheel"], with_deps=True)
    check = "import sys; print(sorted({'autotune_cache', 'triton'} & set(sys.modules)))"
    for flags in (None, "--autotune_cache_mode=read"):
        result = run(python, check, flags)
        assert (result.returncode, result.stdout, result.stderr) == (0, "[]\n", "")
    result = run(python, ROUTED, "--autotune_all_kernels=false")
    assert result.stdout.startswith("False ")  # mentioned, parsed, and off


def test_problems_cost_one_line_and_start_up_goes_on(wheels: dict[str, Path],
                                                     tmp_path: Path) -> None:
    """Nothing is parsed at start-up: a bad flag is one line when the program imports Triton,
    and the import goes on."""
    python = make_venv(tmp_path / "venv", wheels["wheel"], with_deps=True)
    result = run(python, "print('started')", "--autotune_all_kernels --no_such_flag")
    assert (result.returncode, result.stdout, result.stderr) == (0, "started\n", "")
    result = run(python, "import triton; print('started')",
                 "--autotune_all_kernels --no_such_flag")
    assert (result.returncode, result.stdout) == (0, "started\n")
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"autotune_cache: {PTH}: AUTOTUNE_FLAGS "
                                    "--autotune_all_kernels / --require_complete_autotune_results "
                                    "is not applied (FlagError:")
    assert "unknown flag --no_such_flag" in result.stderr

    bare = make_venv(tmp_path / "bare", wheels["wheel"], with_deps=False)  # no protobuf, Triton
    result = run(bare, "print('started')", "--autotune_all_kernels")
    assert (result.returncode, result.stdout) == (0, "started\n")
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("autotune_cache: AUTOTUNE_FLAGS --autotune_all_kernels has "
                                    "no effect: Triton is not installed")


def test_the_hook_imports_no_triton_and_the_programs_settings_hold(
        wheels: dict[str, Path], tmp_path: Path) -> None:
    """With the flags that need Triton, start-up imports neither Triton nor protobuf; what the
    program sets before its own `import triton` holds, and the switch is on right after it."""
    python = make_venv(tmp_path / "venv", wheels["wheel"], with_deps=True)
    code = """
import os, sys
print(sorted({'triton', 'torch', 'google.protobuf'} & set(sys.modules)))
os.environ['TRITON_INTERPRET'] = '1'  # as a conftest.py does on a machine with no GPU
import torch, triton, triton.language as tl
from autotune_cache.triton import routing

@triton.jit
def row_max(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr, tl.max(tl.load(x_ptr + offsets), axis=0))

out = torch.zeros(1)
row_max[(1,)](torch.arange(8, dtype=torch.float32), out, BLOCK=8)
print(out.item(), triton.autotune is routing.routed_autotune)
"""
    result = run(python, code, "--autotune_all_kernels --require_complete_autotune_results")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[]", "7.0 True"], result.stdout


