"""Unit tests of what tools/regen_cache.py leaves out or finds nothing to do for: XLA dumps on a
machine without a GPU, and patterns that name no autotuned test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import regen_bazel  # noqa: E402
import regen_cache  # noqa: E402
import regen_scheduler  # noqa: E402

XLA = regen_bazel.DumpTarget("//jx:x_test.dump", "jx/x_test.autotune.textproto", "xla")
TRITON = regen_bazel.DumpTarget("//team:t.dump", "team/t.autotune.textproto")
NO_GPU = regen_scheduler.Plan(gpus=(), jobs=1, bazel_flags=())


def test_xla_dumps_are_skipped_and_named_on_a_machine_without_a_gpu() -> None:
    kept, skipped = regen_cache.skip_cpu_only([TRITON, XLA], NO_GPU, ["//..."])
    assert kept == [TRITON]
    assert skipped == [
        'jx/x_test.autotune.textproto: SKIPPED (//jx:x_test.dump): backend "xla" and no GPU on '
        "this machine (XLA tunes nothing and writes no results on CPU); regenerate it on a GPU "
        "host (`bazel run //jx:x_test.regen` there)"]


@pytest.mark.parametrize("named", ["//jx:x_test", "//jx:x_test.dump", "@//jx:x_test"])
def test_an_xla_dump_asked_for_by_name_still_runs(named: str) -> None:
    assert regen_cache.skip_cpu_only([XLA], NO_GPU, [named]) == ([XLA], [])


@pytest.mark.parametrize("plan", [
    regen_scheduler.Plan(gpus=("0",), jobs=1, bazel_flags=()),
    regen_scheduler.delegated_plan(["--remote_executor=grpc://x"])])
def test_with_a_gpu_or_a_remote_executor_nothing_is_skipped(plan: regen_scheduler.Plan) -> None:
    assert regen_cache.skip_cpu_only([TRITON, XLA], plan, ["//..."]) == ([TRITON, XLA], [])


def test_skipped_caches_are_listed_and_do_not_fail_the_run(
        capsys: pytest.CaptureFixture[str]) -> None:
    _, skipped = regen_cache.skip_cpu_only([XLA], NO_GPU, ["//..."])
    assert regen_cache.report([], check=True, skipped=skipped) == 0
    out = capsys.readouterr().out
    assert "jx/x_test.autotune.textproto: SKIPPED (//jx:x_test.dump)" in out
    assert "0 cache(s): 0 would change, 0 failed, 1 skipped" in out


FAKE_BAZEL = r'''#!{python}
import sys
print('<?xml version="1.1"?><query version="2"></query>' if "--output=xml" in sys.argv else "")
'''


@pytest.mark.parametrize("check", [True, False])
def test_a_pattern_with_no_autotuned_test_is_not_an_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], check: bool) -> None:
    """`--check //tools/...` in CI over a part of the repository without autotuned tests."""
    workspace = tmp_path / "ws"
    (workspace / "tools").mkdir(parents=True)
    (workspace / "WORKSPACE").write_text("")
    (workspace / "tools/BUILD").write_text("")
    fake = tmp_path / "bazel"
    fake.write_text(FAKE_BAZEL.replace("{python}", sys.executable))
    fake.chmod(0o755)
    args = regen_cache.parse_args([f"--bazel={fake}", f"--workspace={workspace}", "--gpus=none",
                                   *(["--check"] if check else []), "//tools/..."])
    assert regen_cache.run(args) == 0
    out = capsys.readouterr().out
    assert (f"no autotuned_py_test matches //tools/... in {workspace}: nothing to "
            f"{'check' if check else 'regenerate'}") in out
