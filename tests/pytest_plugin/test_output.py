"""What the plugin prints, and where: tuning progress through pytest's terminal reporter (seen
without -s), the plugin's summary instead of the library's exit line, and `-p no:autotune_cache`."""

from __future__ import annotations

from tests.pytest_plugin.test_pytest_plugin import run

pytest_plugins = ["pytester"]

PROGRESS_SUITE = """
import fake_kernel
from autotune_cache.triton.progress import Progress

def test_tunes():
    assert fake_kernel.launch("softmax", 1024) == 64
    progress = Progress("softmax", "N=1024", "NVIDIA H200", total=3, reused=1)
    progress.step("BLOCK=32", 2.5)
    progress.step("BLOCK=128", None, "out of shared memory")
    progress.finished("BLOCK=64", 1.0, 3.5)
"""


def test_tuning_progress_shows_without_dash_s(suite, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_PROGRESS", "1")  # every line at once, not after a second
    suite.makepyfile(test_progress=PROGRESS_SUITE)
    result = run(suite, "test_progress.py", f"--autotune-dump={suite.path / 'c.textproto'}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*autotune_cache: tuning softmax [[]N=1024[]] on NVIDIA H200: 2 configs to benchmark, "
        "1 timings reused",
        "autotune_cache:   [[]1/2[]] BLOCK=32: 2.5000 ms",
        "autotune_cache:   [[]2/2[]] BLOCK=128: failed: out of shared memory",
        "autotune_cache:   best BLOCK=64 (1.0000 ms), tuned in 3.5 s",
    ])
    assert "autotune_cache: tuning" not in result.stderr.str()


def test_the_summary_replaces_the_exit_line(suite):
    result = run(suite, f"--autotune-dump={suite.path / 'c.textproto'}")
    result.assert_outcomes(passed=4)
    out = result.stdout.str()
    assert "1 hits, 3 misses (0 stale), 9 benchmarks" in out
    assert "autotune_cache: 1 hits" not in out + result.stderr.str()
    assert out.rstrip().splitlines()[-1].startswith("====")  # pytest's own line is the last


def test_the_exit_line_stays_when_the_plugin_is_inert(suite):
    suite.makepyfile(conftest="""
from autotune_cache import configure, parse_flags

def pytest_configure(config):
    configure(parse_flags("", env={}))
""")
    result = run(suite)
    result.assert_outcomes(passed=4)
    assert "autotune_cache: 1 hits, 3 misses" in result.stderr.str()


def test_dash_p_no_autotune_cache_keeps_the_plugin_out(suite, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_FLAGS", "--autotune_require_complete")
    result = run(suite, "-p", "no:autotune_cache")
    # Inert: no summary, no session verdict; the library still reads AUTOTUNE_FLAGS, so the
    # kernels' misses fail the tests themselves.
    assert "= autotune_cache =" not in result.stdout.str()
    result.assert_outcomes(failed=4)
    monkeypatch.delenv("AUTOTUNE_FLAGS")
    result = run(suite, "-p", "no:autotune_cache", "--autotune-require-complete")
    assert result.ret == 4
    result.stderr.fnmatch_lines([
        "*the autotune_cache plugin is disabled with -p no:autotune_cache, so "
        "--autotune-require-complete would do nothing; drop one of the two"])


def test_the_summary_counts_a_candidate_list_change(suite, monkeypatch):
    dump = suite.path / "c.textproto"
    run(suite, f"--autotune-dump={dump}").assert_outcomes(passed=4)
    monkeypatch.setenv("FAKE_KERNEL_CONFIGS", "one more config")
    result = run(suite, f"--autotune-load={dump}")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines([
        "1 hits, 3 misses (0 stale, 3 after a candidate-list change), 9 benchmarks, *"])


def test_output_after_an_in_process_pytest_run_is_not_swallowed(suite):
    """A script that runs pytest.main() and goes on: after the run, the library's lines reach
    stderr again (only the plugin's own cache's exit line is left out, as its summary said it)."""
    script = suite.makepyfile(driver=f"""
import pytest
from autotune_cache.foundation import console
rc = pytest.main(["-p", "autotune_cache.pytest_plugin", "-q", "-p", "no:cacheprovider",
                  "--autotune-cache-dir={suite.path / 'cache'}", "test_suite.py"])
assert rc == 0, rc
console.say("autotune_cache: a line after pytest.main")
""")
    result = suite.runpython(script)
    assert result.ret == 0, result.stderr.str()
    err = result.stderr.str()
    assert "autotune_cache: a line after pytest.main" in err
    assert "autotune_cache: 1 hits, 3 misses" not in err


def test_the_summary_over_xdist_workers_keeps_every_clause_of_the_exit_line():
    """pytest's summary (summed over workers) said nothing of plain @triton.jit warm-ups or of
    kernels left on Triton's autotuner, which the exit line it replaces does say."""
    from autotune_cache.pytest_plugin import add_stats, summary_lines
    from autotune_cache.store.stats import Stats

    gw0, gw1 = Stats(hits=2, warmups_recorded=3), Stats(misses=1, tuned=1, tuning_seconds=1.5,
                                                        benchmarks=4, deferred=1)
    gw0.left_on_triton(["lib.a_kernel"])
    gw1.left_on_triton(["lib.a_kernel", "lib.b_kernel"])
    gw1.warmups_queued(5)
    [line] = summary_lines(add_stats([gw0.as_dict(), gw1.as_dict()]), [], workers=2)
    assert line == (
        "2 hits, 1 misses (0 stale), 4 benchmarks, saved ~0.0 s of tuning, spent 1.5 s tuning "
        "1 keys (1 of them at the end of the run, provisional configs launched meanwhile), "
        "recorded 3 plain @triton.jit specialization(s) to compile ahead, queued 5 plain "
        "@triton.jit specialization(s) to compile ahead; 2 autotuned kernel(s) stayed on "
        "Triton's own autotuner, uncached: lib.a_kernel, lib.b_kernel (over 2 xdist workers)")
    # One process: the same clauses as its exit line, after the counters.
    [alone] = summary_lines(gw1.as_dict(), [])
    assert alone.split("of tuning", 1)[1] == gw1.summary_line().split("of tuning", 1)[1]
