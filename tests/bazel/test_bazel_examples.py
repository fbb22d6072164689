"""Real Bazel (4.2.3, WORKSPACE mode, offline) against a scratch copy of the examples.

One workspace and Bazel server serve the whole module (see conftest.py). Tests that edit the
scratch tree restore it, so the order of the tests does not matter.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from autotune_cache.formats import load_results, save_results, serialize_results
from tests.bazel.harness import Workspace

TRITON_PKG = "examples/triton"
SHARDED = f"//{TRITON_PKG}:vector_add_test"
SHARDED_CACHE = f"{TRITON_PKG}/vector_add_test.autotune.textproto"
INTERPRETER = "cpu-interpreter"
ENV_RECORDER = Path(__file__).resolve().with_name("env_recorder.py")
TIMING_FIELDS = (
    "result.time_ms, result.candidates[].time_ms, result.tuned_at, result.tuning_seconds"
)


@contextmanager
def restored(ws: Workspace, *relative: str) -> Iterator[None]:
    """Puts the listed scratch files back as they were (or removes them if they were absent)."""
    saved = {p: (ws.root / p).read_bytes() if (ws.root / p).exists() else None for p in relative}
    try:
        yield
    finally:
        for path, data in saved.items():
            if data is None:
                (ws.root / path).unlink(missing_ok=True)
            else:
                (ws.root / path).write_bytes(data)


def autotuned_tests(ws: Workspace, universe: str) -> list[str]:
    """Labels of the autotuned_py_test load-mode targets under `universe`."""
    out = ws.run("query", f'attr(tags, "[\\[ ]autotuned[,\\]]", {universe})', "--output=label")
    return out.stdout.split()


def committed_caches(ws: Workspace) -> dict[str, bytes]:
    """Every committed *.autotune.textproto under examples/, by path relative to the root."""
    return {str(p.relative_to(ws.root)): p.read_bytes()
            for p in sorted((ws.root / "examples").rglob("*.autotune.textproto"))}


def shard_reports(ws: Workspace, label: str) -> list[dict]:
    """The autotune_report.json of every shard of a test (shard dirs or the test dir)."""
    root = ws.outputs_root(label)
    shards = sorted(root.glob("shard_*_of_*"))
    reports = []
    for directory in shards or [root]:
        shard = None
        if directory != root:
            index, total = re.match(r"shard_(\d+)_of_(\d+)", directory.name).groups()
            shard = (int(index) - 1, int(total))
        report = ws.report(label, shard)
        if report is not None:
            reports.append(report)
    return reports


def strip_timing(source: Path | bytes, also_config: bool = False) -> list[bytes]:
    """A results file's entries (path or text-format bytes) with the timing fields cleared,
    and the winning config too if asked."""
    if isinstance(source, bytes):
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(scratch) / "cache.textproto"
            path.write_bytes(source)
            return strip_timing(path, also_config)
    out = []
    for entry in load_results(source):
        entry.result.ClearField("time_ms")
        entry.result.ClearField("tuned_at")
        entry.result.ClearField("tuning_seconds")
        for candidate in entry.result.candidates:
            candidate.ClearField("time_ms")
        if also_config:
            entry.result.ClearField("config")
        out.append(entry.SerializeToString(deterministic=True))
    return out


def test_load_mode_runs_every_example_with_zero_benchmarks(workspace: Workspace) -> None:
    # (bazel_fixtures/ruleset/ and monorepo/ hold test_bazel_ruleset_cases.py's and
    # test_bazel_monorepo.py's cases: they start without caches on purpose.)
    workspace.run("test", "--", "//examples/...", "//bazel_fixtures/...",
                  "-//bazel_fixtures/ruleset/...", "-//bazel_fixtures/monorepo/...")
    triton_tests = [t for t in autotuned_tests(workspace, "//examples/...")
                    if t.startswith(f"//{TRITON_PKG}:")]
    assert SHARDED in triton_tests, triton_tests
    for label in triton_tests:
        reports = shard_reports(workspace, label)
        assert reports, f"{label} wrote no autotune_report.json"
        assert sum(r["hits"] for r in reports) > 0, (label, reports)
        assert sum(r["misses"] + r["benchmarks"] + r["tuned"] for r in reports) == 0, (
            label, reports)
    for seed in ("load_autotune_results_using_execpath_test",
                 "load_autotune_results_from_test_workspace_test"):
        (report,) = shard_reports(workspace, f"//examples/seed:{seed}")
        assert (report["misses"], report["benchmarks"]) == (0, 0) and report["hits"] > 0, report
    unsharded = next(t for t in triton_tests if t != SHARDED)
    log = workspace.test_log(unsharded)
    assert re.search(r"autotune_cache: \d+ hits, 0 misses, 0 stale, 0 benchmarks", log), log


def test_sharded_load_test_passes_with_three_shards(workspace: Workspace) -> None:
    result = workspace.run("test", "--nocache_test_results", SHARDED)
    assert re.search(re.escape(SHARDED) + r"\s+PASSED", result.output), result.output
    logs = [workspace.test_log(SHARDED, (i, 3)) for i in range(3)]
    # vector_add_test splits its sizes itself (shard_test_cases = False): the wrapper leaves
    # its one test case alone, so every shard runs it on its own share of the sizes.
    assert all("autotune dump" not in log and "test case(s)" not in log for log in logs), logs
    # Two problem sizes in the interpreter: shards 1 and 2 check one each, shard 3 none (no
    # kernel ran, so no report). The wrapper's own split would have left one size unchecked.
    reports = shard_reports(workspace, SHARDED)
    assert len(reports) == 2 and all(r["hits"] > 0 for r in reports), reports


@pytest.mark.parametrize("name", ["sharded_cases_test", "absl_like_sharded_test"])
def test_every_test_case_runs_once_over_the_shards(workspace: Workspace, name: str) -> None:
    label = f"//bazel_fixtures:{name}"
    workspace.run("test", "--nocache_test_results", label)
    ran = []
    for shard in range(3):
        data = workspace.undeclared_output(label, "ran_cases.txt", (shard, 3))
        ran += (data or b"").decode().split()
    expected = [f"{c}.test_{n}" for c, names in (("A", "abcde"), ("B", "fghi")) for n in names]
    assert sorted(ran) == expected, ran  # absltest's own split is not split a second time


def test_sharded_main_without_sharding_support_fails_clearly(workspace: Workspace) -> None:
    label = "//bazel_fixtures:unaware_sharded_test"
    result = workspace.run("test", label, check=False)
    assert result.returncode == 3, result.output
    log = workspace.test_log(label, (0, 2))
    assert f"{label} is sharded (shard 1 of 2), but its main did not implement" in log, log


def test_default_main_is_found_by_path_suffix(workspace: Workspace) -> None:
    label = "//bazel_fixtures:nested_main_probe"
    workspace.run("test", label, f"{label}.dump")
    assert "nested main ran" in workspace.test_log(f"{label}.dump")


def test_generated_flags_are_exact(workspace: Workspace) -> None:
    labels = ["//bazel_fixtures:triton_env_test", "//bazel_fixtures:xla_env_test",
              "//bazel_fixtures:triton_env_test.dump", "//bazel_fixtures:xla_env_test.dump",
              "//bazel_fixtures:xla_missing_cache_test"]
    workspace.run("test", *labels)

    def env(label: str) -> dict[str, str]:
        return json.loads(workspace.undeclared_output(label, "env_probe.json"))

    # TEST_WORKSPACE/ + $(rootpath): an absolute runfiles path once resolved (safe after chdir).
    triton_cache = "TEST_WORKSPACE/bazel_fixtures/triton_fixture.autotune.textproto"
    xla_cache = "TEST_WORKSPACE/bazel_fixtures/xla_fixture.autotune.textproto"
    # Triton: the macro's flags (the user's env flags first) stay in their own variable, which
    # the library combines with AUTOTUNE_FLAGS. XLA: the wrapper has merged them into XLA_FLAGS.
    assert env(labels[0]) == {
        "RULES_AUTOTUNE_MACRO_FLAGS":
            f"--autotune_cache_mode=read --load_autotune_results_from={triton_cache}"
            " --require_complete_autotune_results",
        "AUTOTUNE_REGEN_HINT": "bazel run //bazel_fixtures:triton_env_test.regen",
        "AUTOTUNE_TEST_MAIN": "bazel_fixtures/env_probe.py",  # every load test is wrapped
    }
    assert env(labels[1]) == {
        "XLA_FLAGS": f"--xla_gpu_autotune_level=4 --xla_gpu_load_autotune_results_from={xla_cache}"
                     " --xla_gpu_require_complete_aot_autotune_results"
                     " --xla_gpu_per_fusion_autotune_cache_dir=/tmp/xla_per_fusion",
        "AUTOTUNE_REGEN_HINT": "bazel run //bazel_fixtures:xla_env_test.regen",
        "AUTOTUNE_TEST_MAIN": "bazel_fixtures/env_probe.py",
    }
    assert env(labels[2]) == {
        "RULES_AUTOTUNE_MACRO_FLAGS":
            f"--autotune_cache_mode=read --load_autotune_results_from={triton_cache}"
            " --dump_autotune_results_to=TEST_UNDECLARED_OUTPUTS_DIR/autotune_cache.textproto",
        "AUTOTUNE_REGEN_HINT": "bazel run //bazel_fixtures:triton_env_test.regen",
        "AUTOTUNE_TEST_MAIN": "bazel_fixtures/env_probe.py",
    }
    assert env(labels[3]) == {
        "XLA_FLAGS": f"--xla_gpu_autotune_level=4 --xla_gpu_load_autotune_results_from={xla_cache}"
                     " --xla_gpu_dump_autotune_results_to="
                     "TEST_UNDECLARED_OUTPUTS_DIR/autotune_cache.textproto"
                     " --xla_gpu_per_fusion_autotune_cache_dir=/tmp/xla_per_fusion",
        "AUTOTUNE_REGEN_HINT": "bazel run //bazel_fixtures:xla_env_test.regen",
        "AUTOTUNE_TEST_MAIN": "bazel_fixtures/env_probe.py",
    }
    # No committed cache and require_complete = False: no flag at all, and it still builds.
    assert env(labels[4]) == {
        "AUTOTUNE_REGEN_HINT": "bazel run //bazel_fixtures:xla_missing_cache_test.regen",
        "AUTOTUNE_TEST_MAIN": "bazel_fixtures/env_probe.py",
    }


def test_jax_example_gets_exactly_the_intended_xla_flags(workspace: Workspace) -> None:
    jax_tests = autotuned_tests(workspace, "//examples/jax/...")
    if not jax_tests:
        pytest.skip("examples/jax has no autotuned_py_test yet")
    run_under = f"--run_under={sys.executable} {ENV_RECORDER}"
    workspace.run("test", run_under, *jax_tests)
    for label in jax_tests:
        recorded = json.loads(workspace.undeclared_output(label, "recorded_env.json"))
        package, name = label.removeprefix("//").split(":")
        cache = f"{package}/{name}.autotune.textproto"
        load = (f"--xla_gpu_load_autotune_results_from=TEST_WORKSPACE/{cache} "
                if (workspace.root / cache).is_file() else "")
        assert recorded == {
            "RULES_AUTOTUNE_MACRO_XLA_FLAGS":
                f"{load}--xla_gpu_require_complete_aot_autotune_results",
            "AUTOTUNE_REGEN_HINT": f"bazel run {label}.regen",
        }, recorded


def test_dump_target_writes_the_cache_to_test_outputs(workspace: Workspace) -> None:
    label = f"{SHARDED}.dump"
    workspace.run("test", label)
    dumped = workspace.undeclared_output(label, "autotune_cache.textproto")
    assert dumped is not None, f"{label} wrote no autotune_cache.textproto"
    # The dump loads the committed cache first (incremental): nothing is re-tuned, and it holds
    # exactly the committed entries of the device it ran on (the interpreter, here).
    assert dumped == interpreter_entries(workspace.root / SHARDED_CACHE)
    assert (outputs := workspace.outputs_root(label) / "test.outputs" / "outputs.zip").is_file(), (
        f"Bazel 4 zips undeclared outputs; {outputs} is missing (is `zip` installed?)")


def test_regen_target_rewrites_the_committed_file(workspace: Workspace) -> None:
    cache = workspace.root / SHARDED_CACHE
    original = cache.read_bytes()
    with restored(workspace, SHARDED_CACHE):
        # Unchanged tree: the incremental regen finds every key and changes no byte.
        result = workspace.run("run", f"{SHARDED}.regen")
        assert cache.read_bytes() == original
        assert f"{SHARDED_CACHE}: ok: unchanged" in result.output, result.output
        # From scratch (no committed file): every key is re-tuned; only timing fields
        # (and, where timings are close, the winner) may differ.
        cache.unlink()
        result = workspace.run("run", f"{SHARDED}.regen")
        assert f"{SHARDED_CACHE}: ok: created: 0 winners changed, 0 re-timed, " in result.output, \
            result.output
        committed = workspace.root / "original.textproto"
        committed.write_bytes(original)
        # The created file holds what this device tuned; compare with the interpreter's entries.
        committed.write_bytes(interpreter_entries(committed))
        assert strip_timing(cache, also_config=True) == strip_timing(committed, also_config=True), (
            f"a full regen changed more than {TIMING_FIELDS} and the winning config")
        committed.unlink()


def test_regen_cache_tool_rewrites_every_committed_cache(workspace: Workspace) -> None:
    before = committed_caches(workspace)
    assert SHARDED_CACHE in before, sorted(before)
    with restored(workspace, *before):
        # Discovery with no pattern, run at the root: every autotuned test in the workspace
        # (those of backend "xla" named as skipped: this machine has no GPU).
        listing = workspace.run("run", "//tools:regen_cache", "--", "--dry_run").output
        for label in autotuned_tests(workspace, "//..."):
            assert f"{label}.dump ->" in listing or f"SKIPPED ({label}.dump)" in listing, (
                label, listing)
        # Drop one entry from a committed file: the regen must add it back, and leave every
        # other file byte-identical.
        entries = load_results(workspace.root / SHARDED_CACHE)
        assert len(entries) >= 2, entries
        _rewrite_without_first_entry(workspace.root / SHARDED_CACHE)
        triton_tests = autotuned_tests(workspace, f"//{TRITON_PKG}/...")
        result = workspace.run("run", "//tools:regen_cache", "--", *triton_tests)
        assert re.search(re.escape(SHARDED_CACHE)
                         + r": ok: 0 winners changed, 0 re-timed, 1 new, 0 removed",
                         result.output), result.output
        after = committed_caches(workspace)
        for path, data in before.items():
            if path == SHARDED_CACHE:
                # The re-added entry was tuned again: compare all but timings and the winner.
                assert strip_timing(after[path], True) == strip_timing(data, True), path
            elif path.startswith(TRITON_PKG):
                assert after[path] == data, f"{path} changed on an unchanged tree"


def _rewrite_without_first_entry(path: Path) -> None:
    """Rewrites a results file with its first interpreter entry removed (a regen on this
    machine can only re-tune entries of the device it runs on)."""
    entries = load_results(path)
    first = next(i for i, e in enumerate(entries) if e.key.device.name == INTERPRETER)
    save_results(path, entries[:first] + entries[first + 1:])


def interpreter_entries(path: Path) -> bytes:
    """The bytes of a results file holding only `path`'s entries for the CPU interpreter."""
    entries = [e for e in load_results(path) if e.key.device.name == INTERPRETER]
    return serialize_results(entries, text=True)


