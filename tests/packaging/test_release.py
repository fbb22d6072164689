"""The release (docs/release.md): `tools/release.sh --dry-run` builds and checks both artifacts on
a clean clone and tags nothing, the script refuses a dirty tree, and the install lines name a
checkout or the wheel of the current version (no address: the project has none), so a version
bump that forgets them fails here.

The clone holds this working tree's files (tracked and untracked, not ignored), committed, so the
script under test is the one being edited. No tag is cloned: the dry run's checks would only
report an existing one."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import autotune_cache

ROOT = Path(__file__).resolve().parents[2]
VERSION = autotune_cache.__version__
pytestmark = pytest.mark.package


def git(*args: str, cwd: Path) -> str:
    proc = subprocess.run(["git", "-c", "user.name=release test", "-c", "user.email=t@example.com",
                           *args], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A clean clone whose last commit is this working tree."""
    pytest.importorskip("build", reason="the packaging checks need the test extra (build)")
    where = tmp_path_factory.mktemp("release") / "rules_autotune"
    git("clone", "-q", "--no-tags", str(ROOT), str(where), cwd=ROOT)
    files = git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT)
    for rel in filter(None, files.split("\0")):
        src, dst = ROOT / rel, where / rel
        if dst.is_symlink() or dst.is_file():
            dst.unlink()
        if src.is_symlink() or src.is_file():  # a file deleted here stays deleted there
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst, follow_symlinks=False)
    git("add", "-A", cwd=where)
    git("commit", "-q", "--allow-empty", "-m", "the working tree", cwd=where)
    return where


def release(clone: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOTUNE_", "PYTHON"))}
    env["AUTOTUNE_VENV"] = str(Path(sys.executable).parent.parent)  # build and twine are here
    return subprocess.run(["bash", "tools/release.sh", *args], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_dry_run_builds_and_checks_both_artifacts_and_tags_nothing(clone):
    proc = release(clone, "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    built = sorted(p.name for p in (clone / "dist").iterdir())
    assert built == [f"autotune_cache-{VERSION}-py3-none-any.whl",
                     f"autotune_cache-{VERSION}.tar.gz"], built
    assert proc.stdout.count("PASSED") == 2, proc.stdout  # twine check --strict, per file
    assert "made no tag" in proc.stdout
    assert git("tag", "--list", cwd=clone) == ""
    assert git("status", "--porcelain", cwd=clone) == "", "the build left files git sees"


def test_a_dirty_tree_is_refused_before_anything_is_built(clone):
    stray = clone / "stray.txt"
    stray.write_text("not committed\n")
    try:
        proc = release(clone, "--dry-run")
    finally:
        stray.unlink()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the working tree is not clean" in proc.stderr and "stray.txt" in proc.stderr
    assert "building" not in proc.stderr


@pytest.mark.parametrize("doc", ["README.md", "docs/quickstart-pytest.md"])
def test_the_install_lines_name_a_checkout_and_this_versions_wheel(doc):
    """Issue 52: the install lines named a GitHub address and a tag that do not exist. They
    install a checkout (pinned by commit) or a wheel built in one, and name no address."""
    lines = [line for line in (ROOT / doc).read_text(encoding="utf-8").splitlines()
             if re.search(r"pip install .*(autotune_cache|rules_autotune)[-\[]", line)]
    from_checkout = [line for line in lines if "/path/to/rules_autotune[" in line]
    from_wheel = [line for line in lines if ".whl" in line]
    assert from_checkout and from_wheel, f"{doc} lost an install line: {lines}"
    assert not [line for line in lines if "://" in line], f"{doc} names an address: {lines}"
    for line in from_wheel:
        assert f"autotune_cache-{VERSION}-py3-none-any.whl" in line, \
            f"{doc}: not the {VERSION} wheel: {line}"
