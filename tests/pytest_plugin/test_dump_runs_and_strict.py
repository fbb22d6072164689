"""The plugin's dump holds exactly one run in every mode (one process, -n 2, merge on request),
and --autotune-require-complete fails the run, shortly, whatever a test did with the error."""

from __future__ import annotations

import pytest

from autotune_cache.formats import load_results
from tests.pytest_plugin.test_pytest_plugin import committed_cache, entries, run

pytest_plugins = ["pytester"]

MODES = [[], ["-n", "2"]]
MODE_IDS = ["one-process", "xdist"]


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_a_dump_after_a_kernel_edit_holds_only_the_new_entries(suite, monkeypatch, mode):
    dump = suite.path / "cache.textproto"
    run(suite, *mode, f"--autotune-dump={dump}").assert_outcomes(passed=4)
    monkeypatch.setenv("FAKE_KERNEL_SOURCE", "edited")
    result = run(suite, *mode, f"--autotune-dump={dump}")
    result.assert_outcomes(passed=4)
    assert {e.key.source_fingerprint for e in load_results(dump)} == {"edited"}
    assert len(entries(dump)) == 3
    # Nothing of the dump's beside it (no lock, temp or partial file). Other plugins' own
    # folders (pytest-benchmark's .benchmarks, on the GPU machine) are not ours to judge.
    beside = {p.name for p in suite.path.iterdir() if p.name.startswith(".")} - {".benchmarks"}
    assert sorted(beside) == []


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_dump_merge_keeps_the_earlier_runs_entries(suite, monkeypatch, mode):
    dump = suite.path / "cache.textproto"
    run(suite, *mode, f"--autotune-dump={dump}", "-k", "one").assert_outcomes(passed=1)
    result = run(suite, *mode, f"--autotune-dump={dump}", "--autotune-dump-merge", "-k",
                 "two or three")
    result.assert_outcomes(passed=2)
    assert [kernel for kernel, _, _ in entries(dump)] == ["matmul", "softmax", "softmax"]


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_a_file_that_is_not_a_results_file_stops_the_run_up_front(suite, mode):
    notes = suite.path / "notes.txt"
    notes.write_text("release notes\n")
    result = run(suite, *mode, f"--autotune-dump={notes}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *notes.txt: the file there is not a results file*"])
    assert notes.read_text() == "release notes\n"


SWALLOWERS = """
import pytest, fake_kernel

@pytest.mark.xfail(reason="known to be slow")
def test_xfail():
    fake_kernel.launch("matmul", 512)

def test_skips_on_error():
    try:
        fake_kernel.launch("softmax", 4096)
    except Exception as e:
        pytest.skip(f"kernel unavailable: {e}")

@pytest.fixture
def swallowed():
    try:
        fake_kernel.launch("layer_norm", 64)
    except Exception:
        return None

def test_fixture_swallows(swallowed):
    pass
"""


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_require_complete_fails_the_run_whatever_the_tests_did(suite, mode):
    cache = committed_cache(suite.path / "committed.textproto")
    suite.makepyfile(test_swallowers=SWALLOWERS)
    result = run(suite, *mode, "test_swallowers.py", f"--autotune-load={cache}",
                 "--autotune-require-complete")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["--autotune-require-complete: 3 kernel keys were missing from "
                                 "the cache, so the run FAILED*"])


def test_a_stale_cache_failure_is_short_and_full_trace_keeps_the_stack(suite):
    cache = committed_cache(suite.path / "committed.textproto")
    args = ("test_suite.py::test_three", f"--autotune-load={cache}",
            "--autotune-require-complete")
    result = run(suite, *args)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    failure = out.split("_ test_three _")[1].split("= autotune_cache =")[0]
    assert len(failure.splitlines()) < 20, failure
    assert "no tuned result for matmul [N=512,x=float16] (the cache is stale)" in failure
    # The option the user uses, not the flag, with the file it loaded (on the command line,
    # so the regen loads it there too and re-tunes only what is stale), named as typed from
    # where pytest ran: no runner's absolute path.
    name = cache.relative_to(suite.path)
    assert f"pytest --autotune-load={name} --autotune-dump={name}" in failure
    assert f"Searched: {name}." in failure
    assert "Traceback" not in failure and "def lookup" not in failure
    full = run(suite, *args, "--full-trace").stdout.str()
    assert "MissingResultError" in full and "def lookup" in full


