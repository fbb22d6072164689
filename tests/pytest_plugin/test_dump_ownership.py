"""A dump replaces only what the run owns (docs/cache.md#what-a-dump-keeps), pinned row by row
under pytest and pytest-xdist, in the shape users hit it (issue 49): a committed file shared
with another device's job (a CPU job and a GPU job), another toolchain's entries, a regen of a
subset (-k, a path), a failed run, --autotune-dump-merge, and a first dump under the ini setup
(issue 52)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune_cache import CacheKey
from autotune_cache.formats import load_results, save_results
from tests.pytest_plugin import fake_kernel
from tests.pytest_plugin.test_pytest_plugin import run

pytest_plugins = ["pytester"]

MODES = [[], ["-n", "2"]]
MODE_IDS = ["one-process", "xdist"]


def _other_toolchain(kernel: str, n: int) -> CacheKey:
    k = fake_kernel.key(kernel, n)
    return CacheKey(kernel=k.kernel, source_fingerprint=k.source_fingerprint,
                    configs_fingerprint=k.configs_fingerprint, problem=k.problem,
                    device=k.device, toolchain={"triton": "3.5.0"})


def shared_file(path: Path) -> Path:
    """A committed file of a CI with two jobs: the other job's device (an A100) has two
    entries; this device has one entry of an older Triton, one the suite uses and one of a
    kernel no test uses any more."""
    keys = [fake_kernel.key("softmax", 1024, fake_kernel.A100),
            fake_kernel.key("matmul", 512, fake_kernel.A100),
            _other_toolchain("softmax", 1024),
            fake_kernel.key("softmax", 1024),
            fake_kernel.key("old_kernel", 8)]
    save_results(path, [fake_kernel.tune(k) for k in keys])
    return path


def rows(path: Path) -> set[tuple[str, str, str]]:
    """(kernel, N, device-or-toolchain) of each entry."""
    out = set()
    for e in load_results(path):
        where = "A100" if "A100" in e.key.device.name else (
            "old triton" if e.key.toolchain[0].version == "3.5.0" else "here")
        out.add((e.key.kernel, e.key.problem.split(",")[0], where))
    return out


OTHERS = {("softmax", "N=1024", "A100"), ("matmul", "N=512", "A100"),
          ("softmax", "N=1024", "old triton")}
FULL_SUITE = {("softmax", "N=1024", "here"), ("softmax", "N=2048", "here"),
              ("matmul", "N=512", "here")}
UNUSED = {("old_kernel", "N=8", "here")}

# The table of docs/cache.md, row by row: extra pytest arguments, the file's entries after the
# dump, and the dump's line after "dump: wrote ".
TABLE = {
    "full run": ([], OTHERS | FULL_SUITE,
                 "3 entries to *; kept 3 (2 other devices, 1 other toolchains); dropped 1 no "
                 "longer used (old_kernel)*"),
    "subset -k": (["-k", "one"], OTHERS | UNUSED | {("softmax", "N=1024", "here")},
                  "1 entries to *; kept 4 (1 not selected, 2 other devices, 1 other "
                  "toolchains); dropped 0 [[]subset run: -k one[]]*"),
    "subset path": (["test_suite.py::test_three"], OTHERS | UNUSED | {
        ("matmul", "N=512", "here"), ("softmax", "N=1024", "here")},
        "1 entries to *; kept 5 (2 not selected, 2 other devices, 1 other toolchains); "
        "dropped 0 [[]subset run: test_suite.py::test_three[]]*"),
    "failed run": (["test_suite.py", "test_fails.py"], OTHERS | FULL_SUITE | UNUSED,
                   "3 entries to *; kept 4 (2 other devices, 1 other toolchains, 1 run "
                   "failed); dropped 0 [[]failed run[]]*"),
    "merge": (["--autotune-dump-merge"], OTHERS | FULL_SUITE | UNUSED,
              "3 entries to *; kept 4 (1 --autotune-dump-merge, 2 other devices, 1 other "
              "toolchains); dropped 0 [[]merge run[]]*"),
}


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("row", list(TABLE))
def test_the_table_row_by_row(suite, mode, row):
    args, after, line = TABLE[row]
    suite.makepyfile(test_fails="def test_fails():\n    assert False\n")
    # The suite is test_suite.py (the ini file's testpaths); test_fails.py runs when named.
    suite.makeini("[pytest]\ntestpaths = test_suite.py\n")
    cache = shared_file(suite.path / "cache.textproto")
    result = run(suite, *mode, f"--autotune-load={cache}", f"--autotune-dump={cache}", *args)
    result.stdout.fnmatch_lines([f"dump: wrote {line}"])
    assert rows(cache) == after


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_a_dump_to_a_new_path_holds_the_runs_entries_and_json_says_so(suite, mode):
    dump, report = suite.path / "new.textproto", suite.path / "out" / "dump.json"
    result = run(suite, *mode, f"--autotune-dump={dump}", f"--autotune-dump-json={report}")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines([f"dump: wrote 3 entries to {dump}; kept 0; dropped 0*"])
    assert rows(dump) == FULL_SUITE
    data = json.loads(report.read_text())
    assert (data["written"], data["kept"], data["dropped"], data["run"]) == (3, 0, 0, "full")


def test_json_names_the_dropped_kernels_and_the_kept_reasons(suite):
    cache = shared_file(suite.path / "cache.textproto")
    report = suite.path / "dump.json"
    run(suite, f"--autotune-dump={cache}", f"--autotune-dump-json={report}").assert_outcomes(
        passed=4)
    data = json.loads(report.read_text())
    assert data["kept_by"] == {"other devices": 2, "other toolchains": 1}
    assert (data["dropped"], data["dropped_kernels"], data["total"]) == (1, ["old_kernel"], 6)


INI_SETUPS = {
    "ini keys": """
