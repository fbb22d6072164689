"""Fixtures of the Bazel integration tests: one scratch workspace and Bazel server per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.bazel.harness import Workspace, bazel_or_skip

# The fixtures are Bazel test mains (named like Bazel users name them, *_test.py) that only run
# inside the scratch workspaces, never under pytest.
collect_ignore_glob = ["fixtures/*"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that runs real Bazel (uses `workspace`) carries the `bazel` marker."""
    for item in items:
        if "workspace" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.bazel)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    """A scratch copy of the repository with its own --output_user_root, shared by a module.

    Sharing one workspace (and one Bazel server) per module keeps the suite fast; tests that
    edit files restore them (see `restored`).
    """
    bazel = bazel_or_skip()
    base = tmp_path_factory.mktemp("bazel")
    ws = Workspace.create(base / "ws", base / "output_user_root", bazel)
    try:
        yield ws
    finally:
        ws.release()