def test_regen_cache_pins_one_gpu_per_dump_job(workspace: Workspace) -> None:
    # No GPU here: two fake GPU ids exercise the --run_under pinning path under real Bazel.
    triton_tests = autotuned_tests(workspace, f"//{TRITON_PKG}/...")[:2]
    result = workspace.run("run", "//tools:regen_cache", "--", "--gpus=0,1", "--check",
                           *triton_tests)
    assert "2 GPU(s) [0,1]: 2 dump job(s) at a time" in result.output, result.output
    for label in triton_tests:
        log = workspace.test_log(f"{label}.dump")
        pins = re.findall(r"pinned to CUDA_VISIBLE_DEVICES=(\S+)", log)
        assert len(pins) == 1 and pins[0] in ("0", "1"), (label, log[-2000:])


def test_stale_cache_fails_with_the_regen_hint(workspace: Workspace) -> None:
    with restored(workspace, SHARDED_CACHE):
        path = workspace.root / SHARDED_CACHE
        text = path.read_text()
        assert 'name: "cpu-interpreter"' in text
        path.write_text(text.replace('name: "cpu-interpreter"', 'name: "NVIDIA H100 80GB"'))
        result = workspace.run("test", SHARDED, check=False)
        assert result.returncode == 3, result.output
        logs = "\n".join(workspace.test_log(SHARDED, (i, 3)) for i in range(3))
        assert "stale" in logs and "NVIDIA H100 80GB" in logs, logs[-3000:]
        assert f"bazel run {SHARDED}.regen" in logs, logs[-3000:]


