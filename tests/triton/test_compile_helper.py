"""The compile helper process (autotune_cache/triton/compile_helper.py): its share of a loaded
file's winners, and a real compile of them into Triton's compile cache that a later process's
compile-ahead then only loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from autotune_cache.foundation.compile_helpers import JOB_FILE, PLAN_PREFIX, digest
from autotune_cache.foundation.key import Device
from autotune_cache.triton.compile_helper import share, work

ROOT = Path(__file__).resolve().parents[2]
H100 = Device(name="NVIDIA H100", arch="sm_90", sm_count=132)


def items(*kernels: str) -> list[tuple[str, Device, str]]:
    return [(k, H100, f'{{"name": "{k}", "i": {i}}}') for i, k in enumerate(kernels)]


def test_shares_are_even_runs_of_the_file_order():
    """Every specialization goes to exactly one helper, in runs of the file's order (sorted by
    kernel: a run holds few modules), each helper as many as can be; a module holding most of
    them is still spread over every helper."""
    work_list = items("lib.a.k1", "lib.a.k2", "lib.a.k3", "lib.a.k4", "lib.a.k5", "lib.b.k1",
                      "lib.c.k1")
    shares = [share(work_list, i, 3) for i in range(3)]
    assert [[k for k, _, _ in s] for s in shares] == [
        ["lib.a.k1", "lib.a.k2"], ["lib.a.k3", "lib.a.k4"], ["lib.a.k5", "lib.b.k1", "lib.c.k1"]]
    assert share(work_list, 0, 1) == work_list
    many = [share(work_list, i, 8) for i in range(8)]
    assert [x for s in many for x in s] == work_list
    assert sorted(len(s) for s in many) == [0, 1, 1, 1, 1, 1, 1, 1]


def test_work_lists_each_recorded_specialization_once_and_skips_bad_files(tmp_path, caplog):
    """The winners with specialization data, each specialization once across files, in file
    order; a file that does not load is named in the helper's log and skipped (the test
    process's own load reports it to the user)."""
    from autotune_cache.formats import save_results
    from autotune_cache.proto import autotune_results_pb2 as pb
    from tests.pytest_plugin.fake_kernel import key

    first, second, bad = tmp_path / "a.textproto", tmp_path / "b.textproto", tmp_path / "c.pb"
    spec = json.dumps({"name": "k"})
    save_results(first, [
        pb.Entry(key=key("lib.k", 1).to_proto(), result=pb.Result(triton_specialization=spec)),
        pb.Entry(key=key("lib.k", 2).to_proto(), result=pb.Result(triton_specialization="")),
    ])
    save_results(second, [
        pb.Entry(key=key("lib.k", 3).to_proto(), result=pb.Result(triton_specialization=spec)),
        pb.Entry(key=key("lib.j", 3).to_proto(),
                 result=pb.Result(triton_specialization=spec + " ")),
        pb.Entry(key=key("bare_kernel", 3).to_proto(),  # no module to import: left out
                 result=pb.Result(triton_specialization=spec + "  ")),
    ])
    bad.write_bytes(b"\xff not a results file")
    found = work([str(first), str(bad), str(second)])
    assert [(k, s) for k, _, s in found] == [("lib.k", spec), ("lib.j", spec + " ")]
    assert str(bad) in caplog.text


