"""The package a team pins: the sdist and wheel build, pass `twine check`, hold what the docs
promise (the docs themselves included: help text names them by path, since the project has no
web address), name no address, install into a fresh virtualenv where the pytest quickstart runs,
install from a commit of the checkout, and type-check under `mypy --strict`. They are built
from what a fresh clone holds (fresh_clone), so a file only this machine has cannot hide a gap.
One version number in three places. The release script: test_release.py.

The wheel is built from the sdist (`python -m build`'s default), so a file missing from the
sdist fails here, not on a user's `pip install autotune_cache-X.tar.gz`."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

import autotune_cache
from autotune_cache.foundation.urls import docs_url
from tests.docs.test_doc_snippets import plugin_env, run, snippets

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.package

USER_FILE = '''\
from pathlib import Path

import autotune_cache
from autotune_cache import entry_pb2
from autotune_cache.triton import autotune


def kernels(path: Path) -> list[str]:
    results = entry_pb2.AutotuneResultsFile()
    results.ParseFromString(path.read_bytes())
    entry: entry_pb2.Entry = results.entries[0]
    return [entry.key.kernel, *(e.key.kernel for e in results.entries)]


def settings() -> autotune_cache.Settings:
    return autotune_cache.parse_flags("--autotune_cache_dir=/tmp/cache", env={})


def cache() -> autotune_cache.Cache:
    return autotune_cache.get_cache()


print(autotune, autotune_cache.__version__)
'''


def fresh_clone(dest: Path) -> Path:
    """What a fresh clone of this checkout holds: the files git tracks, and the new ones it
    does not ignore (uncommitted work is built too), never an ignored build output (a generated
    file only this machine has, `build/`, `*.egg-info`). Without git: the checkout itself."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True)
    if listed.returncode != 0:
        return ROOT
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the work tree is not there
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def build(out: Path) -> tuple[Path, Path]:
    """The sdist, and the wheel built from it, of a fresh clone (fresh_clone)."""
    tree = fresh_clone(out.with_name(f"{out.name}-clone"))
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out),
                           str(tree)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return sdist, wheel


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> tuple[Path, Path]:
    pytest.importorskip("build", reason="the packaging checks need the test extra (build)")
    return build(tmp_path_factory.mktemp("dist"))


def test_twine_check_passes(dist):
    proc = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, dist)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_wheel_holds_what_the_docs_promise(dist):
    _, wheel = dist
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        info = f"autotune_cache-{autotune_cache.__version__}.dist-info"
        entry_points = whl.read(f"{info}/entry_points.txt").decode()
        metadata = whl.read(f"{info}/METADATA").decode()
    for proto in ROOT.joinpath("autotune_cache").rglob("*.proto"):
        rel = proto.relative_to(ROOT).with_suffix("")
        for suffix in ("_pb2.py", "_pb2.pyi"):
            assert f"{rel}{suffix}" in names, f"{rel}{suffix} is missing from {wheel.name}"
    assert {"autotune_cache/py.typed", "autotune_cache_all_kernels.pth"} <= names
    assert "[pytest11]\nautotune_cache.pytest_plugin = autotune_cache.pytest_plugin" in \
        entry_points
    assert "autotune-cache = autotune_cache.cli:run" in entry_points
    assert f"\nVersion: {autotune_cache.__version__}\n" in metadata
    assert not any(n.startswith(("tests/", "tools/", "bench/")) for n in names)
    description = metadata.split("\n\n", 1)[1]
    dead = re.findall(r"\]\((?!https?://|#)[^)]*\)", description)
    assert not dead, f"links that are dead on a package index: {dead}"
    assert "the results cache (`docs/cache.md`)" in description


def test_the_wheel_names_no_address_and_carries_the_docs(dist):
    """The project has no web address (issue 52): no Project-URL, no URL of ours in the
    metadata. The docs ship in the package instead, where help text names them."""
    _, wheel = dist
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        metadata = whl.read(f"autotune_cache-{autotune_cache.__version__}.dist-info/METADATA")
    assert "Project-URL" not in metadata.decode()
    assert not re.findall(r"https?://\S*rules.autotune", metadata.decode(), re.I)
    pages = {f"autotune_cache/docs/{p.relative_to(ROOT / 'docs')}"
             for p in (ROOT / "docs").rglob("*.md")}
    assert pages and not pages - names, sorted(pages - names)


def test_help_text_names_docs_pages_the_user_has(tmp_path):
    """Help text and messages name docs pages by path: the checkout's docs/ here, the package's
    copy in an installed wheel (test_the_pytest_quickstart_runs_from_the_installed_wheel); every
    page they name exists."""
    pages = {m[1] for src in ROOT.joinpath("autotune_cache").rglob("*.py")
             for m in re.finditer(r"docs_url\([\"']([^\"'#]+)", src.read_text(encoding="utf-8"))}
    assert pages, "no docs_url() call found"
    assert not [p for p in pages if not (ROOT / "docs" / p).is_file()], pages
    assert docs_url("pytest.md") == str(ROOT / "docs" / "pytest.md")
    assert docs_url("reference.md#flags") == f"{ROOT / 'docs' / 'reference.md'}#flags"
    proc = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
                          capture_output=True, text=True, cwd=tmp_path, env=plugin_env())
    assert proc.returncode == 0, proc.stderr
    assert f"autotune results cache (docs: {docs_url('pytest.md')})" in " ".join(
        proc.stdout.split())


