"""Real Bazel 4.2.3 in an ordinary monorepo that uses rules_autotune as an external repository:
top-level directories without a BUILD file (docs/, scripts/, .github/), one cache file shared
by tests of two packages, a sharded test, a nested pytest-style package, an XLA test on this
CPU-only machine and a vendored package. One workspace and one Bazel server for the module;
every test puts back what it changes.

Each probe test records one entry whose key carries kernels/kern.py's SOURCE: editing it is a
kernel edit.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bazel.harness import Workspace, bazel_or_skip
from tests.bazel.test_bazel_examples import restored
from tests.bazel.test_bazel_ruleset_cases import kernels_in

LOAD = 'load("@rules_autotune//rules:defs.bzl", "autotuned_py_test")\n\n'
PROBE = """\
from autotune_cache import CacheKey, Device, entry_pb2, get_cache

from kernels import kern


def run(kernel):
    key = CacheKey(kernel=kernel, source_fingerprint=kern.SOURCE * 4, configs_fingerprint="1" * 8,
                   problem={"n": 1}, device=Device("cpu-interpreter", "interpreter", 0),
                   toolchain={"probe": "1"})
    if get_cache().lookup(key) is None:
        entry = entry_pb2.Entry()
        entry.key.CopyFrom(key.to_proto())
        entry.result.time_ms = 1.0
        entry.result.config.params.add(name="BLOCK", int_value=64)
        get_cache().record(entry, benchmarks=1)
"""
UNITTEST_MAIN = """\
import unittest

from kernels import probe


class T(unittest.TestCase):
    def test_a(self):
        probe.run("team")

    def test_b(self):
        pass


if __name__ == "__main__":
    unittest.main()
"""
FILES = {
    "docs/index.md": "# docs: no BUILD file here\n",
    "scripts/release.sh": "echo release\n",
    ".github/workflows/ci.yml": "on: push\n",
    "kernels/BUILD.bazel": 'load("@rules_python//python:defs.bzl", "py_library")\n\n'
                           'exports_files(["common.autotune.textproto"])\n\n'
                           'py_library(\n    name = "probe",\n    srcs = ["kern.py", "probe.py"],\n'
                           '    visibility = ["//visibility:public"],\n'
                           '    deps = ["@rules_autotune//:autotune_cache"],\n)\n',
    "kernels/kern.py": 'SOURCE = "v1"\n',
    "kernels/probe.py": PROBE,
    "team/BUILD.bazel": LOAD + 'autotuned_py_test(\n    name = "t",\n    srcs = ["t.py"],\n'
                        '    shard_count = 2,\n    deps = ["//kernels:probe"],\n)\n',
    "team/t.py": UNITTEST_MAIN,
    "ml/sub/BUILD.bazel": LOAD + 'autotuned_py_test(\n    name = "pyt_test",\n'
                          '    srcs = ["pyt_test.py"],\n    runner = "pytest",\n'
                          '    deps = ["//kernels:probe"],\n)\n',
    "ml/sub/pyt_test.py": "from kernels import probe\n\n\ndef test_it():\n    probe.run('ml')\n",
    "jx/BUILD.bazel": LOAD + 'autotuned_py_test(\n    name = "x_test",\n    srcs = ["x_test.py"],\n'
                      '    backend = "xla",\n)\n',
    "jx/x_test.py": "print('XLA on CPU: the GPU autotuning flags are ignored')\n",
    "third_party/vend/BUILD.bazel": LOAD + 'autotuned_py_test(\n    name = "v_test",\n'
                                    '    srcs = ["v_test.py"],\n'
                                    '    deps = ["//kernels:probe"],\n)\n',
    "third_party/vend/v_test.py": "from kernels import probe\n\nprobe.run('vend')\n",
}
for package, name in (("vision", "resize_test"), ("text", "tok_test")):
    FILES[f"{package}/BUILD.bazel"] = (
        LOAD + f'autotuned_py_test(\n    name = "{name}",\n    srcs = ["{name}.py"],\n'
        '    cache = "//kernels:common.autotune.textproto",\n    deps = ["//kernels:probe"],\n)\n')
    FILES[f"{package}/{name}.py"] = f"from kernels import probe\n\nprobe.run('{package}')\n"

COMMON = "kernels/common.autotune.textproto"
TEAM = "team/t.autotune.textproto"
VEND = "third_party/vend/v_test.autotune.textproto"
XLA_CACHE = "jx/x_test.autotune.textproto"
DISCARDS = re.compile(r"discarding analysis cache", re.IGNORECASE)


@pytest.fixture(scope="module")
def mono(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    """The monorepo, with every cache but the XLA test's regenerated once."""
    bazel = bazel_or_skip()
    base = tmp_path_factory.mktemp("bazel_mono")
    ws = Workspace.create_consumer(base, base / "output_user_root", bazel)
    for path, text in FILES.items():
        (ws.root / path).parent.mkdir(parents=True, exist_ok=True)
        (ws.root / path).write_text(text)
    try:
        yield ws
    finally:
        ws.release()


