"""CPU smoke test of bench/regen_multi_gpu.py: the `.dump` commands it builds, the per-GPU
pinning and job split through tools/regen_scheduler.py (fake GPU ids), and its comparisons on
the committed example caches. The real run is on a two-GPU machine (docs/benchmarks.md)."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import regen_multi_gpu as bench  # noqa: E402

from autotune_cache.formats import load_results, save_results  # noqa: E402

H200 = "NVIDIA H200 / sm_90 / 132 SMs"
NVIDIA_SMI_2 = """\
GPU 0: NVIDIA H200 (UUID: GPU-4a8003e8-bb21-abfa-0e21-9088e7085ccc)
GPU 1: NVIDIA H200 (UUID: GPU-b43f15a9-3f66-dcfd-8a94-ddb6b61d9cf4)
"""

# A fake dump test, run through the real wrapper (rules_autotune_test_wrapper.py), pin script
# and observer: it waits until two jobs have started (so the two GPU slots must both be taken
# at once), then passes. unittest.main() like the examples, so the observer records before the exit.
FAKE_MAIN = textwrap.dedent("""
    import os, time, unittest
    from pathlib import Path

    class Fake(unittest.TestCase):
        def test_waits_for_a_second_job(self):
            barrier = Path(os.environ["FAKE_BARRIER"])
            (barrier / str(os.getpid())).touch()
            deadline = time.time() + 30
            while len(list(barrier.iterdir())) < 2 and time.time() < deadline:
                time.sleep(0.05)

    if __name__ == "__main__":
        unittest.main()
