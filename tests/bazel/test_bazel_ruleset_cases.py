"""Real Bazel 4.2.3 against the cases real monorepos hit (issue 9): shared caches, a test that
changes directory, a user's test_main.py, Label caches, caches in another package, a broken
package during a full regen, the dump's own size/timeout, remote-execution attributes; and
issue 14's pytest-style file (`runner = "pytest"`): dump, regen, load over three shards, a strict
miss failing one item; issue 23's large committed text cache, loaded through its own index.

The fixtures live in tests/bazel/fixtures/ruleset/ (//bazel_fixtures/ruleset/... in the scratch
workspace); each case has its own package, so that one the ruleset cannot load fails alone.
Every fixture test records a fake entry per kernel name (fixtures/ruleset/probe.py), so dumps
take a second and their entries are known.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from xml.etree import ElementTree

import pytest

from autotune_cache.formats import load_results, save_results
from tests.bazel.harness import Workspace
from tests.cachetools import fake_tune, make_key

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
    assert "created: 0 winners changed, 0 re-timed, 1 new" in created.output, created.output
    assert kernels_in(cache) == ["other_pkg"]
    ws.run("test", label)
    # An empty placeholder a user committed means "no entries yet", not a broken file.
    cache.write_bytes(b"")
    again = ws.run("run", f"{label}.regen")
    assert "created: 0 winners changed, 0 re-timed, 1 new" in again.output, again.output
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


# ----- runner = "pytest" (issue 14) -------------------------------------------------------------

PYTEST_LABEL = f"//{PKG}/pytest:items_test"
PYTEST_CACHE = f"{PKG}/pytest/items_test.autotune.textproto"
PYTEST_ITEMS = sorted([*(f"items_test::test_sizes[{n}]" for n in range(1, 5)),
                       "items_test::test_plain", "items_test.TestGroup::test_first",
                       "items_test.TestGroup::test_second"])
PYTEST_KERNELS = sorted([*(f"pytest_size_{n}" for n in range(1, 5)), "pytest_group_first",
                         "pytest_group_second"])


def junit_items(ws: Workspace, label: str, total: int) -> list[tuple[str, str, str]]:
    """(item, outcome, message) of every test case in the JUnit XML of each shard's test.xml,
    the file pytest wrote to XML_OUTPUT_FILE. The item is `module[.Class]::name`."""
    items = []
    for index in range(total):
        xml = ws.outputs_root(label) / f"shard_{index + 1}_of_{total}" / "test.xml"
        for case in ElementTree.parse(xml).iter("testcase"):
            module = case.get("classname", "").rsplit("pytest.", 1)[-1]
            problem = case.find("failure")
            if problem is None:
                problem = case.find("error")
            outcome = "passed" if problem is None else problem.tag
            message = "" if problem is None else (problem.get("message", "") + (problem.text or ""))
            items.append((f"{module}::{case.get('name')}", outcome, message))
    return sorted(items)


def ensure_pytest_cache(ws: Workspace) -> Path:
    """The pytest fixture's cache, made by its `.regen` when it does not exist yet."""
    cache = ws.root / PYTEST_CACHE
    if not cache.exists():
        ws.run("run", f"{PYTEST_LABEL}.regen")
    return cache


def test_pytest_file_dumps_regens_and_loads_over_three_shards(workspace: Workspace) -> None:
    """A pytest-style file: `.regen` runs its `.dump` (pytest, unsharded, the plugin dumping)
    and writes the cache; the load test's three shards then run every item exactly once, each
    served from the cache, with pytest's JUnit XML as Bazel's test.xml."""
    ws = workspace
    (ws.root / PYTEST_CACHE).unlink(missing_ok=True)
    created = ws.run("run", f"{PYTEST_LABEL}.regen")
    assert f"{PYTEST_CACHE}: ok: created: 0 winners changed, 0 re-timed, 6 new" in \
        created.output, created.output
    assert kernels_in(ws.root / PYTEST_CACHE) == PYTEST_KERNELS
    dump_log = ws.test_log(f"{PYTEST_LABEL}.dump")
    assert "7 passed" in dump_log and "dump: wrote 6 entries to" in dump_log, dump_log[-3000:]

    result = ws.run("test", "--nocache_test_results", PYTEST_LABEL)
    assert re.search(re.escape(PYTEST_LABEL) + r"\s+PASSED in", result.output), result.output
    ran = junit_items(ws, PYTEST_LABEL, 3)
    assert ran == [(item, "passed", "") for item in PYTEST_ITEMS], ran
    hits = 0
    for index in range(3):
        log = ws.test_log(PYTEST_LABEL, (index, 3))
        # Round-robin over 7 sorted node ids: 3, 2 and 2 items; the plugin's summary is there.
        share = 3 if index == 0 else 2
        assert f"shard {index + 1} of 3 runs {share} of 7 test item(s)" in log, log[-3000:]
        assert re.search(r"=+ autotune_cache =+", log), log[-3000:]
        assert re.search(r"\d+ hits, 0 misses", log), log[-3000:]
        report = ws.report(PYTEST_LABEL, (index, 3))
        if report is not None:
            assert report["misses"] == 0 and report["benchmarks"] == 0, report
            hits += report["hits"]
    assert hits == len(PYTEST_KERNELS)


