"""Real Bazel 4.2.3 against the cases real monorepos hit (issue 9): shared caches, a test that
changes directory, a user's test_main.py, Label caches, caches in another package, a broken
package during a full regen, the dump's own size/timeout, remote-execution attributes.

The fixtures live in tests/bazel/fixtures/ruleset/ (//bazel_fixtures/ruleset/... in the scratch
workspace); each case has its own package, so that one the ruleset cannot load fails alone.
Every fixture test records a fake entry per kernel name (fixtures/ruleset/probe.py), so dumps
take a second and their entries are known.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autotune_cache.formats import load_results
from tests.bazel.harness import Workspace

PKG = "bazel_fixtures/ruleset"


def kernels_in(path: Path) -> list[str]:
    """The kernel names of a committed cache's entries, sorted."""
    return sorted(entry.key.kernel for entry in load_results(path))


def regen(ws: Workspace, *args: str, check: bool = True):
    """`bazel run //tools:regen_cache -- <args>`."""
    return ws.run("run", "//tools:regen_cache", "--", *args, check=check)


def build_attrs(ws: Workspace, label: str) -> str:
    """`bazel query --output=build` of one target (its attributes as Bazel sees them)."""
    return ws.run("query", label, "--output=build").stdout


def test_two_tests_sharing_one_cache_keep_both_entries(workspace: Workspace) -> None:
    """Bug 1: the shared file holds the union, both tests pass, --check is stable, and one
    test's `.regen` keeps the other's entries."""
    ws = workspace
    cache = ws.root / PKG / "shared/shared.autotune.textproto"
    tests = [f"//{PKG}/shared:a_test", f"//{PKG}/shared:b_test"]
    result = regen(ws, *tests)
    assert "(shared by 2 tests)" in result.output, result.output
    assert kernels_in(cache) == ["shared_a", "shared_b"]
    ws.run("test", *tests)
    assert regen(ws, "--check", *tests).returncode == 0
    # One test's .regen runs its sibling's dump too, so b's entry survives.
    single = ws.run("run", f"//{PKG}/shared:a_test.regen")
    assert f"//{PKG}/shared:b_test.dump" in single.output, single.output
    assert kernels_in(cache) == ["shared_a", "shared_b"]


def test_cache_is_found_after_the_test_changes_directory(workspace: Workspace) -> None:
    """Bug 2: the load flag is an absolute runfiles path (TEST_WORKSPACE/...), not relative."""
    ws = workspace
    label = f"//{PKG}/chdir:chdir_test"
    ws.run("run", f"{label}.regen")
    ws.run("test", label)
    log = ws.test_log(label)
    assert re.search(r"autotune_cache: 1 hits, 0 misses, 0 stale, 0 benchmarks", log), log


def test_user_test_main_does_not_collide_with_the_wrapper(workspace: Workspace) -> None:
    """Bug 4: a user's test_main.py next to a sharded test and its dump."""
    ws = workspace
    label = f"//{PKG}/collide:collide_test"
    ws.run("build", label, f"{label}.dump")
    ws.run("test", label)


def test_every_spelling_of_the_main_repository_is_accepted(workspace: Workspace) -> None:
    """Bug 5: Label objects, "@//" and "@@//" name a cache in the test's own repository."""
    ws = workspace
    for name, file_name in (("label_object_test", "label_object"), ("at_main_test", "at_main"),
                            ("at_at_main_test", "at_at_main")):
        attrs = build_attrs(ws, f"//{PKG}/labels:{name}.dump")
        assert f'"autotune_cache_path={PKG}/labels/{file_name}.autotune.textproto"' in attrs, attrs
    ws.run("run", f"//{PKG}/labels:label_object_test.regen")
    ws.run("test", f"//{PKG}/labels:label_object_test")


