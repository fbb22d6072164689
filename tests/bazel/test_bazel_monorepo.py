"""Real Bazel 4.2.3 in a two-team monorepo (issue 19, "silent wrong results"): a CI admin's
`--test_env=AUTOTUNE_FLAGS` / `XLA_FLAGS` must add to the macro's flags, a team's regen run from
its own directory must touch only its own caches, and a renamed or deleted test's committed cache
must be reported (and moved, not re-tuned, on a rename).

The fixtures: tests/bazel/fixtures/monorepo/team_{a,b} (//bazel_fixtures/monorepo/... in the
scratch workspace), one autotuned test each, recording one fake entry through probe.py.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from tests.bazel.harness import Workspace
from tests.bazel.test_bazel_examples import restored
from tests.bazel.test_bazel_ruleset_cases import kernels_in, regen

MONO = "bazel_fixtures/monorepo"
TEAM_A = f"{MONO}/team_a"
TEAM_B = f"{MONO}/team_b"
CACHE_A = f"{TEAM_A}/a_kernels_test.autotune.textproto"
CACHE_B = f"{TEAM_B}/b_kernels_test.autotune.textproto"
TEST_A = f"//{TEAM_A}:a_kernels_test"
STATS = re.compile(r"autotune_cache: (\d+) hits, (\d+) misses, \d+ stale, (\d+) benchmarks")


def ensure_cache(ws: Workspace, label: str, cache: str) -> None:
    """Regenerates a team's committed cache once (the tests share one scratch workspace)."""
    if not (ws.root / cache).is_file():
        ws.run("run", f"{label}.regen")


def stats(ws: Workspace, label: str) -> tuple[int, int, int]:
    """(hits, misses, benchmarks) of the last run of a test, from its log."""
    found = STATS.findall(ws.test_log(label))
    assert found, ws.test_log(label)
    hits, misses, benchmarks = found[-1]
    return int(hits), int(misses), int(benchmarks)


# ----- 1. --test_env=AUTOTUNE_FLAGS / XLA_FLAGS adds to the macro's flags ----------------------


def test_test_env_autotune_flags_keep_the_committed_cache_loaded(workspace: Workspace,
                                                                  tmp_path: Path) -> None:
    """The README's CI recipe (a cache directory through --test_env) still loads the committed
    file strictly: every lookup hits and nothing is benchmarked. Before issue 19 the user's
    AUTOTUNE_FLAGS replaced the macro's, and the test silently re-tuned and passed."""
    ws = workspace
    ensure_cache(ws, TEST_A, CACHE_A)
    shared = tmp_path / "ci_cache_dir"
    ws.run("test", f"--test_env=AUTOTUNE_FLAGS=--autotune_cache_dir={shared}", TEST_A)
    assert stats(ws, TEST_A) == (1, 0, 0), ws.test_log(TEST_A)
    assert shared.is_dir()  # the user's flag applied too


def test_a_conflicting_test_env_flag_fails_naming_both(workspace: Workspace) -> None:
    ws = workspace
    ensure_cache(ws, TEST_A, CACHE_A)
    result = ws.run("test", "--test_env=AUTOTUNE_FLAGS=--require_complete_autotune_results=false",
                    TEST_A, check=False)
    assert result.returncode == 3, result.output
    log = ws.test_log(TEST_A)
    assert "--require_complete_autotune_results is set twice, differently" in log, log
    assert "'--require_complete_autotune_results=false'" in log
    assert "RULES_AUTOTUNE_MACRO_FLAGS" in log


def test_test_env_xla_flags_come_before_the_macros(workspace: Workspace) -> None:
    ws = workspace
    label = "//bazel_fixtures:xla_env_test"
    ws.run("test", "--test_env=XLA_FLAGS=--xla_gpu_deterministic_ops=true", label)
    seen = json.loads(ws.undeclared_output(label, "env_probe.json"))["XLA_FLAGS"]
    assert seen.startswith("--xla_gpu_deterministic_ops=true --xla_gpu_autotune_level=4 "
                           "--xla_gpu_load_autotune_results_from=TEST_WORKSPACE/"), seen
    conflict = ws.run(
        "test", "--test_env=XLA_FLAGS=--xla_gpu_per_fusion_autotune_cache_dir=/elsewhere", label,
        check=False)
    assert conflict.returncode == 3, conflict.output
    log = ws.test_log(label)
    assert "--xla_gpu_per_fusion_autotune_cache_dir is set twice, differently" in log, log
    assert "'--xla_gpu_per_fusion_autotune_cache_dir=/tmp/xla_per_fusion'" in log


# ----- 2. relative patterns are read from the directory the user ran in -------------------------