def test_pytest_stale_entry_fails_only_the_item_that_launched_it(workspace: Workspace) -> None:
    """Strict mode under pytest: a stale entry fails the one item whose kernel missed, with the
    stale-cache message and the regen hint in Bazel's test log; the other six pass."""
    ws = workspace
    cache = ensure_pytest_cache(ws)
    original = cache.read_bytes()
    entries = load_results(cache)
    for entry in entries:
        if entry.key.kernel == "pytest_size_3":
            entry.key.device.name = "NVIDIA H100 80GB"
    save_results(cache, entries)
    try:
        result = ws.run("test", PYTEST_LABEL, check=False)
    finally:
        cache.write_bytes(original)
    assert result.returncode == 3, result.output
    ran = junit_items(ws, PYTEST_LABEL, 3)
    failed = [(item, message) for item, outcome, message in ran if outcome != "passed"]
    assert [item for item, _ in failed] == ["items_test::test_sizes[3]"], ran
    # A short failure (issue 20): the stale-cache message, not MissingResultError's stack.
    assert "no tuned result for" in failed[0][1] and "NVIDIA H100 80GB" in failed[0][1], failed
    assert sorted(item for item, _, _ in ran) == PYTEST_ITEMS
    logs = "\n".join(ws.test_log(PYTEST_LABEL, (i, 3)) for i in range(3))
    assert "FAILED" in logs and "test_sizes[3]" in logs and "stale" in logs, logs[-3000:]
    assert f"bazel run {PYTEST_LABEL}.regen" in logs, logs[-3000:]


def test_pytest_dump_refuses_forced_shards(workspace: Workspace) -> None:
    """A pytest `.dump` is never sharded either (the env that forced sharding gives it, as in
    test_bazel_examples.py: Bazel 4.2.3 has no --test_sharding_strategy=forced=K)."""
    label = f"{PYTEST_LABEL}.dump"
    result = workspace.run("test", label, "--run_under=env TEST_TOTAL_SHARDS=3 TEST_SHARD_INDEX=1",
                           check=False)
    assert result.returncode == 3, result.output
    log = workspace.test_log(label)
    assert f"autotune dump: {label} is running as shard 1 of 3" in log, log[-2000:]


# ----- a large committed text cache loads through its own index (issue 23) ------------------------

INDEX_PKG = f"{PKG}/text_index"
INDEX_LABEL = f"//{INDEX_PKG}:text_index_test"
INDEX_CACHE = f"{INDEX_PKG}/text_index_test.autotune.textproto"


def write_cache(path: Path, entries: int, n: int = 128) -> int:
    """A committed text cache of `entries` tuned matmul entries (6 timed candidates each);
    returns its size."""
    save_results(path, [fake_tune(make_key(problem={"M": m, "N": n, "a": "float16"}))
                        for m in range(entries)])
    return path.stat().st_size