def _run(phase: str, arg: Path, env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-m", "tests.triton.compile_ahead_worker", phase,
                           str(arg), "qualified"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _job(tmp_path: Path, results: Path) -> Path:
    """A helper's directory with its job: `results`, one helper, this checkout, this process
    its parent (as the plugin writes it)."""
    job = tmp_path / "helpers"
    job.mkdir()
    (job / JOB_FILE).write_text(json.dumps({"files": [str(results)], "of": 1,
                                            "sys_path": [str(ROOT)], "parent": os.getpid()}))
    return job


def _cubins(cache: Path) -> set[str]:
    return {p.parent.name for p in cache.rglob("*.cubin")}


def test_a_helper_compiles_the_winners_that_a_later_process_then_only_loads(tmp_path):
    """Triton's real compiler for sm_90 without a GPU (the compile-only driver of
    compile_ahead_worker): a helper compiles both loaded winners into TRITON_CACHE_DIR and builds
    their launchers, marking each compiled; the test process after it compiles both ahead again
    as usual, and Triton finds every binary in the compile cache (no new cubin)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "AUTOTUNE_"))}
    env.update(TRITON_CACHE_DIR=str(tmp_path / "tc"), AUTOTUNE_FLAGS="", AUTOTUNE_PROGRESS="0",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    results = tmp_path / "r.textproto"
    assert _run("tune", results, env) == {"specs": [True, True]}
    tuned_cubins = _cubins(tmp_path / "tc")
    env["TRITON_CACHE_DIR"] = str(tmp_path / "fresh")  # a CI sandbox: nothing compiled yet
    job = _job(tmp_path, results)
    out = _run("helper", job, env)
    specs = [spec for _, _, spec in work([str(results)])]
    assert out["markers"] == {digest(s): "" for s in specs}
    assert out["launchers"] == ["accumulate_kernel", "add_kernel"]
    assert json.loads((job / f"{PLAN_PREFIX}0").read_text()) == [digest(s) for s in specs]
    compiled = _cubins(tmp_path / "fresh")
    assert compiled == tuned_cubins & compiled and len(compiled) == 2
    loaded = _run("load", results, env)
    assert loaded["compiles_ahead"] == 1 and loaded["compiles_after_hit"] == 0
    assert _cubins(tmp_path / "fresh") == compiled  # every compile of the test process: a hit


def test_a_speculative_preload_a_helper_planned_is_left_to_the_helper(monkeypatch):
    """A speculative preload (compile cache only, no launch awaits it) that a helper planned is
    not compiled in the process at all, nor waited for; one no helper planned, and any preload a
    launch may await, still runs (the latter after `settle`)."""
    from autotune_cache.foundation import compile_helpers
    from autotune_cache.triton import preload_job

    calls: list[str] = []
    monkeypatch.setattr(preload_job, "preload_into",
                        lambda fn, spec, cache_only: calls.append(spec) or True)
    monkeypatch.setattr(compile_helpers, "planned", lambda spec: spec == "planned")
    assert preload_job.work(None, "planned", True, speculative=True)() is False
    assert preload_job.work(None, "other", True, speculative=True)() is True
    assert preload_job.work(None, "planned", True)() is True
    assert calls == ["other", "planned"]


WINNER = json.dumps({
    "name": "k", "signature": {"x": "*fp32", "n": "i32", "BLOCK": "constexpr",
                               "EVEN": "constexpr"},
    "constant_keys": [[2], [3]], "constant_vals": [64, True], "attrs_keys": [[0]],
    "attrs_vals": [[["tt.divisibility", 16]]],
    "options": {"num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None,
                "arch": "sm90"}, "key": "k"})


def test_a_candidates_specialization_is_the_winners_with_its_meta_parameters_and_options():
    """A candidate's constexpr values replace the winner's by argument position, its launch
    options the winner's (Triton's defaults where the file left one unset); a meta-parameter
    that is no constexpr argument gives none."""
    from autotune_cache.proto import autotune_results_pb2 as pb
    from autotune_cache.triton.compile_helper import candidate_spec

    defaults = {"num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None}
    config = pb.Config(params=[pb.Param(name="BLOCK", int_value=128)], num_warps=8)
    derived = json.loads(candidate_spec(WINNER, config, defaults))
    assert derived["constant_vals"] == [128, True]
    assert {k: derived["options"][k] for k in defaults} == {
        "num_warps": 8, "num_stages": 3, "num_ctas": 1, "maxnreg": None}
    assert derived["options"]["arch"] == "sm90" and derived["signature"] == json.loads(
        WINNER)["signature"]
    for name in ("n", "GROUP"):  # a runtime argument, no argument at all
        other = pb.Config(params=[pb.Param(name=name, int_value=2)])
        assert candidate_spec(WINNER, other, defaults) is None
    assert candidate_spec("not json", config, defaults) is None


def test_after_an_upgrade_a_helper_compiles_the_candidates_a_tuning_then_only_loads(tmp_path):
    """The file's entries recorded under another Triton (an upgrade): the helper compiles each
    entry's winner and then every candidate, derived from the winner's specialization; a fresh
    tuning of both kernels (as the upgraded run does, through Triton's own compile path) then
    finds every candidate's binary in the compile cache."""
    from autotune_cache.formats import load_results, save_results
    from autotune_cache.proto import autotune_results_pb2 as pb

    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "AUTOTUNE_"))}
    env.update(TRITON_CACHE_DIR=str(tmp_path / "tc"), AUTOTUNE_FLAGS="", AUTOTUNE_PROGRESS="0",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    results = tmp_path / "r.textproto"
    _run("tune", results, env)
    aged = []
    for entry in load_results(results):
        del entry.key.toolchain[:]
        entry.key.toolchain.append(pb.Version(name="triton", version="0.0.1"))
        aged.append(entry)
    save_results(results, aged)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "fresh")
    job = _job(tmp_path, results)
    out = _run("helper", job, env)
    assert len(out["markers"]) == 4  # 2 winners, then the 2 kernels' other candidate each
    assert set(out["markers"].values()) == {""}
    compiled = _cubins(tmp_path / "fresh")
    assert len(compiled) == 4
    _run("tune", tmp_path / "again.textproto", env)
    assert _cubins(tmp_path / "fresh") == compiled


def test_work_reads_at_most_max_scan_entries(tmp_path, monkeypatch):
    """Every helper reads the same first MAX_SCAN entries (a monorepo's file may hold far
    more than a run needs; the plans wait for this read)."""
    from autotune_cache.formats import save_results
    from autotune_cache.proto import autotune_results_pb2 as pb
    from autotune_cache.triton import compile_helper
    from tests.pytest_plugin.fake_kernel import key

    path = tmp_path / "big.textproto"
    save_results(path, [pb.Entry(key=key("lib.k", n).to_proto(), result=pb.Result(
        triton_specialization=json.dumps({"name": "k", "n": n}))) for n in range(10)])
    monkeypatch.setattr(compile_helper, "MAX_SCAN", 4)
    assert len(work([str(path)])) == 4