def test_regen_from_a_teams_directory_touches_only_that_team(workspace: Workspace) -> None:
    ws = workspace
    with restored(ws, CACHE_A, CACHE_B):
        (ws.root / CACHE_A).unlink(missing_ok=True)
        (ws.root / CACHE_B).unlink(missing_ok=True)
        result = ws.run("run", "//tools:regen_cache", "--", "...", cwd=ws.root / TEAM_A)
        assert f"//{TEAM_B}" not in result.output, result.output
        assert kernels_in(ws.root / CACHE_A) == ["team_a"]
        assert not (ws.root / CACHE_B).exists(), "team A's regen wrote team B's cache"
        # `:name` and an absolute pattern, from the same directory.
        one = ws.run("run", "//tools:regen_cache", "--", "--dry_run", ":a_kernels_test",
                     f"//{TEAM_B}:b_kernels_test", cwd=ws.root / TEAM_A)
        assert f"{TEST_A}.dump -> {CACHE_A}" in one.output, one.output
        assert f"//{TEAM_B}:b_kernels_test.dump -> {CACHE_B}" in one.output


# ----- 3. orphaned caches -----------------------------------------------------------------------


def test_a_deleted_tests_cache_is_named_and_fails_check(workspace: Workspace) -> None:
    ws = workspace
    ensure_cache(ws, TEST_A, CACHE_A)
    orphan = f"{TEAM_A}/retired_test.autotune.textproto"
    with restored(ws, orphan, CACHE_A):
        shutil.copyfile(ws.root / CACHE_A, ws.root / orphan)
        check = regen(ws, "--check", f"//{TEAM_A}/...", check=False)
        assert check.returncode == 1, check.output
        # (The scratch workspace has a package that fails to load until a test regenerates its
        # cache, //bazel_fixtures/ruleset/user: the message then says it could not look there.)
        assert (f"{orphan}: ORPHANED: no autotuned test (nor any other rule) uses it any more"
                ) in check.output, check.output
        assert f"delete it with `git rm {orphan}`" in check.output
        assert f"{CACHE_A}: ok: unchanged" in check.output
        assert "1 orphaned" in check.output
        # A plain regen still writes the caches it can, and fails on the orphan too. (An empty
        # file is a cache with no entries yet; a missing one would look like a rename, below.)
        (ws.root / CACHE_A).write_bytes(b"")
        full = regen(ws, f"//{TEAM_A}/...", check=False)
        assert full.returncode == 1, full.output
        assert f"{orphan}: ORPHANED" in full.output
        assert kernels_in(ws.root / CACHE_A) == ["team_a"]


def test_a_renamed_tests_cache_is_moved_not_retuned(workspace: Workspace) -> None:
    ws = workspace
    ensure_cache(ws, f"//{TEAM_B}:b_kernels_test", CACHE_B)
    build = f"{TEAM_B}/BUILD.bazel"
    old_main, new_main = f"{TEAM_B}/b_kernels_test.py", f"{TEAM_B}/b_renamed_test.py"
    new_cache = f"{TEAM_B}/b_renamed_test.autotune.textproto"
    with restored(ws, build, old_main, new_main, CACHE_B, new_cache):
        # The team renames its test (file and target); the committed cache keeps its old name.
        text = (ws.root / build).read_text()
        (ws.root / build).write_text(text.replace("b_kernels_test", "b_renamed_test"))
        (ws.root / old_main).rename(ws.root / new_main)
        blocked = regen(ws, f"//{TEAM_B}/...", check=False)
        assert blocked.returncode == 1, blocked.output
        assert (f"and //{TEAM_B}:b_renamed_test has no cache yet: if that test is the old one "
                f"renamed, keep its entries with `git mv {CACHE_B} {new_cache}`"
                ) in blocked.output, blocked.output
        assert "nothing was run" in blocked.output
        assert not (ws.root / new_cache).exists(), "a full re-tune ran before the move"
        # The move the message asks for: the renamed test's cache is complete as it is.
        (ws.root / CACHE_B).rename(ws.root / new_cache)
        check = regen(ws, "--check", f"//{TEAM_B}/...")
        assert f"{new_cache}: ok: unchanged" in check.output, check.output
        ws.run("test", f"//{TEAM_B}:b_renamed_test")
        assert stats(ws, f"//{TEAM_B}:b_renamed_test") == (1, 0, 0)


# ----- 5. .bazelrc test filters -----------------------------------------------------------------


def test_bazelrc_test_filters_do_not_filter_out_the_dumps(workspace: Workspace) -> None:
    """A team's fast-CI .bazelrc: every filter it sets would drop the `.dump` targets (large,
    eternal, tagged `external`, py), and regen blamed a build failure (exit 4)."""
    ws = workspace
    with restored(ws, ".bazelrc", CACHE_B):
        (ws.root / CACHE_B).unlink(missing_ok=True)
        with (ws.root / ".bazelrc").open("a") as rc:
            rc.write("test --test_size_filters=small,medium --test_timeout_filters=short,moderate"
                     " --test_tag_filters=-external --test_lang_filters=-py\n")
        result = ws.run("run", f"//{TEAM_B}:b_kernels_test.regen")
        assert f"{CACHE_B}: ok: created" in result.output, result.output
        assert kernels_in(ws.root / CACHE_B) == ["team_b"]