def test_forced_shards_on_a_dump_fail_with_a_clear_message(workspace: Workspace) -> None:
    # Bazel 4.2.3 has no --test_sharding_strategy=forced=K (Bazel 7+), and --test_env cannot
    # set TEST_TOTAL_SHARDS (Bazel 4 crashes on the duplicate key); so a --run_under prefix
    # gives the dump the env that forced sharding produces.
    label = f"{SHARDED}.dump"
    result = workspace.run("test", label, "--run_under=env TEST_TOTAL_SHARDS=3 TEST_SHARD_INDEX=1",
                           check=False)
    assert result.returncode == 3, result.output
    log = workspace.test_log(label)
    assert f"autotune dump: {label} is running as shard 1 of 3" in log, log[-2000:]
    assert "--test_sharding_strategy=disabled" in log


def test_missing_cache_builds_and_fails_with_the_regen_hint(workspace: Workspace) -> None:
    label = "//bazel_fixtures:missing_cache_test"
    result = workspace.run("test", label, check=False)
    assert result.returncode == 3, result.output  # built, ran, failed (1 = build failure)
    log = workspace.test_log(label)
    assert "MissingResultError" in log and f"bazel run {label}.regen" in log, log[-3000:]


BAD_MACRO_CALLS = {
    "bad_backend": ('backend = "cuda"', 'backend = "cuda" is not one of triton, xla'),
    "bad_flags": ('env = {"AUTOTUNE_FLAGS": "--dump_autotune_results_to=/tmp/x"}',
                  'env["AUTOTUNE_FLAGS"] already sets --dump_autotune_results_to'),
    "bad_cache": ('cache = "@other_repo//caches:t.autotune.textproto"',
                  "is in repository @other_repo, not in the test's own repository"),
    "bad_cache_name": ('cache = "noext_cache"', 'cache = "noext_cache" has no file extension'),
    "bad_runner": ('runner = "unittest"', 'runner = "unittest" is not one of main, pytest'),
    "bad_per_fusion": ('xla_per_fusion_cache_dir = "/tmp/d"',
                       "xla_per_fusion_cache_dir only applies to backend = \"xla\""),
}


