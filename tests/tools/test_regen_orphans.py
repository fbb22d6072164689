"""Unit tests of tools/regen_orphans.py: which committed cache files are looked at, how each is
named, and the advice given (issue 19). Real Bazel runs it in tests/bazel/test_bazel_monorepo.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import regen_orphans  # noqa: E402
from regen_bazel import DumpTarget  # noqa: E402


@pytest.fixture
def monorepo(tmp_path: Path) -> Path:
    """Two teams' packages, a data directory inside one, a sub-package, Bazel's convenience
    symlink to its output tree, a .bazelignore'd directory and a hidden one."""
    files = {
        "WORKSPACE": "",
        ".bazelignore": "# user workspaces\nthird_party/vendored\n",
        "team_a/BUILD.bazel": "",
        "team_a/a_test.autotune.textproto": "",
        "team_a/old_test.autotune.textproto": "",
        "team_a/notes.textproto": "",
        "team_a/caches/shared.autotune.textproto": "",  # no BUILD: part of //team_a
        "team_a/sub/BUILD": "",
        "team_a/sub/s_test.autotune.textproto": "",
        "team_b/BUILD.bazel": "",
        "team_b/b_test.autotune.textproto": "",
        "third_party/vendored/BUILD": "",
        "third_party/vendored/v.autotune.textproto": "",
        ".git/BUILD": "",
        ".git/g.autotune.textproto": "",
    }
    workspace = tmp_path / "ws"
    for name, text in files.items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(text)
    # What `bazel-ws` points at when the output root is set explicitly: packages of its own.
    external = tmp_path / "output_base/execroot/ws/external/repo"
    external.mkdir(parents=True)
    (external / "BUILD").write_text("")
    (external / "x.autotune.textproto").write_text("")
    (workspace / "bazel-ws").symlink_to(tmp_path / "output_base/execroot/ws")
    return workspace


def test_a_teams_pattern_covers_its_packages_only(monorepo: Path) -> None:
    assert regen_orphans.candidate_files(monorepo, ["//team_a/..."]) == [
        "team_a/a_test.autotune.textproto",
        "team_a/caches/shared.autotune.textproto",
        "team_a/old_test.autotune.textproto",
        "team_a/sub/s_test.autotune.textproto",
    ]
    # One package: its own files, not its sub-package's.
    assert regen_orphans.candidate_files(monorepo, ["//team_a:a_test.dump"]) == [
        "team_a/a_test.autotune.textproto",
        "team_a/caches/shared.autotune.textproto",
        "team_a/old_test.autotune.textproto",
    ]


def test_the_whole_workspace_never_enters_bazels_output_trees(monorepo: Path) -> None:
    found = regen_orphans.candidate_files(monorepo, ["//..."])
    assert "team_b/b_test.autotune.textproto" in found
    assert not [f for f in found if f.startswith(("bazel-ws", ".git", "third_party"))]


def test_other_repositories_and_missing_packages_are_skipped(monorepo: Path) -> None:
    assert regen_orphans.candidate_files(monorepo, ["@other//team_a/...", "//nope/..."]) == []
    assert regen_orphans.pattern_scope("@other//x:y") is None
    assert regen_orphans.pattern_scope("@//team_a:all") == ("team_a", False)
    assert regen_orphans.pattern_scope("//team_a/...:all") == ("team_a", True)


def test_the_scanned_universe_is_every_rule_of_those_packages() -> None:
    assert regen_orphans.scanned_universe(
        ["//team_a/...", "//team_b:b_test.dump", "//team_b:b_test", "@o//x:y"]
    ) == "//team_a/... + //team_b:all"
    assert regen_orphans.scanned_universe(["//..."]) == "//..."


def test_a_file_is_labelled_in_its_nearest_package(monorepo: Path) -> None:
    assert regen_orphans.file_label("team_a/caches/shared.autotune.textproto", monorepo) == \
        "//team_a:caches/shared.autotune.textproto"
    assert regen_orphans.file_label("team_a/sub/s_test.autotune.textproto", monorepo) == \
        "//team_a/sub:s_test.autotune.textproto"


