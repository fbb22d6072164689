"""`bazel build //...` in the ruleset's own repository (issue 19, item 6), on Bazel 4.2.3.

A copy of exactly the files git tracks (a contributor's clone), with the offline stand-ins for
the repositories Bazel 4 would download. Before issue 19 it failed: the integration tests'
fixture packages (tests/bazel/fixtures/..., written for the scratch workspaces'
//bazel_fixtures/...) were packages of this repository too. .bazelignore now leaves them out.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tests.bazel.harness import OVERRIDES, REPO, Workspace, bazel_or_skip


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    """The tracked files of this repository (as `git clone` gives them), plus a .bazelrc
    for the offline Bazel 4 run."""
    bazel = bazel_or_skip()
    base = tmp_path_factory.mktemp("bazel_own_repo")
    root = base / "rules_autotune"
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True, text=True, check=True).stdout
    for name in listed.splitlines():
        source = REPO / name
        if source.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    ws = Workspace(root=root, bazel=bazel, output_user_root=base / "output_user_root")
    with (root / ".bazelrc").open("a") as rc:
        rc.write("\n# tests/bazel/test_bazel_own_repo.py: offline Bazel 4.2.3\n")
        rc.write(ws.common_bazelrc(OVERRIDES))
    try:
        yield ws
    finally:
        ws.release()


def test_bazel_build_everything_in_the_ruleset_repository(clone: Workspace) -> None:
    built = clone.run("build", "//...", check=False)
    assert built.returncode == 0, built.output[-6000:]
    packages = clone.run("query", "//...", "--output=package").stdout.split()
    assert not [p for p in packages if p.startswith(("tests/", "e2e"))], packages
    assert "tools" in packages and "examples/triton" in packages, packages