@pytest.mark.parametrize("package", sorted(BAD_MACRO_CALLS))
def test_bad_macro_arguments_fail_with_a_clear_message(workspace: Workspace, package: str) -> None:
    argument, message = BAD_MACRO_CALLS[package]
    directory = workspace.root / package
    directory.mkdir(exist_ok=True)
    try:
        (directory / "t.py").write_text("print('never runs')\n")
        (directory / "BUILD.bazel").write_text(
            'load("//rules:defs.bzl", "autotuned_py_test")\n\n'
            f'autotuned_py_test(\n    name = "t",\n    srcs = ["t.py"],\n    {argument},\n)\n')
        result = workspace.run("query", f"//{package}:all", check=False)
    finally:
        # A broken package would break `//...` queries of the other tests.
        shutil.rmtree(directory)
    assert result.returncode != 0
    assert 'autotuned_py_test(name = "t"): ' in result.output and message in result.output, (
        result.output)


def test_regen_cache_reports_failed_and_empty_dumps_and_keeps_the_files(
        workspace: Workspace) -> None:
    fixture = "bazel_fixtures/xla_fixture.autotune.textproto"
    before = (workspace.root / fixture).read_bytes()
    result = workspace.run("run", "//tools:regen_cache", "--",
                           "//bazel_fixtures:missing_cache_test", "//bazel_fixtures:xla_env_test",
                           check=False)
    assert result.returncode == 1, result.output
    assert re.search(r"bazel_fixtures/missing_cache_test\.autotune\.textproto: NOT REGENERATED "
                     r"\(//bazel_fixtures:missing_cache_test\.dump\): the dump test failed",
                     result.output), result.output
    assert re.search(re.escape(fixture) + r": NOT REGENERATED .*wrote no autotune_cache\.textproto",
                     result.output), result.output
    assert "2 cache(s): 0 rewritten, 2 failed" in result.output
    assert (workspace.root / fixture).read_bytes() == before
    assert not (workspace.root / "bazel_fixtures/missing_cache_test.autotune.textproto").exists()
