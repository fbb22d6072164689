"""//tools:regen_cache's GPU scheduler, with fake GPUs: each dump job sees only its own device."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from itertools import combinations
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))

from regen_scheduler import (  # noqa: E402
    SchedulerError,
    detect_gpus,
    gpu_slot,
    lock_path,
    make_plan,
    parse_gpu_flag,
    parse_visible_devices,
    run_nvidia_smi,
)

PIN = TOOLS / "regen_gpu_pin.py"

NVIDIA_SMI_4 = """\
GPU 0: NVIDIA H200 (UUID: GPU-0aa)
GPU 1: NVIDIA H200 (UUID: GPU-1bb)
GPU 2: NVIDIA H200 (UUID: GPU-2cc)
GPU 3: NVIDIA H200 (UUID: GPU-3dd)
"""

# A fake dump job: records the devices it sees and when it held them.
CHILD = """
import json, os, sys, time
start = time.time()
time.sleep(0.4)
print(json.dumps({"visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
                  "start": start, "end": time.time()}))
"""


def test_visible_devices_win_over_nvidia_smi() -> None:
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}, lambda: NVIDIA_SMI_4) == ["2", "3"]
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": "GPU-0aa,MIG-1"}, lambda: None) == [
        "GPU-0aa", "MIG-1"]
    # "" and "-1" hide every GPU, as they do for CUDA itself: one CPU job.
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": ""}, lambda: NVIDIA_SMI_4) == []
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": "-1"}, lambda: NVIDIA_SMI_4) == []
    assert parse_visible_devices("0,1,-1,2") == ["0", "1"]


def test_nvidia_smi_listing_or_no_gpu() -> None:
    assert detect_gpus({}, lambda: NVIDIA_SMI_4) == ["0", "1", "2", "3"]
    assert detect_gpus({}, lambda: None) == []
    assert detect_gpus({}, lambda: "No devices were found\n") == []


def test_gpu_flag_parsing() -> None:
    assert parse_gpu_flag("0,1,3") == ["0", "1", "3"]
    assert parse_gpu_flag("none") == []
    with pytest.raises(SchedulerError, match="distinct"):
        parse_gpu_flag("0,0")


def test_plan_without_gpu_is_one_unpinned_job(tmp_path: Path) -> None:
    plan = make_plan([], tmp_path / "locks", sys.executable, PIN)
    assert (plan.jobs, plan.bazel_flags) == (1, ("--local_test_jobs=1",))
    assert "no GPU" in plan.describe()
    assert not (tmp_path / "locks").exists()


def test_plan_with_gpus_pins_through_run_under(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    plan = make_plan(["0", "1", "2", "3"], locks, sys.executable, PIN)
    assert plan.jobs == 4
    assert plan.bazel_flags == (
        "--local_test_jobs=4",
        f"--run_under={sys.executable} {PIN} --lock-dir={locks} --gpus=0,1,2,3",
    )
    assert sorted(p.name for p in locks.iterdir()) == [f"gpu-{i}.lock" for i in range(4)]


def test_plan_rejects_paths_run_under_cannot_carry(tmp_path: Path) -> None:
    with pytest.raises(SchedulerError, match="whitespace"):
        make_plan(["0"], tmp_path / "lock dir", sys.executable, PIN)


def test_slot_without_lock_file_says_how_to_run(tmp_path: Path) -> None:
    with pytest.raises(SchedulerError, match="regen_cache creates it"), \
            gpu_slot(tmp_path, ["0"]):
        pass


def test_slots_are_exclusive_within_one_process(tmp_path: Path) -> None:
    make_plan(["0", "1"], tmp_path, sys.executable, PIN)
    with gpu_slot(tmp_path, ["0", "1"]) as first, gpu_slot(tmp_path, ["0", "1"]) as second:
        assert {first, second} == {"0", "1"}
    assert lock_path(tmp_path, "GPU-a/b") == tmp_path / "gpu-GPU-a_b.lock"


def test_each_concurrent_job_sees_only_its_own_gpu(tmp_path: Path) -> None:
    gpus = ["0", "1", "2"]
    locks = tmp_path / "locks"
    make_plan(gpus, locks, sys.executable, PIN)
    # Six jobs at once on three fake GPUs: three must wait for a free device.
    jobs = [
        subprocess.Popen(
            [sys.executable, str(PIN), f"--lock-dir={locks}", "--gpus=0,1,2",
             sys.executable, "-c", CHILD],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={"CUDA_VISIBLE_DEVICES": "0,1,2", "PATH": "/usr/bin:/bin"},
        )
        for _ in range(6)
    ]
    records = []
    for job in jobs:
        out, err = job.communicate(timeout=60)
        assert job.returncode == 0, err
        records.append(json.loads(out.strip().splitlines()[-1]))
        assert "pinned to CUDA_VISIBLE_DEVICES=" in err
    assert all(r["visible"] in gpus for r in records), records
    assert len({r["visible"] for r in records}) >= 2, records
    for a, b in combinations(records, 2):
        if a["visible"] == b["visible"]:
            assert a["end"] <= b["start"] or b["end"] <= a["start"], (a, b)
    # Never more jobs at once than GPUs.
    for r in records:
        running = sum(1 for o in records if o["start"] <= r["start"] < o["end"])
        assert running <= len(gpus), records


def test_pin_wrapper_returns_the_job_exit_code(tmp_path: Path) -> None:
    make_plan(["7"], tmp_path, sys.executable, PIN)
    done = subprocess.run(
        [sys.executable, str(PIN), f"--lock-dir={tmp_path}", "--gpus=7", "--",
         sys.executable, "-c", "import os, sys; sys.exit(int(os.environ['CUDA_VISIBLE_DEVICES']))"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 7, done.stderr


def test_one_gpu_is_shared_serially(tmp_path: Path) -> None:
    # One H200: jobs share it one after another.
    make_plan(["0"], tmp_path, sys.executable, PIN)
    started = time.monotonic()
    jobs = [subprocess.Popen([sys.executable, str(PIN), f"--lock-dir={tmp_path}", "--gpus=0",
                              sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
            for _ in range(2)]
    records = [json.loads(job.communicate(timeout=60)[0]) for job in jobs]
    assert time.monotonic() - started >= 0.8
    a, b = records
    assert a["end"] <= b["start"] or b["end"] <= a["start"], records


# A real dump-like job: which physical GPU does CUDA give it?
CUDA_CHILD = """
import json, os, time
import torch
start = time.time()
props = torch.cuda.get_device_properties(0)
torch.ones(1 << 20, device="cuda").sum().item()
time.sleep(0.5)
print(json.dumps({"visible": os.environ["CUDA_VISIBLE_DEVICES"], "count": torch.cuda.device_count(),
                  "uuid": str(props.uuid), "start": start, "end": time.time()}))
