"""rules_autotune used as an external repository, as a WORKSPACE-mode user gets it.

The ruleset copy is exactly a user's checkout (no file added); the user's WORKSPACE has
local_repository + rules_autotune_dependencies() + install_deps(), as docs/bazel.md says.
Checks that every label inside the macro resolves to the ruleset's repository (Label()), that
`<name>.regen` writes into the *user's* source tree, that the regenerated cache loads, and
that a test defined in a third repository (@ext_lib) names its own repository in its hint and
gets a one-sentence refusal from its `.regen` instead of "no such package".
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bazel.harness import REPO, Workspace, bazel_or_skip

USER_BUILD = """\
load("@rules_autotune//rules:defs.bzl", "autotuned_py_test")
load("@rules_python//python:defs.bzl", "py_library")

py_library(
    name = "kernels",
    srcs = ["example_env.py", "vector_add.py"],
    deps = ["@rules_autotune//:autotune_cache"],
)

autotuned_py_test(
    name = "vector_add_test",
    srcs = ["vector_add_test.py"],
    deps = [":kernels"],
)

# The cache spelled with the workspace's own name (issue 19, item 6).
autotuned_py_test(
    name = "own_name_test",
    srcs = ["vector_add_test.py"],
    cache = "@user_workspace//app:own_name.autotune.textproto",
    main = "vector_add_test.py",
    deps = [":kernels"],
)
"""


EXT_LIB_BUILD = """\
load("@rules_autotune//rules:defs.bzl", "autotuned_py_test")

autotuned_py_test(
    name = "lib_test",
    srcs = ["lib_test.py"],
    deps = ["@rules_autotune//:autotune_cache"],
)
"""

EXT_LIB_TEST = """\
from autotune_cache import CacheKey, Device, get_cache

get_cache().lookup(CacheKey(kernel="lib_kernel", source_fingerprint="0", configs_fingerprint="1",
                            problem={"n": 1}, device=Device("cpu", "cpu", 0)))
"""


@pytest.fixture(scope="module")
def user_workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    """A consumer workspace with an `app` package holding one Triton example, no cache yet, and
    a third repository @ext_lib with an autotuned test of its own."""
    bazel = bazel_or_skip()
    base = tmp_path_factory.mktemp("bazel_external")
    ext_lib = base / "ext_lib"
    (ext_lib / "lib").mkdir(parents=True)
    (ext_lib / "WORKSPACE").write_text('workspace(name = "ext_lib")\n')
    (ext_lib / "lib/BUILD.bazel").write_text(EXT_LIB_BUILD)
    (ext_lib / "lib/lib_test.py").write_text(EXT_LIB_TEST)
    ws = Workspace.create_consumer(
        base, base / "output_user_root", bazel,
        extra_workspace=f'local_repository(\n    name = "ext_lib",\n    path = "{ext_lib}",\n)\n\n')
    app = ws.root / "app"
    app.mkdir()
    for name in ("example_env.py", "vector_add.py", "vector_add_test.py"):
        shutil.copy2(REPO / "examples/triton" / name, app / name)
    (app / "BUILD.bazel").write_text(USER_BUILD)
    try:
        yield ws
    finally:
        ws.release()


@pytest.mark.bazel
def test_user_workspace_regenerates_and_loads_its_cache(user_workspace: Workspace) -> None:
    ws = user_workspace
    cache = ws.root / "app/vector_add_test.autotune.textproto"
    # No cache yet: the test builds, and require_complete fails it with the regen hint.
    missing = ws.run("test", "//app:vector_add_test", check=False)
    assert missing.returncode == 3, missing.output
    assert "bazel run //app:vector_add_test.regen" in ws.test_log("//app:vector_add_test")
    # The .regen target (built from @rules_autotune//tools) writes into the user's tree.
    regen = ws.run("run", "//app:vector_add_test.regen")
    assert "app/vector_add_test.autotune.textproto: ok: created: 0 winners changed" in \
        regen.output, regen.output
    assert cache.is_file() and not (Path(ws.root).parent / "rules_autotune/app").exists()
    # glob() now finds the file: load mode passes without tuning anything.
    ws.run("test", "//app:vector_add_test")
    log = ws.test_log("//app:vector_add_test")
    assert re.search(r"autotune_cache: [1-9]\d* hits, 0 misses, 0 stale, 0 benchmarks", log), log


@pytest.mark.bazel
def test_test_of_another_repository_names_it_in_hint_and_regen(user_workspace: Workspace) -> None:
    """Bug 3: the hint is `bazel run @ext_lib//lib:lib_test.regen`, and that command explains in
    one sentence why it does not write @ext_lib's cache (no raw "no such package")."""
    ws = user_workspace
    missing = ws.run("test", "@ext_lib//lib:lib_test", check=False)
    assert missing.returncode == 3, missing.output
    log = (ws.testlogs / "external/ext_lib/lib/lib_test/test.log").read_text()
    assert "bazel run @ext_lib//lib:lib_test.regen" in log, log
    regen = ws.run("run", "@ext_lib//lib:lib_test.regen", check=False)
    assert regen.returncode == 2, regen.output
    assert "no such package" not in regen.output, regen.output
    assert ("@ext_lib//lib:lib_test.dump belongs to repository @ext_lib, and regen_cache writes "
            "caches only into the main workspace's source tree") in regen.output, regen.output


@pytest.mark.bazel
def test_a_cache_label_with_the_workspaces_own_name_is_this_repository(
        user_workspace: Workspace) -> None:
    """`cache = "@user_workspace//app:..."` names the main repository (its `workspace(name)`):
    Bazel's repository mapping says so, and the macro uses it. Before, the BUILD file failed
    with "... is in repository @user_workspace ... Copy the file into this repository"."""
    ws = user_workspace
    regen = ws.run("run", "//app:own_name_test.regen")
    assert "app/own_name.autotune.textproto: ok: created" in regen.output, regen.output
    ws.run("test", "//app:own_name_test")
    log = ws.test_log("//app:own_name_test")
    assert re.search(r"autotune_cache: [1-9]\d* hits, 0 misses, 0 stale, 0 benchmarks", log), log


@pytest.mark.bazel
def test_a_one_line_alias_gives_the_short_regen_command(user_workspace: Workspace) -> None:
    """docs/bazel.md: `//tools:regen_cache` is "no such package" in a user's workspace; one
    `alias` line in the user's tools/BUILD.bazel makes it work, from any directory."""
    ws = user_workspace
    missing = ws.run("run", "//tools:regen_cache", "--", "--dry_run", check=False)
    assert missing.returncode != 0 and "no such package 'tools'" in missing.output, missing.output
    (ws.root / "tools").mkdir()
    (ws.root / "tools/BUILD.bazel").write_text(
        'alias(name = "regen_cache", actual = "@rules_autotune//tools:regen_cache")\n')
    short = ws.run("run", "//tools:regen_cache", "--", "--dry_run", ":vector_add_test",
                   cwd=ws.root / "app")
    assert "//app:vector_add_test.dump -> app/vector_add_test.autotune.textproto" in (
        short.output), short.output