[tool.pytest.ini_options]
autotune_load = "cache.textproto"
autotune_require_complete = true
""",
    "addopts": """
[tool.pytest.ini_options]
addopts = "--autotune-load=cache.textproto --autotune-require-complete"
"""}


@pytest.mark.parametrize("setup", list(INI_SETUPS))
@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_one_command_per_job_under_the_ini_setup(suite, monkeypatch, mode, setup):
    """Issue 52: the first dump, the regen in place, and the regen on another device are one
    command, `pytest --autotune-dump=FILE`, with the ini file's load and require-complete."""
    suite.makefile(".toml", pyproject=INI_SETUPS[setup])
    cache = suite.path / "cache.textproto"
    # 1. The first dump: the file does not exist yet.
    first = run(suite, *mode, "--autotune-dump=cache.textproto")
    first.assert_outcomes(passed=4)
    assert rows(cache) == FULL_SUITE
    run(suite, *mode).assert_outcomes(passed=4)  # the strict load passes
    # 2. The GPU job's entries are added to the file (another device's regen).
    save_results(cache, [*load_results(cache), fake_kernel.tune(
        fake_kernel.key("softmax", 1024, fake_kernel.A100))])
    # 3. A kernel edit: the stale hint's command regenerates in place and keeps the GPU's entry.
    monkeypatch.setenv("FAKE_KERNEL_SOURCE", "edited")
    stale = run(suite, *mode)
    stale.assert_outcomes(failed=4)
    stale.stdout.fnmatch_lines(["*`pytest --autotune-dump=*cache.textproto`*"])
    regen = run(suite, *mode, "--autotune-dump=cache.textproto")
    regen.assert_outcomes(passed=4)
    regen.stdout.fnmatch_lines(["dump: wrote 3 entries to *; kept 1 (1 other devices); "
                                "dropped 0*"])
    assert {e.key.source_fingerprint for e in load_results(cache)
            if "H200" in e.key.device.name} == {"edited"}
    assert ("softmax", "N=1024", "A100") in rows(cache)
    run(suite, *mode).assert_outcomes(passed=4)
