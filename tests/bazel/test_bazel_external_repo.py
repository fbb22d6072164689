"""rules_autotune used as an external repository, as a user's workspace gets it.

Checks that every label inside the macro resolves to the ruleset's repository (Label()), that
`<name>.regen` writes into the *user's* source tree, and that the regenerated cache loads.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bazel.harness import REPO, Workspace, find_bazel

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
"""


@pytest.fixture(scope="module")
def user_workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    """A consumer workspace with an `app` package holding one Triton example, no cache yet."""
    bazel = find_bazel()
    if bazel is None:
        pytest.skip("Bazel 4.2.3 is not installed: apt-get install bazel-bootstrap (bazel-4)")
    base = tmp_path_factory.mktemp("bazel_external")
    ws = Workspace.create_consumer(base, base / "output_user_root", bazel)
    app = ws.root / "app"
    app.mkdir()
    for name in ("example_env.py", "vector_add.py", "vector_add_test.py"):
        shutil.copy2(REPO / "examples/triton" / name, app / name)
    (app / "BUILD.bazel").write_text(USER_BUILD)
    try:
        yield ws
    finally:
        ws.shutdown()


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
    assert "app/vector_add_test.autotune.textproto: ok: created: +" in regen.output, regen.output
    assert cache.is_file() and not (Path(ws.root).parent / "rules_autotune/app").exists()
    # glob() now finds the file: load mode passes without tuning anything.
    ws.run("test", "//app:vector_add_test")
    log = ws.test_log("//app:vector_add_test")
    assert re.search(r"autotune_cache: [1-9]\d* hits, 0 misses, 0 stale, 0 benchmarks", log), log