def test_cache_in_another_package_is_created_by_the_first_regen(workspace: Workspace) -> None:
    """Bug 6: a missing cache in another package, then an empty one, are both regenerated."""
    ws = workspace
    cache = ws.root / PKG / "caches/other_pkg.autotune.textproto"
    label = f"//{PKG}/user:other_pkg_test"
    cache.unlink(missing_ok=True)
    created = ws.run("run", f"{label}.regen")
    assert "created: +1 added" in created.output, created.output
    assert kernels_in(cache) == ["other_pkg"]
    ws.run("test", label)
    # An empty placeholder a user committed means "no entries yet", not a broken file.
    cache.write_bytes(b"")
    again = ws.run("run", f"{label}.regen")
    assert "created: +1 added" in again.output, again.output
    assert kernels_in(cache) == ["other_pkg"]


def test_a_broken_package_does_not_stop_a_full_regen(workspace: Workspace) -> None:
    """Bug 7: the query keeps going, the loadable caches are written, the broken package is
    named and the run fails."""
    ws = workspace
    broken = ws.root / PKG / "broken"
    broken.mkdir()
    (broken / "BUILD.bazel").write_text('this is not starlark(\n')
    cache = ws.root / PKG / "sizes/default_test.autotune.textproto"
    try:
        result = regen(ws, f"//{PKG}/...", check=False)
    finally:
        (broken / "BUILD.bazel").unlink()
        broken.rmdir()
    assert result.returncode == 1, result.output
    assert f"//{PKG}/broken: PACKAGE FAILED TO LOAD" in result.output, result.output
    assert kernels_in(cache) == ["sizes"]


def test_dump_has_its_own_size_and_timeout(workspace: Workspace) -> None:
    """Bug 8: the load test's size/timeout are not the dump's."""
    ws = workspace
    default = build_attrs(ws, f"//{PKG}/sizes:default_test.dump")
    assert 'size = "large"' in default and 'timeout = "eternal"' in default, default
    load = build_attrs(ws, f"//{PKG}/sizes:default_test")
    assert 'size = "small"' in load and 'timeout = "short"' in load, load
    custom = build_attrs(ws, f"//{PKG}/sizes:custom_test.dump")
    assert 'size = "enormous"' in custom and 'timeout = "long"' in custom, custom


def test_dump_carries_the_remote_pool_and_regen_hands_jobs_to_bazel(
        workspace: Workspace) -> None:
    """Remote execution: exec_properties and extra tags on the dump only; with
    --remote_executor regen_cache neither pins GPUs nor caps local jobs."""
    ws = workspace
    dump = build_attrs(ws, f"//{PKG}/remote:remote_test.dump")
    assert re.search(r'exec_properties = \{"Pool": "gpu-h100"\}', dump), dump
    assert '"requires-gpu"' in dump and '"no-remote-exec"' not in dump, dump
    load = build_attrs(ws, f"//{PKG}/remote:remote_test")
    assert "exec_properties" not in load and '"requires-gpu"' not in load, load
    result = regen(ws, "--dry_run", "--gpus=0,1", "--bazel_flag=--remote_executor=grpc://pool:8980",
                   "--bazel_flag=--jobs=64", f"//{PKG}/remote:remote_test")
    assert "Bazel schedules the dumps (--remote_executor=grpc://pool:8980 --jobs=64)" in \
        result.output, result.output
    command = re.search(r"would run: (.*)", result.output).group(1)
    assert "--remote_executor=grpc://pool:8980" in command and "--jobs=64" in command, command
    assert "--run_under" not in command and "--local_test_jobs" not in command, command
    assert command.endswith(f"//{PKG}/remote:remote_test.dump"), command


@pytest.mark.parametrize("spelling", ["//", "@//"])
def test_regen_hint_names_the_main_repository_label(workspace: Workspace, spelling: str) -> None:
    """The hint of a main-repository test is the label a user types (no repository prefix)."""
    attrs = build_attrs(workspace, f"{spelling}{PKG}/chdir:chdir_test")
    assert f'"AUTOTUNE_REGEN_HINT": "bazel run //{PKG}/chdir:chdir_test.regen"' in attrs, attrs
