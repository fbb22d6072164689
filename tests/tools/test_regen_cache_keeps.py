"""The Bazel regen replaces only what its dumps own (docs/cache.md#what-a-dump-keeps): a CPU
regen of a file shared with a GPU job keeps the GPU's entries and another toolchain's, a
--test_filter regen keeps every entry its dumps did not write, and the summary says so."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from autotune_cache.formats import load_results, save_results, serialize_results
from autotune_cache.proto import autotune_results_pb2 as pb

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import regen_bazel  # noqa: E402
import regen_cache  # noqa: E402


def _entry(problem: str, device: str = "cpu-interpreter", triton: str = "3.6.0",
           kernel: str = "k") -> pb.Entry:
    entry = pb.Entry()
    entry.key.kernel = kernel
    entry.key.problem = problem
    entry.key.device.name = device
    entry.key.toolchain.add(name="triton", version=triton)
    entry.result.time_ms = 1.0
    entry.result.tuned_at = "2026-01-01T00:00:01Z"
    entry.result.config.params.add(name="BLOCK", int_value=64)
    return entry


def _setup(tmp_path: Path) -> tuple[Path, regen_bazel.DumpTarget, dict, dict]:
    workspace = tmp_path / "ws"
    (workspace / "pkg").mkdir(parents=True)
    target = regen_bazel.DumpTarget("//pkg:t.dump", "pkg/t.autotune.textproto")
    save_results(workspace / target.cache_path, [
        _entry("n=1", "NVIDIA H200"), _entry("n=2", "NVIDIA H200"),
        _entry("n=1", triton="3.5.0"), _entry("n=1"), _entry("n=9", kernel="old")])
    results = {target.label: serialize_results([_entry("n=1"), _entry("n=2")], text=True)}
    return workspace, target, results, {target.label: "PASSED"}


def _where(path: Path) -> set[tuple[str, str, str, str]]:
    return {(e.key.kernel, e.key.problem, e.key.device.name, e.key.toolchain[0].version)
            for e in load_results(path)}


def test_a_cpu_regen_of_a_file_shared_with_a_gpu_job_keeps_the_gpus_entries(tmp_path, capsys):
    workspace, target, results, status = _setup(tmp_path)
    outcome = regen_cache.regenerate_group([target], results, status, workspace, check=False)
    assert outcome.ok
    assert _where(workspace / target.cache_path) == {
        ("k", "n=1", "NVIDIA H200", "3.6.0"), ("k", "n=2", "NVIDIA H200", "3.6.0"),
        ("k", "n=1", "cpu-interpreter", "3.5.0"),
        ("k", "n=1", "cpu-interpreter", "3.6.0"), ("k", "n=2", "cpu-interpreter", "3.6.0")}
    assert regen_cache.report([outcome], check=False) == 0
    out = capsys.readouterr().out
    assert ("pkg/t.autotune.textproto: ok: 0 winners changed, 0 re-timed, 1 new, 1 removed, "
            "4 unchanged; kept 3 (2 other devices, 1 other toolchains); dropped 1 no longer "
            "used (old)") in out, out
    report = tmp_path / "regen.json"
    regen_cache.write_json(report, [outcome])
    [data] = json.loads(report.read_text())["files"]
    assert (data["kept"], data["kept_by"], data["dropped_kernels"]) == (
        3, {"other devices": 2, "other toolchains": 1}, ["old"])


def test_a_test_filter_regen_keeps_every_entry_its_dumps_did_not_write(tmp_path, capsys):
    workspace, target, results, status = _setup(tmp_path)
    outcome = regen_cache.regenerate_group([target], results, status, workspace, check=False,
                                           subset=True)
    assert ("old", "n=9", "cpu-interpreter", "3.6.0") in _where(workspace / target.cache_path)
    assert len(load_results(workspace / target.cache_path)) == 6
    regen_cache.report([outcome], check=False)
    assert "kept 4 (1 not selected, 2 other devices, 1 other toolchains); dropped 0" in \
        capsys.readouterr().out


def test_the_test_filter_flag_makes_the_regen_a_subset_run(tmp_path):
    args = regen_cache.parse_args(["--bazel_flag=--test_filter=test_one", "--json",
                                   str(tmp_path / "out.json")])
    assert any(f.startswith("--test_filter") for f in args.bazel_flag)
    assert args.json == str(tmp_path / "out.json")
