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


def test_exclusion_patterns_work_as_in_bazel_test(workspace: Workspace) -> None:
    """Issue 39: `regen_cache -- //... -//third_party/...` was refused while `bazel test`
    takes the same patterns."""
    ws = workspace
    with restored(ws, CACHE_A, CACHE_B):
        (ws.root / CACHE_A).unlink(missing_ok=True)
        (ws.root / CACHE_B).unlink(missing_ok=True)
        result = ws.run("run", "//tools:regen_cache", "--", f"//{MONO}/...", f"-//{TEAM_B}/...")
        assert kernels_in(ws.root / CACHE_A) == ["team_a"]
        assert not (ws.root / CACHE_B).exists(), result.output
        assert f"//{TEAM_B}" not in result.output.split("dump target(s)")[-1], result.output


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


# ----- 4. a one-target regen loads only the packages it needs ----------------------------------


def loaded_packages(ws: Workspace) -> list[str]:
    """The main-repository packages the workspace's Bazel server has loaded since it started
    (`bazel dump --skyframe=detailed`, PACKAGE nodes; "" is the root package)."""
    dump = ws.run("dump", "--skyframe=detailed").stdout
    names = {line.split("|", 1)[0][len("PACKAGE:"):] for line in dump.splitlines()
             if line.startswith("PACKAGE:")}
    return sorted(name for name in names if not name.startswith("@"))


def test_one_target_regen_under_another_output_root_loads_only_what_it_needs(
        workspace: Workspace, tmp_path: Path) -> None:
    """A CI job runs `bazel --output_user_root=X run //pkg:t.regen`: the convenience symlinks
    then point into X, while the Bazel that regen starts (which reads .bazelrc, not the outer
    startup flags) has another output base. Before issue 19 its `//...` query loaded 105
    packages under bazel-ws/external/... (bazel#13951) and exited 1 with 19 "PACKAGE FAILED TO
    LOAD" lines after writing the cache. Now it exits 0 and loads team A's package and what its
    test depends on, nothing else."""
    ws = workspace
    ensure_cache(ws, TEST_A, CACHE_A)
    ws.shutdown()  # a fresh server: what it loads below is the regen's own doing
    other = tmp_path / "ci_output_user_root"
    try:
        result = ws.run(f"--output_user_root={other}", "run", f"{TEST_A}.regen")
        assert "PACKAGE FAILED TO LOAD" not in result.output, result.output
        assert f"{CACHE_A}: ok: unchanged" in result.output, result.output
        # (The dump's `bazel test` points the symlinks back at its own output base afterwards;
        # while regen queried, bazel-ws led into `other`.)
    finally:
        ws.run(f"--output_user_root={other}", "shutdown", check=False)
    loaded = loaded_packages(ws)
    print("packages loaded by the regen's Bazel:", loaded)
    assert not [p for p in loaded if p.startswith("bazel-")], loaded
    assert set(loaded) <= {"", "external", "bazel_harness", "rules/private", TEAM_A,
                           "bazel_fixtures/ruleset"}, loaded


def test_a_sharer_in_another_package_keeps_its_entries(workspace: Workspace) -> None:
    """The narrowed search does not load a third package whose test shares team A's cache;
    when team A's regen would then drop that test's entries, it looks in the whole workspace
    first, finds the sharer and runs its dump too: the file keeps both."""
    ws = workspace
    ensure_cache(ws, TEST_A, CACHE_A)
    team_c = ws.root / MONO / "team_c"
    with restored(ws, CACHE_A, f"{TEAM_A}/BUILD.bazel", f"{MONO}/team_c/BUILD.bazel",
                  f"{MONO}/team_c/c_test.py"):
        # Team A lets team C use its cache file (a source file its own rules use is private).
        with (ws.root / TEAM_A / "BUILD.bazel").open("a") as build:
            build.write('\nexports_files(\n    ["a_kernels_test.autotune.textproto"],\n'
                        f'    visibility = ["//{MONO}/team_c:__pkg__"],\n)\n')
        team_c.mkdir(exist_ok=True)
        (team_c / "BUILD.bazel").write_text(
            'load("//rules:defs.bzl", "autotuned_py_test")\n\n'
            'autotuned_py_test(\n    name = "c_test",\n    srcs = ["c_test.py"],\n'
            f'    cache = "//{CACHE_A.replace("/a_kernels", ":a_kernels")}",\n'
            '    deps = ["//bazel_fixtures/ruleset:probe"],\n)\n')
        (team_c / "c_test.py").write_text(
            "from bazel_fixtures.ruleset import probe\n\nprobe.run('team_c')\n")
        both = regen(ws, f"//{MONO}/...")
        assert f"{CACHE_A}: ok" in both.output and "(shared by 2 tests)" in both.output
        assert kernels_in(ws.root / CACHE_A) == ["team_a", "team_c"]
        one = ws.run("run", f"{TEST_A}.regen")
        assert f"{CACHE_A} would lose entries" in one.output, one.output
        assert f"//{MONO}/team_c:c_test.dump -> {CACHE_A} (shares it)" in one.output
        assert f"{CACHE_A}: ok: unchanged" in one.output, one.output
        assert kernels_in(ws.root / CACHE_A) == ["team_a", "team_c"]
    team_c.rmdir()


# ----- 6. a mistyped pattern --------------------------------------------------------------------


def test_a_mistyped_pattern_is_named_not_reported_as_a_broken_package(
        workspace: Workspace) -> None:
    ws = workspace
    ensure_cache(ws, TEST_A, CACHE_A)
    typo = regen(ws, f"//{MONO}/tema_a/...", check=False)
    assert typo.returncode == 2, typo.output
    assert "PACKAGE FAILED TO LOAD" not in typo.output, typo.output
    assert (f"//{MONO}/tema_a/...: NO SUCH TARGET PATTERN: Bazel says \"no targets found "
            f"beneath '{MONO}/tema_a'\"; check its spelling") in typo.output, typo.output
    # With a good pattern beside it: the good one is regenerated, the typo fails the run.
    mixed = ws.run("run", "//tools:regen_cache", "--", "--check", ":a_kernels_test", ":nope",
                   cwd=ws.root / TEAM_A, check=False)
    assert mixed.returncode == 1, mixed.output
    assert f"{CACHE_A}: ok: unchanged" in mixed.output, mixed.output
    assert (f"//{TEAM_A}:nope: NO SUCH TARGET PATTERN: Bazel says \"no such target "
            f"'//{TEAM_A}:nope'") in mixed.output, mixed.output
    assert f"(relative patterns are read from //{TEAM_A}, the directory you ran in)" in (
        mixed.output)


# ----- 11. --remote_download_minimal ---------------------------------------------------------


def test_regen_under_remote_download_minimal_still_reads_the_dumps(workspace: Workspace) -> None:
    """A .bazelrc with `--remote_download_minimal` (no remote cache here: Bazel 4.2.3 accepts
    the flag and the one regen adds after it, which is what this checks on a real Bazel; the
    download itself needs a remote executor, which CI does not have)."""
    ws = workspace
    with restored(ws, ".bazelrc", CACHE_B):
        (ws.root / CACHE_B).unlink(missing_ok=True)
        with (ws.root / ".bazelrc").open("a") as rc:
            rc.write("build --remote_download_minimal\n")
        result = ws.run("run", f"//{TEAM_B}:b_kernels_test.regen")
        assert f"{CACHE_B}: ok: created" in result.output, result.output
        dry = ws.run("run", f"//{TEAM_B}:b_kernels_test.regen", "--", "--dry_run")
        assert "--remote_download_outputs=all" in dry.output, dry.output