def test_the_sdist_carries_the_docs_the_description_names(dist):
    import tarfile

    sdist, _ = dist
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"CHANGELOG.md", "docs/cache.md", "docs/quickstart-pytest.md", "MANIFEST.in",
            "autotune_cache/triton/autotune_cache_all_kernels.pth"} <= names


def test_one_version_in_package_module_and_changelog():
    version = autotune_cache.__version__
    module = (ROOT / "MODULE.bazel").read_text()
    assert re.search(r'module\(\s*name = "rules_autotune",\s*version = "([^"]+)"', module)[1] \
        == version, "MODULE.bazel's version differs from autotune_cache.__version__"
    changelog = (ROOT / "CHANGELOG.md").read_text()
    first = re.search(r"^## \[(\d[^\]]*)\]", changelog, re.M)
    assert first and first[1] == version, (
        f"CHANGELOG.md's first release heading is {first and first[1]}, not {version} "
        "(docs/release.md)")


def test_classifiers_claim_the_pythons_the_readme_says_are_tested():
    pyproject = (ROOT / "pyproject.toml").read_text()
    claimed = set(re.findall(r'"Programming Language :: Python :: (3\.\d+)"', pyproject))
    row = next(line for line in (ROOT / "README.md").read_text().splitlines()
               if line.startswith("| Python |"))
    tested = set(re.findall(r"3\.\d+", row.split("|")[2]))
    assert claimed == tested, f"classifiers {claimed} but README tests {tested}"
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in tested


@pytest.fixture(scope="module")
def fresh_venv(dist, tmp_path_factory) -> Path:
    """A virtualenv with only the wheel and what its extras pull (torch pinned to the CPU
    wheel, as docs/quickstart-pytest.md tells a reader without a GPU), installed without
    byte-compiling: compiling every module of torch is most of the install's CPU time."""
    _, wheel = dist
    install = re.search(r'^pip install "/path/to/rules_autotune\[([\w,]+)\]"$',
                        (ROOT / "docs" / "quickstart-pytest.md").read_text(), re.M)
    assert install, "docs/quickstart-pytest.md lost its install line"
    where = tmp_path_factory.mktemp("venv") / "v"
    venv.create(where, with_pip=True)
    python = where / "bin" / "python"
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile",
         f"{wheel}[{install[1]}]", "torch==2.13.0", "triton==3.6.0", "mypy",
         "types-protobuf"], capture_output=True, text=True, timeout=900,
        env=plugin_env(str(python), checkout=False))  # no PYTHONPATH: pip would see this checkout
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return python


def test_the_pytest_quickstart_runs_from_the_installed_wheel(fresh_venv, tmp_path):
    env = plugin_env(str(fresh_venv), checkout=False)
    # The venv was installed without byte-compiling (the install's biggest CPU cost); the first
    # import writes the bytecode, as pip would have, so the snippets' later processes reuse it.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    proc = subprocess.run(
        [str(fresh_venv), "-c", "import autotune_cache; print(autotune_cache.__file__)"],
        capture_output=True, text=True, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert str(fresh_venv.parent.parent) in proc.stdout, f"not the wheel's copy: {proc.stdout}"
    proc = subprocess.run(
        [str(fresh_venv), "-c", "from autotune_cache.foundation.urls import docs_url; "
         "print(docs_url('pytest.md'))"], capture_output=True, text=True, cwd=tmp_path, env=env)
    shipped = Path(proc.stdout.strip())
    assert shipped.is_file() and str(fresh_venv.parent.parent) in str(shipped), proc.stdout
    quickstart = snippets(ROOT / "docs" / "quickstart-pytest.md")
    # A language helper built at `import triton` for the mode TRITON_INTERPRET then says: it
    # fails on the interpreter when Triton was imported before the variable was read.
    assert any("tl.sum(" in s.body for s in quickstart), "the quickstart's kernel lost tl.sum"
    for snippet in quickstart:
        run(snippet, tmp_path, env, python=str(fresh_venv))
    dumped = tmp_path / "rows.autotune.textproto"
    assert "row_sum_kernel" in dumped.read_text(), "the quickstart dumped nothing"


@pytest.mark.parametrize("install", ["wheel", "editable"])
def test_mypy_strict_on_a_user_file(install, fresh_venv, tmp_path):
    """`mypy --strict` on code that uses the public API and `entry_pb2.Entry`: the stubs of the
    generated modules and py.typed are found from the wheel and from this editable checkout
    (tools/dev.sh installs it in setuptools' compat mode, which mypy can follow)."""
    (tmp_path / "user.py").write_text(USER_FILE)
    python = str(fresh_venv) if install == "wheel" else sys.executable
    pytest.importorskip("mypy", reason="mypy comes with the test extra")
    proc = subprocess.run([python, "-m", "mypy", "--strict", "--no-incremental", "user.py"],
                          capture_output=True, text=True, cwd=tmp_path,
                          env=plugin_env(python, checkout=False))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_commit_pin_installs_from_the_checkout(tmp_path):
    """The README's lock-file line, `autotune_cache[...] @ git+file:///path@<commit>`, builds
    that commit of the checkout (here HEAD; --target, so no virtualenv changes), with the docs
    and the start-up hook in it."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "autotune_cache[triton,pytest] @ git+file:///path/to/rules_autotune@<commit>" in readme
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--target", str(tmp_path / "site"),
         f"autotune_cache @ git+file://{ROOT}@{head.stdout.strip()}"],
        capture_output=True, text=True, timeout=600, env=plugin_env(checkout=False))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    site = tmp_path / "site"
    assert (site / "autotune_cache" / "docs" / "quickstart-pytest.md").is_file()
    assert (site / "autotune_cache_all_kernels.pth").is_file()
