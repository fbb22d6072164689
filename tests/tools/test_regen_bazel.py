"""Unit tests of tools/regen_bazel.py: query XML, build events, dump outputs, workspace lookup."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import regen_bazel  # noqa: E402

QUERY_XML = """<?xml version="1.1" encoding="UTF-8" standalone="no"?>
<query version="2">
  <rule class="py_test" location="/ws/examples/triton/BUILD.bazel:29:22"
        name="//examples/triton:matmul_test.dump">
    <list name="tags">
      <string value="manual"/><string value="autotune_dump"/>
      <string value="autotune_cache_path=examples/triton/matmul_test.autotune.textproto"/>
    </list>
  </rule>
  <rule class="py_test" location="/ws/x/BUILD.bazel:1:1" name="@//x:other">
    <list name="tags"><string value="manual"/></list>
  </rule>
</query>
"""


def test_dump_targets_come_from_query_xml() -> None:
    (target,) = regen_bazel.parse_dump_targets(QUERY_XML)
    assert target == regen_bazel.DumpTarget(
        "//examples/triton:matmul_test.dump", "examples/triton/matmul_test.autotune.textproto")
    assert target.test_label == "//examples/triton:matmul_test"
    broken = QUERY_XML.replace(
        '<string value="autotune_cache_path=examples/triton/matmul_test.autotune.textproto"/>', "")
    with pytest.raises(regen_bazel.RegenError, match="autotune_cache_path="):
        regen_bazel.parse_dump_targets(broken)


def test_statuses_come_from_the_build_event_json(tmp_path: Path) -> None:
    bep = tmp_path / "bep.json"
    def summary(label: str, status: str) -> dict:
        return {"id": {"testSummary": {"label": label}}, "testSummary": {"overallStatus": status}}

    events = [summary("//a:b.dump", "PASSED"), summary("@//a:c.dump", "FAILED"),
              {"id": {"progress": {}}, "progress": {}}]
    bep.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    assert regen_bazel.read_test_statuses(bep) == {"//a:b.dump": "PASSED", "//a:c.dump": "FAILED"}
    assert regen_bazel.read_test_statuses(tmp_path / "absent.json") == {}


def test_test_dirs_come_from_the_test_log_uri(tmp_path: Path) -> None:
    bep = tmp_path / "bep.json"
    log = "/out/bazel-out/k8-opt/testlogs/a/b%20c.dump/test.log"
    event = {"id": {"testResult": {"label": "@@//a:b c.dump", "shard": 1}},
             "testResult": {"testActionOutput": [
                 {"name": "test.xml", "uri": "file:///elsewhere/test.xml"},
                 {"name": "test.log", "uri": f"file://{log}"}]}}
    bep.write_text(json.dumps(event) + "\n")
    assert regen_bazel.read_test_dirs(bep) == {
        "//a:b c.dump": Path("/out/bazel-out/k8-opt/testlogs/a/b c.dump")}


@pytest.mark.parametrize("layout", ["zipped", "unzipped", "absent"])
def test_dump_is_read_from_either_outputs_layout(tmp_path: Path, layout: str) -> None:
    outputs = tmp_path / "examples/triton/t.dump/test.outputs"
    outputs.mkdir(parents=True)
    if layout == "zipped":
        with zipfile.ZipFile(outputs / "outputs.zip", "w") as z:
            z.writestr("autotune_cache.textproto", b"version: 1\n")
    elif layout == "unzipped":
        (outputs / "autotune_cache.textproto").write_bytes(b"version: 1\n")
    expected = None if layout == "absent" else b"version: 1\n"
    test_dir = regen_bazel.outputs_dir(tmp_path, "//examples/triton:t.dump")
    assert regen_bazel.read_dump(test_dir) == expected


def test_workspace_is_found_from_bazel_run_or_markers(tmp_path: Path) -> None:
    (tmp_path / "MODULE.bazel").write_text("")
    (tmp_path / "a/b").mkdir(parents=True)
    assert regen_bazel.find_workspace({}, tmp_path / "a/b") == tmp_path
    assert regen_bazel.find_workspace({"BUILD_WORKSPACE_DIRECTORY": "/w"}, tmp_path) == Path("/w")
    with pytest.raises(regen_bazel.RegenError, match="pass --workspace"):
        regen_bazel.find_workspace({}, Path("/"))



def test_broken_packages_are_named_from_keep_going_errors(tmp_path: Path) -> None:
    stderr = "\n".join([
        f"ERROR: {tmp_path}/pkg/broken/BUILD.bazel:1:6: syntax error at 'is'",
        "ERROR: package contains errors: examples/jax",
        "ERROR: error loading package 'third': Unable to find package for @x//:y.bzl",
        "WARNING: --keep_going specified, ignoring errors. Results may be inaccurate",
        "INFO: not an error line for pkg 'nope'",
    ])
    assert regen_bazel.broken_packages(stderr, tmp_path) == (
        "//examples/jax", "//pkg/broken", "//third")


def test_dumps_of_another_repository_are_refused_in_one_sentence() -> None:
    target = regen_bazel.DumpTarget("@ext//lib:t.dump", "lib/t.autotune.textproto")
    with pytest.raises(regen_bazel.RegenError) as raised:
        regen_bazel.check_main_repository([target])
    message = str(raised.value)
    assert message.count(". ") == 0 and message.endswith("there).")
    assert "@ext//lib:t.dump belongs to repository @ext" in message
    assert "`bazel run //lib:t.regen` there" in message
    for main in ("//lib:t.dump", "@//lib:t.dump", "@@//lib:t.dump"):
        regen_bazel.check_main_repository([regen_bazel.DumpTarget(main, "lib/t.textproto")])


def test_cache_path_regex_matches_only_that_file() -> None:
    regex = regen_bazel.cache_path_regex("pkg/a.autotune.textproto")
    import re as stdlib_re

    assert stdlib_re.search(regex, "[autotune_cache_path=pkg/a.autotune.textproto, manual]")
    assert not stdlib_re.search(regex, "[autotune_cache_path=pkg/aXautotune.textproto]")
    assert not stdlib_re.search(regex, "[autotune_cache_path=pkg/a.autotune.textproto.pb]")


def test_backend_tag_is_read_from_the_query() -> None:
    xml = QUERY_XML.replace('<string value="autotune_dump"/>',
                            '<string value="autotune_dump"/>'
                            '<string value="autotune_backend=xla"/>', 1)
    backends = {t.label: t.backend for t in regen_bazel.parse_dump_targets(xml)}
    assert "xla" in backends.values()


@pytest.mark.parametrize(("pattern", "package", "expected"), [
    ("...", "team_a", "//team_a/..."),
    ("...", "", "//..."),
    (":t_test", "team_a/kernels", "//team_a/kernels:t_test"),
    (":t_test", "", "//:t_test"),
    ("sub/...", "team_a", "//team_a/sub/..."),
    ("sub:t_test.dump", "team_a", "//team_a/sub:t_test.dump"),
    ("//team_b/...", "team_a", "//team_b/..."),
    ("@other//x:t", "team_a", "@other//x:t"),
])
def test_relative_patterns_are_read_from_the_working_directory(
        pattern: str, package: str, expected: str) -> None:
    assert regen_bazel.absolute_pattern(pattern, package) == expected


def test_working_package_is_the_run_directory_inside_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "team_a/kernels").mkdir(parents=True)
    env = {"BUILD_WORKING_DIRECTORY": str(tmp_path / "team_a/kernels")}
    assert regen_bazel.working_package(env, tmp_path) == "team_a/kernels"
    assert regen_bazel.working_package({"BUILD_WORKING_DIRECTORY": str(tmp_path)}, tmp_path) == ""
    assert regen_bazel.working_package({}, tmp_path) == ""
    # Run from outside the workspace (--workspace=DIR given): nothing to resolve against.
    assert regen_bazel.working_package({"BUILD_WORKING_DIRECTORY": "/"}, tmp_path) == ""


# ----- issue 19: mistyped patterns, Bazel's output trees, narrowed sharing search --------------


def test_skipped_patterns_are_named_as_patterns_not_broken_packages(tmp_path: Path) -> None:
    stderr = "\n".join([
        "ERROR: Skipping '//tema/...': no targets found beneath 'tema'",
        "ERROR: Skipping '//tema:t': no such package 'tema': BUILD file not found in any of the "
        "following directories. Add a BUILD file to a directory to mark it as a package.",
        "ERROR: Skipping '//pkg:nope': no such target '//pkg:nope': target 'nope' not declared",
        "WARNING: --keep_going specified, ignoring errors. Results may be inaccurate",
    ])
    assert regen_bazel.broken_packages(stderr, tmp_path) == ()
    assert [p for p, _ in regen_bazel.bad_patterns(stderr)] == ["//pkg:nope", "//tema/...",
                                                                 "//tema:t"]
    assert dict(regen_bazel.bad_patterns(stderr))["//tema/..."] == (
        "no targets found beneath 'tema'")


def test_skipped_patterns_come_from_the_querys_build_events(tmp_path: Path) -> None:
    """What Bazel 4.2.3's `query --keep_going --build_event_json_file` writes for a pattern
    that names nothing: the structured event, read without parsing its error lines."""
    bep = tmp_path / "bep.json"
    events = [{"id": {"started": {}}, "started": {"command": "query"}},
              {"id": {"patternSkipped": {"pattern": ["//tema/..."]}},
               "aborted": {"reason": "LOADING_FAILURE",
                           "description": "no targets found beneath 'tema'"}},
              {"id": {"buildFinished": {}}, "finished": {"exitCode": {"code": 3}}}]
    bep.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    assert regen_bazel.skipped_patterns(regen_bazel.bep_events(bep)) == (
        ("//tema/...", "no targets found beneath 'tema'"),)
    assert regen_bazel.skipped_patterns(events[:1]) == ()


def test_the_workspace_universe_leaves_out_bazels_output_trees(tmp_path: Path) -> None:
    """`//...` is the root package plus one `//dir/...` per top-level directory: never a
    bazel-* convenience symlink (Bazel 4 walks into one that points to another output base,
    bazel#13951), nor a .bazelignore'd or version-control directory, nor one that holds no
    package."""
    (tmp_path / "BUILD.bazel").write_text("")
    for name in ("team_a", "team_b/lib", "vendored", ".git", ".github", "docs/api", "scripts"):
        (tmp_path / name).mkdir(parents=True)
    for package in ("team_a", "team_b/lib", "vendored", ".github"):
        (tmp_path / package / "BUILD").write_text("")
    elsewhere = tmp_path.parent / "other_output_base/execroot/ws"
    elsewhere.mkdir(parents=True)
    (tmp_path / "bazel-ws").symlink_to(elsewhere)
    (tmp_path / "bazel-out").symlink_to(elsewhere)
    (tmp_path / ".bazelignore").write_text("# comment\nvendored/\n")
    # docs/ and scripts/ hold no package: `//docs/...` would be Bazel's "no targets found
    # beneath 'docs'" error in an ordinary repository (issue 51).
    assert regen_bazel.workspace_universe(tmp_path) == (
        "//:all + //.github/... + //team_a/... + //team_b/...")
    assert regen_bazel.without_output_trees("@//...", tmp_path) == (
        regen_bazel.workspace_universe(tmp_path))
    assert regen_bazel.without_output_trees("//team_a/...", tmp_path) == "//team_a/..."


class RecordingBazel:
    """Answers `bazel query` from a fixed list of dump targets; records every expression."""

    def __init__(self, workspace: Path, dumps: dict[str, str]) -> None:
        self.workspace = workspace
        self.dumps = dumps  # label -> cache path
        self.expressions: list[str] = []

    def query(self, *args: str) -> regen_bazel.Query:
        expression = args[-2]
        self.expressions.append(expression)
        if args[-1] == "--output=label":
            return regen_bazel.Query("//team_a:t\n")
        rules = "".join(
            f'<rule class="py_test" name="{label}"><list name="tags">'
            f'<string value="autotune_dump"/><string value="autotune_cache_path={path}"/>'
            "</list></rule>"
            for label, path in self.dumps.items()
            if label.split(":")[0] in expression or label in expression)
        return regen_bazel.Query(f'<?xml version="1.1"?><query version="2">{rules}</query>')


def test_a_one_target_search_loads_only_the_packages_it_needs(tmp_path: Path) -> None:
    """The dumps sharing a cache file are looked for in the file's package and the tests'
    packages, never in `//...`; a sharer elsewhere is left to widen_search."""
    for package in ("team_a", "caches", "team_c"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "BUILD.bazel").write_text("")
    bazel = RecordingBazel(tmp_path, {
        "//team_a:t.dump": "caches/shared.autotune.textproto",
        "//caches:owner.dump": "caches/shared.autotune.textproto",
        "//team_c:far.dump": "caches/shared.autotune.textproto",
    })
    found = regen_bazel.find_dump_targets(bazel, ["//team_a:t"])
    assert [t.label for t in found.targets] == ["//caches:owner.dump", "//team_a:t.dump"]
    assert found.narrowed
    assert not any("//..." in e for e in bazel.expressions), bazel.expressions
    assert "//caches:all + //team_a:all" in bazel.expressions[-1]
    wider = regen_bazel.widen_search(bazel, ["caches/shared.autotune.textproto"])
    assert "//team_c:far.dump" in [t.label for t in wider.targets]
    assert "//team_c/..." in bazel.expressions[-1] and "bazel-" not in bazel.expressions[-1]