def test_large_text_cache_loads_through_its_index(workspace: Workspace) -> None:
    """No generated target and no variable but the flags: the load test indexes the committed
    file (parsing no entry at load), and its hits' origins and stale message name that file.
    A damaged file fails the test (not the build) with the library's message naming it."""
    ws = workspace
    cache = ws.root / INDEX_CACHE
    write_cache(cache, 400)
    targets = ws.run("query", f"//{INDEX_PKG}:all").stdout.split()
    assert sorted(targets) == sorted(f"{INDEX_LABEL}{suffix}"
                                     for suffix in ("", ".dump", ".regen")), targets
    assert "AUTOTUNE_BINARY_CACHE_DIR" not in build_attrs(ws, INDEX_LABEL)
    ws.run("test", INDEX_LABEL, "--nocache_test_results")
    report = json.loads(ws.undeclared_output(INDEX_LABEL, "text_index_probe.json"))
    assert "AUTOTUNE_BINARY_CACHE_DIR" not in report["autotune_env"], report
    (loaded,) = report["files"]
    assert loaded["entries"] == 400 and loaded["indexed"], report
    assert loaded["parsed_by_load"] == 0, report
    assert loaded["path"].endswith(f"/{INDEX_CACHE}") and loaded["hit_origin"] == loaded["path"]
    stale = loaded["stale_message"]
    assert "toolchain [triton=3.6.0] != [triton=9.9.9]" in stale, stale
    # "Searched:" and the near miss's origin, each relative to the test's working directory.
    shown = loaded["path"].removeprefix(loaded["cwd"] + "/")
    assert stale.count(shown) == 2 and f"{loaded['cwd']}/" not in stale, stale
    assert f"bazel run {INDEX_LABEL}.regen" in stale, stale

    cache.write_text("this is not a results file\n" * 20000)
    result = ws.run("test", INDEX_LABEL, check=False)
    assert result.returncode == 3, result.output  # a test failure, not a build failure
    log = ws.test_log(INDEX_LABEL)
    assert f"{INDEX_CACHE}: not a valid text-format autotune results file" in log, log[-3000:]


# ----- issue 19, item 6: select() in env, data and args ------------------------------------------

SELECT_LABEL = f"//{PKG}/selects:select_test"
SELECT_CACHE = f"{PKG}/selects/select_test.autotune.textproto"


def test_select_in_env_data_and_args_works_as_for_py_test(workspace: Workspace) -> None:
    """`env`, `data` and `args` as select()s: the macro's variables still reach the test (the
    dump regenerates the branch it ran, the load test hits it with 0 benchmarks), and `-c opt`
    takes the other branch of all three, whose kernel the committed cache lacks: a strict miss
    naming the regen command. Before, loading the BUILD file failed inside the ruleset with
    "unsupported binary operation: string in select"."""
    ws = workspace
    (ws.root / SELECT_CACHE).unlink(missing_ok=True)
    created = ws.run("run", f"{SELECT_LABEL}.regen")
    assert f"{SELECT_CACHE}: ok: created" in created.output, created.output
    assert kernels_in(ws.root / SELECT_CACHE) == ["select_default"]
    ws.run("test", SELECT_LABEL)
    log = ws.test_log(SELECT_LABEL)
    assert "select branch: default AUTOTUNE_FLAGS: --autotune_cache_mode=read" in log, log
    assert re.search(r"autotune_cache: 1 hits, 0 misses, 0 stale, 0 benchmarks", log), log
    opt = ws.run("test", "-c", "opt", SELECT_LABEL, check=False)
    assert opt.returncode == 3, opt.output
    log = ws.test_log(SELECT_LABEL)
    assert "select branch: opt" in log, log
    assert f"bazel run {SELECT_LABEL}.regen" in log, log


# ----- issue 21, item 1: all_kernels = True under Bazel, both runners ----------------------------

ROUTED = f"{PKG}/all_kernels"


@pytest.mark.parametrize("name", ["routed_main_test", "routed_pytest_test"])
def test_all_kernels_serves_a_third_party_kernel_from_the_cache(workspace: Workspace,
                                                                name: str) -> None:
    """A plain `@triton.autotune` kernel in a separate py_library (a stand-in for an installed
    library) is tuned by the dump under its module-qualified name, and the load test, strict,
    serves it from the committed cache with 0 benchmarks."""
    ws = workspace
    label, cache = f"//{ROUTED}:{name}", ws.root / ROUTED / f"{name}.autotune.textproto"
    cache.unlink(missing_ok=True)
    created = ws.run("run", f"{label}.regen")
    assert f"{ROUTED}/{name}.autotune.textproto: ok: created" in created.output, created.output
    assert kernels_in(cache) == ["bazel_fixtures.ruleset.all_kernels.vendor_kernels."
                                 "triple_kernel"]
    ws.run("test", "--nocache_test_results", label)
    report = ws.report(label)
    assert report is not None, ws.test_log(label)
    assert (report["hits"], report["misses"], report["benchmarks"]) == (1, 0, 0), report