"""


@pytest.mark.gpu
def test_real_gpus_each_job_sees_only_its_own(tmp_path: Path) -> None:
    listing = run_nvidia_smi() or ""
    gpus = detect_gpus(os.environ)
    if not gpus:
        pytest.skip("no GPU: nvidia-smi lists none (or CUDA_VISIBLE_DEVICES hides them)")
    uuids = dict(re.findall(r"^GPU (\d+): .*\(UUID: GPU-([0-9a-f-]+)\)", listing, re.MULTILINE))
    make_plan(gpus, tmp_path, sys.executable, PIN)
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    jobs = [subprocess.Popen([sys.executable, str(PIN), f"--lock-dir={tmp_path}",
                              f"--gpus={','.join(gpus)}", sys.executable, "-c", CUDA_CHILD],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            for _ in range(2 * len(gpus))]
    records = []
    for job in jobs:
        out, err = job.communicate(timeout=300)
        assert job.returncode == 0, err
        records.append(json.loads(out.strip().splitlines()[-1]))
    for r in records:
        assert r["count"] == 1, r
        if r["visible"] in uuids:
            assert r["uuid"] == uuids[r["visible"]], (r, uuids)
    for a, b in combinations(records, 2):
        if a["uuid"] == b["uuid"]:
            assert a["end"] <= b["start"] or b["end"] <= a["start"], (a, b)
    print(f"{len(records)} jobs on {len(gpus)} GPU(s): "
          + ", ".join(f"{r['visible']}->{r['uuid'][:8]}" for r in records))


def test_remote_executor_and_jobs_flags_delegate_scheduling() -> None:
    from regen_scheduler import delegated_plan, delegating_flags

    flags = ["--config=gpu", "--remote_executor=grpc://x", "--jobs=8", "--remote_executor="]
    assert delegating_flags(flags) == ("--remote_executor=grpc://x", "--jobs=8")
    assert delegating_flags(["--config=gpu"]) == ()
    plan = delegated_plan(("--jobs=8",))
    assert plan.bazel_flags == () and plan.gpus == ()