def regen(ws: Workspace, *args: str, check: bool = True, cwd: Path | None = None):
    """`bazel run @rules_autotune//tools:regen_cache -- <args>`."""
    return ws.run("run", "@rules_autotune//tools:regen_cache", "--", *args, check=check, cwd=cwd)


def test_regen_and_check_over_everything_in_a_repository_with_build_less_directories(
        mono: Workspace) -> None:
    """`//...` is what the user typed: docs/, scripts/ and .github/ are never named. On this
    machine without a GPU the XLA test's dump is skipped and named, not a failure. Then a
    regen costs no analysis-cache discard of its own: only the `run` -> `test` switch that
    .bazelrc's `test`-only options cause (before: the inner run also switched
    --test_sharding_strategy, and the user's next `bazel test` discarded again)."""
    ws = mono
    first = regen(ws, "//...")
    assert "NO SUCH TARGET PATTERN" not in first.output, first.output
    assert (f'{XLA_CACHE}: SKIPPED (//jx:x_test.dump): backend "xla" and no GPU on this machine'
            ) in first.stdout, first.output
    assert f"{COMMON}: ok: created" in first.stdout and "(shared by 2 tests)" in first.stdout
    assert kernels_in(ws.root / COMMON) == ["text", "vision"]
    for check in (["--check", "//..."], ["--check"]):
        unchanged = regen(ws, *check)
        assert "5 cache(s): 0 would change, 0 failed, 1 skipped" not in unchanged.stdout
        assert "4 cache(s): 0 would change, 0 failed, 1 skipped" in unchanged.stdout, (
            unchanged.output)
    nothing = regen(ws, "--check", "//kernels/...")
    assert "no autotuned_py_test matches //kernels/..." in nothing.stdout, nothing.output
    # Analysis-cache discards of one regen cycle: test, regen one target, test again; then
    # with .bazelrc's `test --test_env=...` line on `build`, which `bazel run` reads too.
    assert discards_per_regen(ws) == (2, 0)
    with restored(ws, ".bazelrc"):
        rc = (ws.root / ".bazelrc").read_text()
        (ws.root / ".bazelrc").write_text(rc.replace("test --test_env=", "build --test_env="))
        assert discards_per_regen(ws) == (0, 0)


def discards_per_regen(ws: Workspace) -> tuple[int, int]:
    """How often Bazel discards its analysis cache in `bazel run //team:t.regen` and in the
    `bazel test //...` after it, both following a `bazel test //...`."""
    ws.run("test", "//...")
    one = ws.run("run", "//team:t.regen")
    after = ws.run("test", "//...")
    counts = (len(DISCARDS.findall(one.output)), len(DISCARDS.findall(after.output)))
    print("analysis cache discards (regen, next bazel test):", counts)
    return counts


