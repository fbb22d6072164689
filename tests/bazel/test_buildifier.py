"""Every Starlark file in the repository is buildifier-clean (format and lint warnings)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STARLARK = ("*.bzl", "*.bazel", "WORKSPACE", "*/WORKSPACE", "MODULE.bazel", "*/MODULE.bazel")


def find_buildifier() -> str | None:
    """$BUILDIFIER, buildifier on PATH, or the npm install tools/dev.sh makes (.tools/)."""
    for candidate in (os.environ.get("BUILDIFIER"), shutil.which("buildifier"),
                      str(REPO / ".tools/node_modules/.bin/buildifier")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def starlark_files() -> list[str]:
    """Tracked and new (not ignored) Starlark files, relative to the repository root."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *STARLARK],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()
    return sorted({f for f in listed if (REPO / f).is_file()})


def test_starlark_is_buildifier_clean() -> None:
    buildifier = find_buildifier()
    if buildifier is None:
        pytest.skip("buildifier not installed: npm install --prefix .tools @bazel/buildifier "
                    "(tools/dev.sh setup does this)")
    files = starlark_files()
    assert "rules/private/autotuned_py_test.bzl" in files, files
    done = subprocess.run([buildifier, "-mode=check", "-lint=warn", *files], cwd=REPO,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, (
        f"buildifier found problems (fix with `{buildifier} -mode=fix -lint=fix FILE`):\n"
        f"{done.stdout}{done.stderr}")