""")


def test_dump_commands_are_the_macros() -> None:
    jobs = bench.discover_jobs()
    assert [j.label for j in jobs] == [
        "//examples/jax:matmul_chain_test.dump",
        "//examples/triton:fused_softmax_test.dump",
        "//examples/triton:layer_norm_test.dump",
        "//examples/triton:matmul_test.dump",
        "//examples/triton:vector_add_test.dump",
    ]
    assert bench.dump_wrapper().is_file()
    functions = bench.load_flag_functions()
    base = {"CUDA_VISIBLE_DEVICES": "3", "AUTOTUNE_FLAGS": "--stale", "PATH": "/bin"}
    xla, matmul = jobs[0], jobs[3]
    env = bench.dump_env(matmul, base, Path("/o"), Path("/t"), matmul.cache, functions)
    # The strings of docs/bazel.md's flag tables (`t.dump` rows), byte for byte.
    assert env["AUTOTUNE_FLAGS"] == (
        "--load_autotune_results_from=examples/triton/matmul_test.autotune.textproto "
        "--dump_autotune_results_to=TEST_UNDECLARED_OUTPUTS_DIR/autotune_cache.textproto")
    assert env["AUTOTUNE_TEST_MAIN"] == "examples/triton/matmul_test.py"
    assert env["AUTOTUNE_DUMP_TARGET"] == "//examples/triton:matmul_test.dump"
    assert env["AUTOTUNE_REGEN_HINT"] == "bazel run //examples/triton:matmul_test.regen"
    assert env["TEST_UNDECLARED_OUTPUTS_DIR"] == "/o"
    assert "CUDA_VISIBLE_DEVICES" not in env  # the pin wrapper sets it, per job
    assert env["PYTHONPATH"].split(os.pathsep)[:2] == [str(bench.observer_dir()), str(ROOT)]
    env = bench.dump_env(xla, base, Path("/o"), Path("/t"), xla.cache, functions)
    assert env["XLA_FLAGS"] == (
        "--xla_gpu_load_autotune_results_from=examples/jax/matmul_chain_test.autotune.textproto "
        "--xla_gpu_dump_autotune_results_to=TEST_UNDECLARED_OUTPUTS_DIR/autotune_cache.textproto")
    assert "AUTOTUNE_FLAGS" not in env
    # A cache that is not loaded (as the macro does for one that does not exist yet).
    env = bench.dump_env(xla, base, Path("/o"), Path("/t"), None, functions)
    assert env["XLA_FLAGS"] == (
        "--xla_gpu_dump_autotune_results_to=TEST_UNDECLARED_OUTPUTS_DIR/autotune_cache.textproto")


def test_unknown_example_is_named() -> None:
    with pytest.raises(bench.BenchError, match="no example test named nope_test"):
        bench.discover_jobs(only=["nope_test"])


def _fake_jobs(tmp_path: Path, count: int) -> list[bench.DumpJob]:
    main = tmp_path / "fake_test.py"
    main.write_text(FAKE_MAIN)
    return [bench.DumpJob("fake", f"fake_{n}_test", "triton", main_file=str(main))
            for n in range(count)]


@pytest.mark.slow
def test_fake_gpus_one_job_per_gpu_each_pinned(tmp_path: Path) -> None:
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    jobs = _fake_jobs(tmp_path, 3)
    env = {**os.environ, "FAKE_BARRIER": str(barrier)}
    plan, results = bench.run_dumps(jobs, ["0", "1"], tmp_path / "run", {}, base_env=env,
                                    timeout_s=120)
    assert plan["jobs"] == 2 and "--local_test_jobs=2" in plan["bazel_flags"]
    run_under = next(f for f in plan["bazel_flags"] if f.startswith("--run_under="))
    assert "regen_gpu_pin.py" in run_under and "--gpus=0,1" in run_under
    assert [r.rc for r in results] == [0, 0, 0], [r.log.read_text() for r in results]
    assert all(r.seen["argv0"] == jobs[0].main for r in results)
    isolation = bench.check_isolation(results, ["0", "1"], bench.gpu_uuids(NVIDIA_SMI_2),
                                      want_cuda=False)
    assert isolation["ok"], isolation
    # The first two jobs waited for each other, so both GPU slots were taken at once.
    assert isolation["max_concurrent_jobs"] == 2
    assert sorted(isolation["jobs_per_gpu"]) == ["0", "1"]
    assert all(isinstance(r.seen.get("torch_device_count"), int) for r in results)


@pytest.mark.slow
def test_fake_single_gpu_runs_jobs_one_at_a_time(tmp_path: Path) -> None:
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    (barrier / "already-two").touch()
    (barrier / "started").touch()
    jobs = _fake_jobs(tmp_path, 2)
    env = {**os.environ, "FAKE_BARRIER": str(barrier), "AUTOTUNE_OBSERVER_TORCH": "0"}
    plan, results = bench.run_dumps(jobs, ["0"], tmp_path / "run", {}, base_env=env,
                                    timeout_s=120)
    assert plan["jobs"] == 1
    isolation = bench.check_isolation(results, ["0"], {}, want_cuda=False)
    assert isolation["ok"] and isolation["max_concurrent_jobs"] == 1, isolation
    assert isolation["jobs_per_gpu"] == {"0": [j.label for j in jobs]}


def _job_result(seen: dict) -> bench.JobResult:
    job = bench.DumpJob("examples/triton", "x_test", "triton")
    return bench.JobResult(job, 0, 1.0, 0.0, 1.0, Path("/o"), Path("/l"), seen)


def test_isolation_catches_a_job_that_saw_both_gpus_or_another_one() -> None:
    uuids = bench.gpu_uuids(NVIDIA_SMI_2)
    assert uuids["1"] == "b43f15a9-3f66-dcfd-8a94-ddb6b61d9cf4"
    good = {"cuda_visible_devices": "1", "torch_device_count": 1,
            "torch_uuids": ["b43f15a9-3f66-dcfd-8a94-ddb6b61d9cf4"], "started": 0, "ended": 1}
    assert bench.check_isolation([_job_result(good)], ["0", "1"], uuids, True)["ok"]
    both = {**good, "torch_device_count": 2,
            "torch_uuids": ["4a8003e8-bb21-abfa-0e21-9088e7085ccc", good["torch_uuids"][0]]}
    other = {**good, "torch_uuids": ["4a8003e8-bb21-abfa-0e21-9088e7085ccc"]}
    unpinned = {**good, "cuda_visible_devices": None}
    problems = bench.check_isolation([_job_result(s) for s in (both, other, unpinned)],
                                     ["0", "1"], uuids, True)["problems"]
    assert any("device_count() = 2" in p for p in problems)
    assert any("pinned to GPU 1" in p and "4a8003e8" in p for p in problems)
    assert any("CUDA_VISIBLE_DEVICES=None" in p for p in problems)
    assert "no gpu_seen.json" in bench.check_isolation([_job_result({})], ["0"], uuids,
                                                       True)["problems"][0]


def test_comparisons_and_merge_on_the_committed_cache(tmp_path: Path) -> None:
    committed = ROOT / "examples/triton/vector_add_test.autotune.textproto"
    entries = load_results(committed)
    h200 = [e for e in entries if e.key.device.name == "NVIDIA H200"]
    assert h200 and len(h200) < len(entries)
    dump = tmp_path / "dump.textproto"
    save_results(dump, h200)
    job = bench.DumpJob("examples/triton", "vector_add_test", "triton")
    # The committed H200 entries, re-dumped: the merge gives back the committed bytes.
    merged, line = bench.merge_into_committed(job, dump, tmp_path / "merged.textproto")
    assert merged == committed.read_bytes() and "byte-identical" in line

    retimed = [type(e).FromString(e.SerializeToString()) for e in h200]
    retimed[0].result.time_ms *= 1.01
    retimed[0].result.candidates[0].time_ms *= 1.01
    retimed_path = tmp_path / "retimed.textproto"
    save_results(retimed_path, retimed)
    found = bench.compare_dumps(dump, retimed_path)
    assert found["equal_but_timing"] and found["retimed_only"] == 1

    flipped = [type(e).FromString(e.SerializeToString()) for e in h200]
    result = flipped[0].result
    assert len(result.candidates) > 1
    result.config.CopyFrom(result.candidates[1].config)
    flipped_path = tmp_path / "flipped.textproto"
    save_results(flipped_path, flipped)
    found = bench.compare_dumps(dump, flipped_path)
    assert not found["equal_but_timing"] and found["same_keys"] and len(found["differ"]) == 1
    tie = found["near_ties"][0]
    assert tie["kernel"] == h200[0].key.kernel and tie["single_gap_pct"] is not None

    merged_flip, _ = bench.merge_into_committed(job, flipped_path, tmp_path / "m2.textproto")
    check = bench.compare_merges(job, merged, merged_flip, {H200})
    assert check["same_keys"] and not check["equal_but_timing"]
    assert check["other_device_entries"] == len(entries) - len(h200)
    assert check["other_devices_kept"]


def test_retune_input_drops_this_devices_entries(tmp_path: Path) -> None:
    triton = ROOT / "examples/triton/matmul_test.autotune.textproto"
    path, kept, dropped = bench.strip_devices(triton, {H200}, tmp_path / "m.textproto")
    assert path is not None and kept == 2 and dropped == 3
    assert bench.devices_in(path) == {"cpu-interpreter / interpreter"}
    # The JAX example's file holds only H200 entries: nothing is left, so nothing is loaded.
    xla = ROOT / "examples/jax/matmul_chain_test.autotune.textproto"
    devices = bench.devices_in(xla)
    assert bench.strip_devices(xla, devices, tmp_path / "x.textproto") == (None, 0, 6)


def test_bad_flags_and_no_gpu_say_what_to_do(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main([str(tmp_path), "--scenarios=exact,bogus"]) == 2
    assert "--scenarios=exact,bogus: use a comma-separated subset" in capsys.readouterr().err
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present: the no-GPU refusal cannot be seen here")
    assert bench.main([str(tmp_path), "--gpus=0,1"]) == 2
    assert "no CUDA GPU here; pass --allow-cpu" in capsys.readouterr().err
    assert not (tmp_path / "results.json").exists()