def test_repeated_load_options_load_every_file(suite):
    first = suite.path / "first.textproto"
    second = suite.path / "second.textproto"
    run(suite, f"--autotune-dump={first}", "-k", "one").assert_outcomes(passed=1)
    run(suite, f"--autotune-dump={second}", "-k", "two or three").assert_outcomes(passed=2)
    result = run(suite, f"--autotune-load={first}", f"--autotune-load={second}",
                 "--autotune-require-complete")
    result.assert_outcomes(passed=4)


def test_relative_paths_are_resolved_at_start_up(suite):
    suite.makepyfile(test_chdir="""
        import fake_kernel

        def test_moves(monkeypatch, tmp_path):
            monkeypatch.chdir(tmp_path)
            assert fake_kernel.launch("softmax", 1024) == 64
    """)
    result = run(suite, "test_chdir.py", "--autotune-cache-dir=cache",
                 "--autotune-dump=out/dump.textproto")
    result.assert_outcomes(passed=1)
    assert len(entries(suite.path / "out" / "dump.textproto")) == 1
    assert len(list((suite.path / "cache").glob("*.textproto"))) == 1


def test_a_typo_in_autotune_flags_stops_the_run_once(suite, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_FLAGS", "--autotune_cach_dir=x")
    result = run(suite)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: AUTOTUNE_FLAGS: unknown flag --autotune_cach_dir.*"])
    assert "passed" not in result.stdout.str() and "failed" not in result.stdout.str()


def test_ini_options_and_the_command_line_add_up(suite):
    first = suite.path / "first.textproto"
    second = suite.path / "second.textproto"
    run(suite, f"--autotune-dump={first}", "-k", "one").assert_outcomes(passed=1)
    run(suite, f"--autotune-dump={second}", "-k", "two or three").assert_outcomes(passed=2)
    suite.makepyprojecttoml(f"""
        [tool.pytest.ini_options]
        autotune_load = "{first}"
        autotune_require_complete = true
    """)
    run(suite, f"--autotune-load={second}").assert_outcomes(passed=4)
    result = run(suite)  # the ini alone: test_two and test_three miss, strictly
    result.assert_outcomes(passed=2, failed=2)


def test_all_kernels_option_routes_triton_autotune_before_tests_import(suite):
    suite.makepyfile(test_routed="""
        import triton
        from autotune_cache.triton import routing

        def test_routed():
            assert routing.is_installed()
            assert triton.autotune is routing.routed_autotune
    """)
    run(suite, "test_routed.py", "--autotune-all-kernels").assert_outcomes(passed=1)
    run(suite, "test_routed.py").assert_outcomes(failed=1)


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_a_subprocess_dumping_through_autotune_flags_joins_the_run(suite, monkeypatch, mode):
    """A test that starts a subprocess with the run's AUTOTUNE_FLAGS: its entries are in the
    run's dump (under -n 2 too, where the worker's own partial dump sits in between)."""
    dump = suite.path / "cache.textproto"
    monkeypatch.setenv("AUTOTUNE_FLAGS", f"--dump_autotune_results_to={dump}")
    suite.makepyfile(test_spawns="""
        import subprocess, sys
        import fake_kernel

        def test_spawns():
            assert fake_kernel.launch("softmax", 1024) == 64
            code = "import fake_kernel; assert fake_kernel.launch('child', 7) == 64"
            subprocess.run([sys.executable, "-c", code], check=True)
    """)
    run(suite, *mode, "test_spawns.py").assert_outcomes(passed=1)
    assert [kernel for kernel, _, _ in entries(dump)] == ["child", "softmax"]


# ----- the committed file is the user's data (issue 36) ------------------------------------------

INI_STRICT = """
[tool.pytest.ini_options]
autotune_load = "cache.textproto"
autotune_require_complete = true
"""


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_the_stale_hint_under_the_recommended_ini_setup_regenerates_the_file(
        suite, monkeypatch, mode):
    """docs/pytest.md's setup: load plus require-complete in pyproject. A candidate list
    changes; the user runs what the failure prints, `pytest --autotune-dump=<that file>`."""
    dump = suite.path / "cache.textproto"
    run(suite, f"--autotune-dump={dump}").assert_outcomes(passed=4)
    suite.makefile(".toml", pyproject=INI_STRICT)
    run(suite, *mode).assert_outcomes(passed=4)  # the committed file serves the strict load
    monkeypatch.setenv("FAKE_KERNEL_CONFIGS", "cfg2")
    failed = run(suite, *mode)
    failed.assert_outcomes(failed=4)
    failed.stdout.fnmatch_lines(["*--autotune-dump*"])
    regen = run(suite, *mode, f"--autotune-dump={dump}")
    regen.assert_outcomes(passed=4)  # a dump run may tune
    regen.stdout.fnmatch_lines(["note: --autotune-require-complete was off for this run*"])
    assert {e.key.configs_fingerprint for e in load_results(dump)} == {"cfg2"}
    assert len(entries(dump)) == 3
    run(suite, *mode).assert_outcomes(passed=4)  # and the strict load passes again


FAILING_SUITE = """
import fake_kernel

def test_one():
    assert fake_kernel.launch("softmax", 1024) == 64

def test_broken():
    assert fake_kernel.launch("softmax", 2048) == 64
    raise AssertionError("an unrelated bug")
"""


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
def test_a_failed_dump_run_never_shrinks_the_committed_file(suite, monkeypatch, mode):
    dump = suite.path / "cache.textproto"
    run(suite, f"--autotune-dump={dump}").assert_outcomes(passed=4)
    before = entries(dump)
    assert len(before) == 3
    suite.makepyfile(test_suite=FAILING_SUITE)
    monkeypatch.setenv("FAKE_KERNEL_SOURCE", "edited")
    result = run(suite, *mode, f"--autotune-dump={dump}")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "dump: wrote 2 entries to *; kept 3 (3 run failed); dropped 0 [[]failed run[]]*"])
    sources = sorted(e.key.source_fingerprint for e in load_results(dump))
    assert sources == ["edited", "edited", "src", "src", "src"]