def test_advice_is_git_rm_or_git_mv_to_the_test_without_a_cache() -> None:
    path = "team_a/old_test.autotune.textproto"
    deleted = regen_orphans.Orphan(path)
    assert deleted.advice() == (
        f"{path}: ORPHANED: no autotuned test (nor any other rule) uses it any more; delete it "
        f"with `git rm {path}` (or point a test's `cache` at it)")
    new = DumpTarget("//team_a:new_test.dump", "team_a/new_test.autotune.textproto")
    renamed = regen_orphans.Orphan(path, (new,)).advice()
    assert ("and //team_a:new_test has no cache yet: if that test is the old one renamed, keep "
            f"its entries with `git mv {path} team_a/new_test.autotune.textproto`; otherwise "
            f"delete it with `git rm {path}`") in renamed
    other = DumpTarget("//team_a:other_test.dump", "team_a/other_test.autotune.textproto")
    either = regen_orphans.Orphan(path, (new, other), unsure=True).advice()
    assert "if one of //team_a:new_test, //team_a:other_test" in either
    assert "unless a rule in a package that failed to load does" in either


class _Query:
    def __init__(self, labels: list[str]) -> None:
        self.stdout = "\n".join(labels)
        self.broken_packages: list[str] = []


class _Bazel:
    """What moved_caches asks of Bazel: the source files rules list (one query)."""

    def __init__(self, labels: list[str]) -> None:
        self.labels, self.queries = labels, 0

    def query(self, *args: str) -> _Query:
        self.queries += 1
        return _Query(self.labels)


def test_a_test_moved_to_another_package_is_offered_its_old_cache(monorepo: Path) -> None:
    """Issue 36: a regen of the new package alone once re-tuned from scratch and never named
    the old cache; `--check //...` offered only `git rm`."""
    (monorepo / "team_b/old_test.autotune.textproto").unlink(missing_ok=True)
    moved = DumpTarget("//team_b:old_test.dump", "team_b/old_test.autotune.textproto")
    bazel = _Bazel(["//team_a:a_test.autotune.textproto"])
    found = regen_orphans.moved_caches(bazel, monorepo, [moved])  # type: ignore[arg-type]
    assert [o.path for o in found] == ["team_a/old_test.autotune.textproto"]
    advice = found[0].advice()
    assert ("and //team_b:old_test has no cache yet: if that test is the old one moved to its "
            "package, keep its entries with `git mv team_a/old_test.autotune.textproto "
            "team_b/old_test.autotune.textproto`") in advice
    # A same-named cache that a rule still uses belongs to another test: never offered.
    used = _Bazel(["//team_a:old_test.autotune.textproto"])
    assert regen_orphans.moved_caches(used, monorepo, [moved]) == []  # type: ignore[arg-type]
    # Nothing to offer, nothing asked of Bazel.
    has_cache = DumpTarget("//team_b:b_test.dump", "team_b/b_test.autotune.textproto")
    idle = _Bazel([])
    assert regen_orphans.moved_caches(idle, monorepo, [has_cache]) == []  # type: ignore[arg-type]
    assert idle.queries == 0


def test_exclusion_patterns_are_read_as_bazel_test_reads_them(monorepo: Path) -> None:
    import regen_bazel
    from regen_bazel import RegenError

    assert regen_bazel.absolute_pattern("-sub/...", "team_a") == "-//team_a/sub/..."
    assert regen_bazel._union(["//...", "-//third_party/...", "//x:t"]) == \
        "(//...) - //third_party/... + //x:t"
    with pytest.raises(RegenError, match="put what to regenerate first"):
        regen_bazel._union(["-//third_party/..."])
    scanned = regen_orphans.scanned_universe(["//team_a/...", "-//team_a/sub/..."])
    assert scanned == "(//team_a/...) - //team_a/sub/..."
    files = regen_orphans.candidate_files(monorepo, ["//team_a/...", "-//team_a/sub/..."])
    assert "team_a/sub/s_test.autotune.textproto" not in files
    assert "team_a/a_test.autotune.textproto" in files


def test_exclusions_on_the_command_line_are_patterns_not_options() -> None:
    import regen_cache

    args = regen_cache.parse_args(["--check", "//...", "-//third_party/...", "-:t", "//x:y"])
    assert args.check
    assert args.patterns == ["//...", "-//third_party/...", "-:t", "//x:y"]
