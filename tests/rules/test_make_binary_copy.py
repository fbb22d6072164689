"""rules/private/make_binary_copy.py, the action of `<name>.binary_copy`: it writes the copy the
loader looks for, no copy for a small file, a README.txt saying which, and never fails the build
for a cache the test itself should report (the real Bazel run is in tests/bazel/)."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
from pathlib import Path

import pytest

from autotune_cache import binary_copy, env
from autotune_cache.formats import save_results
from tests.cachetools import fake_tune, make_key

REPO = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location(
        "make_binary_copy", REPO / "rules/private/make_binary_copy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TOOL = _tool()


@pytest.fixture(autouse=True)
def _library_log_level():
    """The tool silences the library's warnings for its own process; not for the tests after."""
    logger = logging.getLogger("autotune_cache")
    level = logger.level
    yield
    logger.setLevel(level)

# Enough entries to be over binary_copy.MIN_BYTES (about 1.7 kB of text, 330 bytes of binary
# per entry).
LARGE = {"text": 300, "binary": 1000}


def results(path: Path, n: int) -> Path:
    save_results(path, [fake_tune(make_key(problem={"M": m, "N": 128, "a": "float16"}))
                        for m in range(n)])
    return path


@pytest.mark.parametrize("name", ["t_test.autotune.textproto", "t_test.autotune.pb"])
def test_a_large_file_gets_the_copy_the_loader_reads(tmp_path, name):
    kind = "text" if name.endswith(".textproto") else "binary"
    path = results(tmp_path / name, LARGE[kind])
    assert path.stat().st_size >= binary_copy.MIN_BYTES
    out = tmp_path / "out" / "t_test.binary_copy"
    assert TOOL.main([str(path), str(out)]) == 0
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert {p.name for p in out.iterdir()} == {"README.txt", f"{sha}-{kind}.binpb"}
    assert (out / "README.txt").read_text().startswith(
        f"{sha}-{kind}.binpb: the binary copy of {path}\n")
    with env.use({env.AUTOTUNE_BINARY_CACHE_DIR: str(out)}):
        loaded = binary_copy.load_file(path)
    assert loaded.from_copy and len(loaded) == LARGE[kind]


def test_a_small_file_leaves_the_directory_empty(tmp_path, capsys):
    path = results(tmp_path / "t_test.autotune.textproto", 3)
    out = tmp_path / "out"
    assert TOOL.main([str(path), str(out)]) == 0
    assert [p.name for p in out.iterdir()] == ["README.txt"]
    assert "under binary_copy.MIN_BYTES" in (out / "README.txt").read_text()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("problem", ["damaged", "missing"])
def test_a_broken_cache_does_not_fail_the_build(tmp_path, capsys, problem):
    """The test parses the file itself and reports it with the regen hint; the build goes on."""
    path = tmp_path / "t_test.autotune.textproto"
    if problem == "damaged":
        path.write_text("not a results file\n" * 20000)
    out = tmp_path / "out"
    assert TOOL.main([str(path), str(out)]) == 0
    assert [p.name for p in out.iterdir()] == ["README.txt"]
    assert (out / "README.txt").read_text().startswith(f"no binary copy of {path}")
    err = capsys.readouterr().err
    assert str(path) in err and "no binary copy made" in err, err


def test_a_wrong_command_line_is_an_error(capsys):
    assert TOOL.main(["only-one"]) == 2
    assert "usage: make_binary_copy RESULTS_FILE OUT_DIR" in capsys.readouterr().err


@pytest.mark.parametrize("has_protoc", [False, True])
def test_a_large_text_cache_without_protoc_names_the_fast_text_flag(tmp_path, capsys,
                                                                    monkeypatch, has_protoc):
    """Without grpcio-tools on the tool's path the action parses with Python and says which
    label flag makes it about 10x faster; with it, it says nothing. Either way the copy is the
    same, and the library's pip hint (not how a Bazel user adds a package) stays silent."""
    from autotune_cache import native_text

    monkeypatch.setattr(native_text, "MIN_BYTES", 0)
    monkeypatch.setattr(native_text, "HINT_BYTES", 0)
    monkeypatch.setattr(native_text, "_hinted", [])
    if not has_protoc:
        monkeypatch.setattr(native_text, "available", lambda: False)
    elif not native_text.available():
        pytest.skip("grpcio-tools (the fast-text extra) is not installed")
    path = results(tmp_path / "t_test.autotune.textproto", LARGE["text"])
    out = tmp_path / "out"
    assert TOOL.main([str(path), str(out)]) == 0
    err = capsys.readouterr().err
    flag = "--@rules_autotune//:fast_text=@pypi//grpcio_tools"
    assert (flag in err) is not has_protoc
    assert "pip install" not in err
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert (out / f"{sha}-text.binpb").is_file()