def test_a_killed_xdist_controllers_partial_dumps_are_swept_by_the_next_run(suite):
    """docs/cache.md: nothing of the dump's is left beside it. A SIGKILLed `pytest -n 2`
    controller leaves its `.NAME.xdist-*/` folder; the next dump run sweeps it (a refused
    merge's folder, marked KEPT, stays for the user's hand merge)."""
    import os
    import subprocess
    import sys

    from autotune_cache.foundation.locking import Liveness

    dump = suite.path / "cache.textproto"
    dead = suite.path / ".cache.textproto.xdist-dead"
    dead.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                               "from pathlib import Path\n"
                               "from autotune_cache.foundation.locking import Liveness\n"
                               "Liveness(Path(sys.argv[1]))\nprint('held', flush=True)\n"
                               "time.sleep(600)\n", str(dead)],
                              stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(suite.path.parent)
                                   + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    holder.kill()  # SIGKILL: its lock is released by the kernel, its folder stays
    holder.wait(timeout=30)
    kept = suite.path / ".cache.textproto.xdist-kept"
    kept.mkdir()
    Liveness(kept).release()
    (kept / "KEPT").write_text("refused merge\n")
    run(suite, "-n", "2", f"--autotune-dump={dump}").assert_outcomes(passed=4)
    assert not dead.exists()
    assert kept.is_dir()