def test_broken_and_missing_committed_caches_are_named_and_regenerated(
        mono: Workspace, tmp_path: Path) -> None:
    ws = mono
    with restored(ws, TEAM, COMMON, XLA_CACHE, VEND):
        # Merge-conflict markers: the test names the workspace path and the command.
        good = (ws.root / TEAM).read_bytes()
        (ws.root / TEAM).write_bytes(b"<<<<<<< HEAD\n" + good + b"=======\n>>>>>>> theirs\n")
        # The XLA test would ignore its file on CPU; the wrapper reads it first.
        (ws.root / XLA_CACHE).write_bytes(b"<<<<<<< HEAD\nresults {}\n>>>>>>> theirs\n")
        failed = ws.run("test", "//team:t", "//jx:x_test", check=False)
        assert failed.returncode == 3, failed.output
        for label, path in (("//team:t", TEAM), ("//jx:x_test", XLA_CACHE)):
            log = ws.test_log(label, (0, 2) if label == "//team:t" else None)
            assert (f"the committed cache {path} is not a readable results file: line 1 holds "
                    "an unresolved merge-conflict marker") in log, log[-3000:]
            assert f"bazel run {label}.regen" in log
        fixed = ws.run("run", "//team:t.regen")
        assert f"{TEAM}: ok: replaced a broken results file (" in fixed.stdout, fixed.output
        assert kernels_in(ws.root / TEAM) == ["team"]
        ws.run("test", "//team:t")
        # A shared file that is missing: one test's .regen creates it with both tests' entries.
        (ws.root / COMMON).unlink()
        created = ws.run("run", "//vision:resize_test.regen")
        assert "//text:tok_test.dump -> kernels/common.autotune.textproto (shares it)" in (
            created.output), created.output
        assert kernels_in(ws.root / COMMON) == ["text", "vision"]
        # A committed symlink to a file outside the workspace is written through.
        outside = tmp_path / "shared_caches/v.autotune.textproto"
        outside.parent.mkdir()
        shutil.copyfile(ws.root / VEND, outside)
        (ws.root / VEND).unlink()
        (ws.root / VEND).symlink_to(outside)
        with restored(ws, "third_party/vend/v_test.py"):
            (ws.root / "third_party/vend/v_test.py").write_text(
                "from kernels import probe\n\nprobe.run('vend2')\n")
            linked = ws.run("run", "//third_party/vend:v_test.regen")
        assert f"written through the symlink to {outside}" in linked.stdout, linked.output
        assert (ws.root / VEND).is_symlink() and kernels_in(outside) == ["vend2"]
        (ws.root / VEND).unlink()


def test_a_strict_test_fails_on_a_stale_committed_cache_whatever_a_cache_dir_holds(
        mono: Workspace, tmp_path: Path) -> None:
    """A CI cache directory outside the sandbox, filled by a `.dump` run after a kernel edit,
    does not make the strict test pass: Bazel keys its result on the directory's path, not
    its contents, so a PASS would be cached on a committed file that no longer matches."""
    ws = mono
    flag = f"--test_env=AUTOTUNE_FLAGS=--autotune_cache_dir={tmp_path / 'ci_cache_dir'}"
    with restored(ws, "kernels/kern.py"):
        (ws.root / "kernels/kern.py").write_text('SOURCE = "v2"\n')
        dump = ws.run("test", flag, "//team:t.dump", "--test_output=all")
        assert "`bazel run //team:t.regen` runs this dump and writes them" in dump.output
        assert any((tmp_path / "ci_cache_dir").iterdir())
        strict = ws.run("test", flag, "//team:t", check=False)
        assert strict.returncode == 3, strict.output
        log = ws.test_log("//team:t", (0, 2))
        assert "the cache is stale" in log, log[-3000:]
        assert "The directory tier holds it, which does not count" in log
        check = regen(ws, "--check", "//team/...", check=False)
        assert check.returncode == 1, check.output
        assert f"{TEAM}: would change: " in check.stdout and "1 kernel source changed" in (
            check.stdout), check.output


def test_a_pytest_style_main_left_as_runner_main_fails_naming_the_runner(
        mono: Workspace) -> None:
    ws = mono
    with restored(ws, "ml/forgot/BUILD.bazel", "ml/forgot/f_test.py"):
        (ws.root / "ml/forgot").mkdir(exist_ok=True)
        (ws.root / "ml/forgot/BUILD.bazel").write_text(
            LOAD + 'autotuned_py_test(\n    name = "f_test",\n    srcs = ["f_test.py"],\n'
            '    deps = ["//kernels:probe"],\n)\n')
        (ws.root / "ml/forgot/f_test.py").write_text(
            "from kernels import probe\n\n\ndef test_it():\n    probe.run('ml')\n")
        result = ws.run("test", "//ml/forgot:f_test", check=False)
        assert result.returncode == 3, result.output
        log = ws.test_log("//ml/forgot:f_test")
        assert "its main f_test.py defines tests (test_it) and runs none of them" in log, log
        assert 'Set `runner = "pytest"`' in log
    (ws.root / "ml/forgot").rmdir()
