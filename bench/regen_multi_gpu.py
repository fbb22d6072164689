"""Multi-GPU cache regeneration without Bazel: the examples' `.dump` commands, one job per GPU.

    python3 bench/regen_multi_gpu.py OUT_DIR [--gpus=0,1] [--scenarios=exact,retune]
        [--examples=NAME,...] [--single-runs=2] [--strip-devices='DEV|DEV'] [--allow-cpu]
    python3 bench/regen_multi_gpu.py EXTRACTED_ARTIFACTS_DIR --recheck     # offline, no GPU

docs/benchmarks.md ("regen_multi_gpu") has the figures of two-H200 runs.

The GPU machine has no Bazel, so this drives `//tools:regen_cache`'s scheduler
(tools/regen_scheduler.py, unchanged) by hand with the command each `.dump` target runs:

- The jobs are the `.dump` targets of the examples, found as their BUILD files find them
  (`glob(["*_test.py"])` in examples/triton, backend "triton", and examples/jax, backend "xla"),
  sorted by label as `bazel query` lists them.
- Each job's environment is the `.dump` target's `env`, built by the macro's own flag functions:
  rules/private/flags.bzl is plain-Python-compatible Starlark and is executed here, so
  `AUTOTUNE_FLAGS` / `XLA_FLAGS` are byte for byte what `autotune_flags(..., dump = True)` /
  `xla_flags(..., dump = True)` return. Plus `AUTOTUNE_REGEN_HINT`, `AUTOTUNE_TEST_MAIN`,
  `AUTOTUNE_DUMP_TARGET` as the macro sets them, and what `bazel test` sets
  (`TEST_UNDECLARED_OUTPUTS_DIR`, `TEST_TMPDIR`, `TEST_TARGET`, `TEST_WORKSPACE`).
- Each job's command is the `--run_under` prefix from `make_plan()` (the pin wrapper
  tools/regen_gpu_pin.py with its lock dir and GPU list) followed by the `.dump` target's main,
  the macro's wrapper (rules/private/rules_autotune_test_wrapper.py, read from
  autotuned_py_test.bzl), run as `python3 <wrapper>`; at most `--local_test_jobs` (from the
  plan) run at a time.
- The dumps are merged into the committed caches with tools/regen_diff.py's `committed_bytes`
  and summarised with its `compare`, exactly as regen_cache's harvest step does.

Where this differs from `bazel run //tools:regen_cache`:
no sandbox or runfiles tree: the working directory is the repository root, standing in for the
runfiles root `$TEST_SRCDIR/_main` (so the `$(rootpath)` cache paths resolve the same), and
imports come from `PYTHONPATH=<repo root>` and the machine's own site-packages instead of the
pip hub. One directory is added in front of PYTHONPATH: an observer `sitecustomize`
(OBSERVER_SOURCE below, written to a temporary directory) that records, inside each job, the job's
`CUDA_VISIBLE_DEVICES`, `torch.cuda.device_count()` and device UUIDs. Each run gets a fresh
`TRITON_CACHE_DIR` shared by its jobs, so no run reuses another's compiled kernels.

Scenarios, each run with the first GPU alone and then with every GPU:

- `exact`: the `.dump` targets as they are: each loads its committed cache, so on a GPU type
  the committed caches already cover, every lookup hits and nothing is tuned;
- `retune`: the same commands, loading a copy of the committed cache without the entries of
  this machine's device(s) (those the `exact` single-GPU dumps hold, or `--strip-devices`):
  every key of this GPU type is tuned again, as on the first regen for a new GPU type. A copy
  left with no entry is not loaded at all, as the macro does for a cache that does not exist
  yet (the JAX example's file holds only H200 entries).

`--single-runs=2` adds a second single-GPU run after the all-GPU one: a same-run control for
what differs between two single-GPU runs anyway.

Checks, per scenario: each job saw exactly one GPU, with the UUID that `nvidia-smi -L` gives
its pin; the all-GPU run's dumps hold the same keys as the single-GPU run's and compare equal
in everything but the timing fields (`result.time_ms`, `candidates[].time_ms`, `tuned_at`,
`tuning_seconds`; XLA's entries hold no timing, so they compare as bytes); the dumps merge into
the committed caches the same way, keeping every other device's entry byte for byte. Where
nothing is tuned (`exact`) any other difference fails; a re-tuned entry whose winner differs
between runs is reported with each run's time for both winners (`near_ties`) and, with
`--single-runs=2`, the control's flips, since re-tuning picks another winner among candidates
that time within noise (docs/bazel.md, "Timing fields").

Writes OUT_DIR/results.json, OUT_DIR/summary.md and OUT_DIR/artifacts.tar.gz (dumps, merged
caches, logs, per-job observations), and prints the summary. Exit status 0 when every check
passed, 1 when one failed, 2 when it cannot run (no GPU without --allow-cpu, bad flags).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(TOOLS))

from regen_diff import committed_bytes, compare, strip_timing  # noqa: E402
from regen_scheduler import (  # noqa: E402
    detect_gpus,
    make_plan,
    parse_gpu_flag,
    run_nvidia_smi,
)

from autotune_cache.proto import autotune_results_pb2 as pb  # noqa: E402
from autotune_cache.resultsets.registry import load_any  # noqa: E402

PIN_SCRIPT = TOOLS / "regen_gpu_pin.py"
MACRO = ROOT / "rules" / "private" / "autotuned_py_test.bzl"
FLAGS_BZL = ROOT / "rules" / "private" / "flags.bzl"
OBSERVATION = "gpu_seen.json"
DUMP_FILE_NAME = "autotune_cache.textproto"  # flags.bzl's DUMP_PATH, checked in run_dumps()
# The example packages and their macro backend (examples/triton/BUILD.bazel and
# examples/jax/BUILD.bazel glob `*_test.py` with these backends).
PACKAGES = (("examples/jax", "xla"), ("examples/triton", "triton"))
SCENARIOS = ("exact", "retune")
JOB_TIMEOUT_S = 300
_NVIDIA_SMI_UUID = re.compile(r"^GPU (\d+):.*\(UUID: ([^)]+)\)", re.MULTILINE)


_LOAD_LINE = re.compile(r'^load\(":([\w.]+\.bzl)"[^)]*\)\s*$', re.MULTILINE)


class BenchError(Exception):
    """Something the bench cannot do; the message says what to fix."""


# --------------------------------------------------------------------------------------------
# What a `.dump` target runs


def load_flag_functions(path: Path = FLAGS_BZL) -> dict[str, object]:
    """The functions of rules/private/flags.bzl, executed as Python (the file is Starlark that
    is also valid Python; `fail()` becomes an exception)."""

    def fail(message: str) -> None:
        raise BenchError(f"{path}: {message}")

    namespace: dict[str, object] = {"fail": fail}
    source = path.read_text()
    try:
        # `load(":other.bzl", "NAME", ...)` of a sibling file: run that file first (it must be
        # Python-compatible too) and drop the load line.
        for found in _LOAD_LINE.finditer(source):
            sibling = path.with_name(found.group(1))
            exec(compile(sibling.read_text(), str(sibling), "exec"), namespace)
        source = _LOAD_LINE.sub("", source)
        exec(compile(source, str(path), "exec"), namespace)
    except (OSError, SyntaxError) as e:
        raise BenchError(
            f"cannot run {path} as Python ({type(e).__name__}: {e}); the bench builds the "
            ".dump flags with it, so keep flags.bzl free of load() and Starlark-only syntax, "
            "or update load_flag_functions()."
        ) from e
    for name in ("autotune_flags", "xla_flags", "DUMP_PATH"):
        if name not in namespace:
            raise BenchError(f"{path} no longer defines {name}; update bench/regen_multi_gpu.py")
    return namespace


def dump_wrapper(macro: Path = MACRO) -> Path:
    """The main every `.dump` target runs: the wrapper Label() in autotuned_py_test.bzl."""
    found = re.search(r'wrapper\s*=\s*Label\("//([^:"]*):([^"]+\.py)"\)', macro.read_text())
    if not found:
        raise BenchError(f"no `wrapper = Label(\"//pkg:file.py\")` in {macro}; update "
                         "dump_wrapper() in bench/regen_multi_gpu.py")
    return ROOT / found.group(1) / found.group(2)


@dataclass(frozen=True)
class DumpJob:
    """One `.dump` target: `//<package>:<name>.dump`."""

    package: str
    name: str
    backend: str
    # Tests only: another main file (absolute) than `<package>/<name>.py`.
    main_file: str = ""

    @property
    def label(self) -> str:
        return f"//{self.package}:{self.name}.dump"

    @property
    def main(self) -> str:
        """The test's main, as `$(rootpath)` gives it (relative to the workspace root)."""
        return self.main_file or f"{self.package}/{self.name}.py"

    @property
    def cache(self) -> str:
        """The committed cache (the macro's default `<name>.autotune.textproto`)."""
        return f"{self.package}/{self.name}.autotune.textproto"

    @property
    def regen_hint(self) -> str:
        return f"bazel run //{self.package}:{self.name}.regen"


def discover_jobs(root: Path = ROOT, only: Sequence[str] = ()) -> list[DumpJob]:
    """The examples' `.dump` targets, sorted by label; `only` keeps those whose name matches."""
    jobs = [DumpJob(package, path.stem, backend)
            for package, backend in PACKAGES
            for path in sorted((root / package).glob("*_test.py"))]
    if only:
        unknown = set(only) - {j.name for j in jobs}
        if unknown:
            raise BenchError(f"--examples: no example test named {', '.join(sorted(unknown))} "
                             f"(have: {', '.join(j.name for j in jobs)})")
        jobs = [j for j in jobs if j.name in only]
    return sorted(jobs, key=lambda j: j.label)


def dump_env(job: DumpJob, base: dict[str, str], outputs: Path, tmp: Path,
             load_from: str | None, flag_functions: dict[str, object]) -> dict[str, str]:
    """The environment the `.dump` target's test process gets (see the module docstring)."""
    env = {k: v for k, v in base.items()
           if k not in ("AUTOTUNE_FLAGS", "XLA_FLAGS", "CUDA_VISIBLE_DEVICES",
                        "TEST_TOTAL_SHARDS", "TEST_SHARD_INDEX", "TEST_SHARD_STATUS_FILE")}
    if job.backend == "triton":
        variable = "AUTOTUNE_FLAGS"
        value = flag_functions["autotune_flags"](  # type: ignore[operator]
            target=job.name, user_flags="", cache_path=load_from, dump=True,
            require_complete=False)
    else:
        variable = "XLA_FLAGS"
        value = flag_functions["xla_flags"](  # type: ignore[operator]
            target=job.name, user_flags="", cache_path=load_from, dump=True,
            require_complete=False, per_fusion_cache_dir=None)
    env[variable] = value
    env.update(
        AUTOTUNE_REGEN_HINT=job.regen_hint,
        AUTOTUNE_TEST_MAIN=job.main,
        AUTOTUNE_DUMP_TARGET=job.label,
        TEST_UNDECLARED_OUTPUTS_DIR=str(outputs),
        TEST_TMPDIR=str(tmp),
        TEST_TARGET=job.label,
        TEST_WORKSPACE="_main",
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(observer_dir()), str(ROOT),
                                                 base.get("PYTHONPATH")])),
    )
    return env


# --------------------------------------------------------------------------------------------
# Running the jobs through the scheduler


@dataclass
class JobResult:
    """One job of one run."""

    job: DumpJob
    rc: int
    wall_s: float
    start_s: float
    end_s: float
    outputs: Path
    log: Path
    seen: dict = field(default_factory=dict)

    @property
    def dump(self) -> Path:
        return self.outputs / DUMP_FILE_NAME

    def to_json(self) -> dict:
        return {"label": self.job.label, "rc": self.rc, "wall_s": round(self.wall_s, 2),
                "start_s": round(self.start_s, 2), "end_s": round(self.end_s, 2),
                "dumped": self.dump.is_file(), "seen": self.seen,
                "log": str(self.log)}


def run_dumps(jobs: Sequence[DumpJob], gpus: Sequence[str], work: Path,
              loads: dict[str, str | None], base_env: dict[str, str] | None = None,
              timeout_s: float = JOB_TIMEOUT_S) -> tuple[dict, list[JobResult]]:
    """Runs every job once, spread over `gpus` by regen_scheduler's plan; returns (the plan as
    JSON, the results in job order). `loads` maps a label to the cache path its dump loads."""
    flag_functions = load_flag_functions()
    if str(flag_functions["DUMP_PATH"]).split("/")[-1] != DUMP_FILE_NAME:
        raise BenchError(f"flags.bzl's DUMP_PATH is {flag_functions['DUMP_PATH']}, not "
                         f".../{DUMP_FILE_NAME}; update bench/regen_multi_gpu.py")
    wrapper = dump_wrapper()
    base = dict(os.environ if base_env is None else base_env)
    work.mkdir(parents=True, exist_ok=True)
    plan = make_plan(list(gpus), work / "locks", sys.executable, PIN_SCRIPT)
    run_under: list[str] = []
    for flag in plan.bazel_flags:
        if flag.startswith("--run_under="):
            run_under = shlex.split(flag[len("--run_under="):])
    base["TRITON_CACHE_DIR"] = str(work / "triton_cache")
    started = time.perf_counter()
    log_lock = threading.Lock()

    def one(job: DumpJob) -> JobResult:
        slug = job.label.strip("/").replace("/", "_").replace(":", "_")
        outputs, tmp = work / slug / "test.outputs", work / slug / "tmp"
        for d in (outputs, tmp):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
        env = dump_env(job, base, outputs, tmp, loads.get(job.label), flag_functions)
        command = [*run_under, sys.executable, str(wrapper)]
        log = work / slug / "test.log"
        begin = time.perf_counter()
        try:
            done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True,
                                  timeout=timeout_s, check=False)
            rc, out, err = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired as e:
            rc, out, err = 124, str(e.stdout or ""), f"{e.stderr or ''}\n[timed out]"
        end = time.perf_counter()
        flags_var = "AUTOTUNE_FLAGS" if job.backend == "triton" else "XLA_FLAGS"
        log.write_text(f"$ {shlex.join(command)}\n{flags_var}={env[flags_var]}\n"
                       f"rc={rc} wall={end - begin:.1f}s\n--- stdout\n{out}\n--- stderr\n{err}\n")
        seen_path = outputs / OBSERVATION
        seen = json.loads(seen_path.read_text()) if seen_path.is_file() else {}
        with log_lock:
            print(f"    {job.label:<42} rc={rc} {end - begin:6.1f} s  "
                  f"CUDA_VISIBLE_DEVICES={seen.get('cuda_visible_devices')} "
                  f"device_count={seen.get('torch_device_count')}", flush=True)
        return JobResult(job, rc, end - begin, begin - started, end - started, outputs, log,
                         seen)

    with ThreadPoolExecutor(max_workers=plan.jobs) as pool:
        results = list(pool.map(one, jobs))
    wall = time.perf_counter() - started
    shutil.rmtree(work / "triton_cache", ignore_errors=True)
    return {"gpus": list(plan.gpus), "jobs": plan.jobs, "bazel_flags": list(plan.bazel_flags),
            "describe": plan.describe(), "wall_s": round(wall, 2)}, results


# --------------------------------------------------------------------------------------------
# Checks


def gpu_uuids(listing: str | None) -> dict[str, str]:
    """`nvidia-smi -L` index -> UUID (lower case, without the "GPU-" prefix)."""
    return {index: normalize_uuid(uuid)
            for index, uuid in _NVIDIA_SMI_UUID.findall(listing or "")}


def normalize_uuid(uuid: str) -> str:
    """torch prints UUIDs bare, nvidia-smi with a "GPU-" prefix."""
    uuid = uuid.strip().lower()
    return uuid[4:] if uuid.startswith("gpu-") else uuid


def check_isolation(results: Sequence[JobResult], gpus: Sequence[str],
                    uuids: dict[str, str], want_cuda: bool) -> dict:
    """Each job saw one GPU, the one it was pinned to; returns the findings and `ok`."""
    problems: list[str] = []
    per_gpu: dict[str, list[str]] = {}
    for r in results:
        seen = r.seen
        pin = seen.get("cuda_visible_devices")
        label = r.job.label
        if not seen:
            problems.append(f"{label}: no {OBSERVATION} (the observer did not run)")
            continue
        if gpus and pin not in gpus:
            problems.append(f"{label}: CUDA_VISIBLE_DEVICES={pin!r}, not one of {list(gpus)}")
        per_gpu.setdefault(str(pin), []).append(label)
        if want_cuda:
            if seen.get("torch_device_count") != 1:
                problems.append(f"{label}: torch.cuda.device_count() = "
                                f"{seen.get('torch_device_count')} inside the job, not 1")
            want = uuids.get(str(pin))
            got = [normalize_uuid(u) for u in seen.get("torch_uuids", [])]
            if want and got != [want]:
                problems.append(f"{label}: pinned to GPU {pin} ({want}) but saw {got}")
    overlap = max_overlap(results)
    return {"ok": not problems, "problems": problems, "jobs_per_gpu": per_gpu,
            "max_concurrent_jobs": overlap}


def max_overlap(results: Sequence[JobResult]) -> int:
    """The most jobs that ran at the same moment (from the observer's start/end times)."""
    spans = [(r.seen["started"], r.seen["ended"]) for r in results
             if "started" in r.seen and "ended" in r.seen]
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans],
                    key=lambda x: (x[0], x[1]))
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def timing_free(payload: bytes, ours: bool) -> bytes:
    """An entry's bytes without the timing fields. Only our own format has such fields; XLA's
    entries (`ours` False) hold no timing and are compared as they are."""
    stripped = strip_timing(payload) if ours else None
    return payload if stripped is None else stripped


def compare_dumps(single: Path, multi: Path) -> dict:
    """One test's dump of another run (`multi`) against a single-GPU dump, entry by entry.

    `differ` lists the entries whose non-timing fields differ (in practice: another winning
    config); for our format `near_ties` gives, per such entry, how much slower each run timed
    the other run's winner than its own (a small gap means the two configs tie within noise).
    """
    set_a, set_b = load_any(single), load_any(multi)
    ours = set_a.format_name == set_b.format_name == "autotune_cache"
    a = {r.id: r for r in set_a.rows()}
    b = {r.id: r for r in set_b.rows()}
    both = sorted(a.keys() & b.keys())
    identical = sum(1 for i in both if a[i].payload == b[i].payload)
    retimed = sum(1 for i in both if a[i].payload != b[i].payload
                  and timing_free(a[i].payload, ours) == timing_free(b[i].payload, ours))
    differing = [i for i in both
                 if timing_free(a[i].payload, ours) != timing_free(b[i].payload, ours)]
    differ = [f"{b[i].kernel} [{b[i].problem}]: {a[i].config} -> {b[i].config}"
              for i in differing]
    near_ties = [near_tie(a[i].payload, b[i].payload) for i in differing] if ours else []
    return {"format": set_b.format_name, "entries": len(b),
            "only_single": len(a.keys() - b.keys()), "only_multi": len(b.keys() - a.keys()),
            "same_keys": a.keys() == b.keys(), "identical_bytes": identical,
            "retimed_only": retimed, "differ": differ, "near_ties": near_ties,
            "equal_but_timing": not differing and a.keys() == b.keys()}


def near_tie(payload_a: bytes, payload_b: bytes) -> dict:
    """For one entry two runs tuned to different winners: each run's time for its own winner
    and for the other run's, and how much slower (%) it timed the other's."""
    entries = {"single": pb.Entry.FromString(payload_a), "other": pb.Entry.FromString(payload_b)}
    winner = {k: e.result.config.SerializeToString(deterministic=True)
              for k, e in entries.items()}
    result: dict = {"kernel": entries["other"].key.kernel,
                    "problem": entries["other"].key.problem}
    for name, rival in (("single", "other"), ("other", "single")):
        times = {c.config.SerializeToString(deterministic=True): c.time_ms
                 for c in entries[name].result.candidates}
        own, theirs = times.get(winner[name]), times.get(winner[rival])
        result[f"{name}_ms"] = [own, theirs]
        result[f"{name}_gap_pct"] = (round(100 * (theirs / own - 1), 2)
                                     if own and theirs else None)
    return result


def merge_into_committed(job: DumpJob, dump: Path, out: Path) -> tuple[bytes, str]:
    """regen_cache's harvest step for one dump: the new committed bytes and the summary line."""
    destination = ROOT / job.cache
    old = destination.read_bytes() if destination.is_file() else None
    new = committed_bytes(old, dump.read_bytes(), destination.suffix)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(new)
    return new, compare(old, new, destination.suffix).describe()


def compare_merges(job: DumpJob, single: bytes, multi: bytes, devices: set[str]) -> dict:
    """The merged files of the two runs: equal but timing, and the other devices' entries kept
    byte for byte from the committed cache."""
    suffix = (ROOT / job.cache).suffix
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, data in (("single", single), ("multi", multi)):
            paths.append(Path(tmp) / f"{name}{suffix}")
            paths[-1].write_bytes(data)
        result = compare_dumps(paths[0], paths[1])
        committed = {r.id: r for r in load_any(ROOT / job.cache).rows()}
        merged = {r.id: r for r in load_any(paths[1]).rows()}
    others = {i for i, r in committed.items() if r.device not in devices}
    result["other_device_entries"] = len(others)
    result["other_devices_kept"] = all(
        i in merged and merged[i].payload == committed[i].payload for i in others)
    return result


def devices_in(dump: Path) -> set[str]:
    """The devices a dump's entries were tuned on (as regen_diff.committed_bytes sees them)."""
    return {r.device for r in load_any(dump).rows()} if dump.is_file() else set()


def strip_devices(cache: Path, devices: set[str], out: Path) -> tuple[Path | None, int, int]:
    """A copy of `cache` without the entries of `devices`; None when nothing would be left.
    Returns (path or None, entries kept, entries dropped)."""
    loaded = load_any(cache)
    rows = loaded.rows()
    keep = {r.id for r in rows if r.device not in devices}
    if not keep:
        return None, 0, len(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    loaded.select(keep).save(out)
    return out, len(keep), len(rows) - len(keep)


# --------------------------------------------------------------------------------------------
# The benchmark


def run_scenario(name: str, jobs: Sequence[DumpJob], gpus: Sequence[str], out: Path,
                 loads: dict[str, str | None], uuids: dict[str, str], want_cuda: bool,
                 timeout_s: float, single_runs: int = 1, expect_identical: bool = False) -> dict:
    """One scenario: a single-GPU run, the all-GPU run, then `single_runs - 1` more single-GPU
    runs (a same-run control: what differs between two single-GPU runs is tuning noise, not the
    GPU count; running one after the all-GPU run also evens out warm-up effects).

    Fails on a failed dump, a job that saw another GPU than its pin, dumps or merges with other
    keys, or other devices' entries not kept byte for byte; with `expect_identical` (nothing is
    tuned) also on any non-timing difference. Winner flips between re-tuned entries are
    reported (with the control), not failed: docs/bazel.md "Timing fields" says why."""
    runs: dict[str, dict] = {}
    results: dict[str, list[JobResult]] = {}
    variants = [("1gpu", list(gpus[:1]))]
    if len(gpus) > 1:
        variants.append((f"{len(gpus)}gpu", list(gpus)))
    variants += [(f"1gpu-{n + 1}", list(gpus[:1])) for n in range(1, single_runs)]
    for key, use in variants:
        print(f"  {name} / {key}: {len(jobs)} dump(s) on GPU(s) {','.join(use) or 'none'}",
              flush=True)
        plan, res = run_dumps(jobs, use, out / "work" / name / key, loads, timeout_s=timeout_s)
        runs[key] = {"plan": plan, "jobs": [r.to_json() for r in res],
                     "isolation": check_isolation(res, use, uuids, want_cuda)}
        results[key] = res
        print(f"  {name} / {key}: wall {plan['wall_s']:.1f} s; "
              f"isolation {'ok' if runs[key]['isolation']['ok'] else 'FAILED'}", flush=True)
    summary: dict = {"runs": runs, "per_example": {}}
    single_key, multi_key = variants[0][0], variants[min(1, len(variants) - 1)][0]
    control_key = variants[2][0] if len(variants) > 2 else None
    ok = all(r["isolation"]["ok"] for r in runs.values())
    for i, job in enumerate(jobs):
        single, multi = results[single_key][i], results[multi_key][i]
        entry: dict = {"rc": {k: results[k][i].rc for k in results}}
        if any(results[k][i].rc or not results[k][i].dump.is_file() for k in results):
            entry["ok"] = False
            entry["problem"] = "a dump failed or wrote no file; see the logs"
            ok = False
            summary["per_example"][job.label] = entry
            continue
        entry["dumps"] = compare_dumps(single.dump, multi.dump)
        if control_key:
            entry["control"] = compare_dumps(single.dump, results[control_key][i].dump)
        merged_dir = out / "merged" / name
        new_single, entry["merge_single"] = merge_into_committed(
            job, single.dump, merged_dir / single_key / job.cache)
        new_multi, entry["merge_multi"] = merge_into_committed(
            job, multi.dump, merged_dir / multi_key / job.cache)
        entry["merged"] = compare_merges(job, new_single, new_multi,
                                         devices_in(single.dump) | devices_in(multi.dump))
        entry["ok"] = (entry["dumps"]["same_keys"] and entry["merged"]["same_keys"]
                       and entry["merged"]["other_devices_kept"]
                       and (not expect_identical or (entry["dumps"]["equal_but_timing"]
                                                     and entry["merged"]["equal_but_timing"])))
        ok &= entry["ok"]
        summary["per_example"][job.label] = entry
    singles = [runs[k]["plan"]["wall_s"] for k, _ in variants if k.startswith("1gpu")]
    multi_wall = runs[multi_key]["plan"]["wall_s"]
    summary["single_walls_s"] = singles
    summary["speedup"] = round(singles[0] / multi_wall, 3) if multi_wall else None
    summary["speedup_vs_mean_single"] = (round(sum(singles) / len(singles) / multi_wall, 3)
                                         if multi_wall else None)
    summary["winner_flips"] = sum(len(e.get("dumps", {}).get("differ", []))
                                  for e in summary["per_example"].values())
    if control_key:
        summary["winner_flips_control"] = sum(len(e.get("control", {}).get("differ", []))
                                              for e in summary["per_example"].values())
    summary["ok"] = ok
    return summary


def _flips(d: dict) -> str:
    """'n' or 'n (kernel: a -> b, gaps x% / y%; ...)' for a compare_dumps() result."""
    if not d["differ"]:
        return "0"
    gaps = [f"{t['single_gap_pct']}% / {t['other_gap_pct']}%" for t in d["near_ties"]]
    notes = [f"{text}" + (f", gaps {gaps[n]}" if n < len(gaps) else "")
             for n, text in enumerate(d["differ"])]
    return f"{len(d['differ'])} ({'; '.join(notes)})"


def format_summary(report: dict) -> str:
    """The markdown summary printed at the end and written to summary.md."""
    lines = [f"# regen_multi_gpu: {report['host']['gpus_line']}", "",
             f"command: `{report['command']}`", ""]
    for name, sc in report["scenarios"].items():
        lines += [f"## {name}", "", "| run | plan | wall | max concurrent | isolation |",
                  "| --- | --- | --- | --- | --- |"]
        for key, run in sc["runs"].items():
            iso = run["isolation"]
            lines.append(f"| {key} | {run['plan']['describe']} | {run['plan']['wall_s']:.1f} s | "
                         f"{iso['max_concurrent_jobs']} | "
                         f"{'ok' if iso['ok'] else '; '.join(iso['problems'])} |")
        lines += ["", f"speed-up: **{sc['speedup']}×** (first single-GPU run / all-GPU run); "
                  f"{sc['speedup_vs_mean_single']}× against the mean of the single-GPU runs "
                  f"{sc['single_walls_s']}", "",
                  f"winner flips, all-GPU vs single-GPU: {sc['winner_flips']}; control, single "
                  f"vs single: {sc.get('winner_flips_control', 'not run')}", "",
                  "| dump | job walls (runs in order) | dumps all-GPU vs 1-GPU: entries, "
                  "identical bytes, retimed only, other winner (gaps: each run's time for the "
                  "other's winner) | control 1-GPU vs 1-GPU: other winner | merged vs committed "
                  "(1 GPU) | merged vs committed (all) | merges: same keys, equal but timing, "
                  "other devices' entries kept |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for label, ex in sc["per_example"].items():
            walls = "/".join(f"{j['wall_s']:.1f}" for run in sc["runs"].values()
                             for j in run["jobs"] if j["label"] == label)
            if "dumps" not in ex:
                lines.append(f"| {label} | {walls} s | FAILED: {ex.get('problem')} | | | | |")
                continue
            d, m = ex["dumps"], ex["merged"]
            control = _flips(ex["control"]) if "control" in ex else "-"
            lines.append(
                f"| {label} | {walls} s | {d['entries']}, {d['identical_bytes']}, "
                f"{d['retimed_only']}, {_flips(d)} | {control} | {ex['merge_single']} | "
                f"{ex['merge_multi']} | {m['same_keys']}, {m['equal_but_timing']}, "
                f"{m['other_device_entries']} kept: {m['other_devices_kept']} |")
        lines.append("")
    lines.append(f"overall: {'ALL OK' if report['ok'] else 'FAILED'}")
    return "\n".join(lines)


def recheck(artifacts: Path) -> dict:
    """Offline, on any machine: redoes the comparisons and regen_cache's merge on the dumps of
    an extracted artifacts.tar.gz with this checkout's tools and committed caches, and checks
    that each merged file equals the one the GPU machine wrote."""
    found: dict = {}
    jobs = discover_jobs()
    for scenario_dir in sorted(p for p in (artifacts / "work").iterdir() if p.is_dir()):
        runs = [p.name for p in sorted(scenario_dir.iterdir()) if p.is_dir()]
        for job in jobs:
            slug = job.label.strip("/").replace("/", "_").replace(":", "_")
            dumps = {r: scenario_dir / r / slug / "test.outputs" / DUMP_FILE_NAME for r in runs}
            if not all(d.is_file() for d in dumps.values()):
                continue
            row: dict = {}
            for run, dump in dumps.items():
                local = merge_into_committed(job, dump, artifacts / "recheck" / scenario_dir.name
                                             / run / job.cache)
                remote = artifacts / "merged" / scenario_dir.name / run / job.cache
                # None: the GPU machine merged only the first single-GPU and the all-GPU run.
                row[run] = {"local_merge": local[1],
                            "equals_device_merge": remote.read_bytes() == local[0]
                            if remote.is_file() else None}
            multi = next((r for r in runs if not r.startswith("1gpu")), None)
            if multi:
                row["dumps"] = compare_dumps(dumps["1gpu"], dumps[multi])
            found[f"{scenario_dir.name} {job.label}"] = row
    return found


def warm_up() -> float:
    """Imports torch, Triton and JAX once in a throw-away process, so that the first timed run
    does not pay for reading them from a cold disk; returns its wall time."""
    begin = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, triton\ntry:\n import jax\n"
                    "except ImportError:\n pass"], capture_output=True, check=False)
    return round(time.perf_counter() - begin, 1)


def pack(out: Path) -> Path:
    """artifacts.tar.gz: the dumps, merged caches, logs and observations (no lock files)."""
    archive = out / "artifacts.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for sub in ("work", "merged", "stripped"):
            path = out / sub
            if path.exists():
                tar.add(path, arcname=sub,
                        filter=lambda t: None if t.name.endswith(".lock") else t)
    return archive


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="where results.json, summary.md and "
                        "artifacts.tar.gz go")
    parser.add_argument("--gpus", help="GPU ids (default: as regen_cache: "
                        "CUDA_VISIBLE_DEVICES, else nvidia-smi -L)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help=f"comma-separated, of {', '.join(SCENARIOS)} (default: both)")
    parser.add_argument("--examples", default="",
                        help="comma-separated test names (default: every example)")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="run without a CUDA GPU (Triton's interpreter; pass fake --gpus) to "
                        "check the plumbing; XLA on CPU dumps nothing, so its job fails")
    parser.add_argument("--single-runs", type=int, default=1,
                        help="single-GPU runs per scenario (2: a same-run control for the "
                        "winner flips; the extra run goes after the all-GPU run)")
    parser.add_argument("--strip-devices", default="",
                        help="'|'-separated devices whose entries `retune` drops (default: "
                        "those of the `exact` single-GPU dumps; giving them skips `exact` "
                        "unless --scenarios names it)")
    parser.add_argument("--job-timeout", type=float, default=JOB_TIMEOUT_S)
    parser.add_argument("--recheck", action="store_true",
                        help="OUT_DIR is an extracted artifacts.tar.gz: redo the merges and "
                        "comparisons here (no GPU needed) and print them as JSON")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.recheck:
        print(json.dumps(recheck(args.out.resolve()), indent=1))
        return 0
    try:
        scenarios = [s for s in args.scenarios.split(",") if s]
        if not scenarios or set(scenarios) - set(SCENARIOS):
            raise BenchError(f"--scenarios={args.scenarios}: use a comma-separated subset of "
                             f"{', '.join(SCENARIOS)}")
        jobs = discover_jobs(only=[e for e in args.examples.split(",") if e])
        listing = run_nvidia_smi()
        gpus = parse_gpu_flag(args.gpus) if args.gpus is not None else detect_gpus(os.environ)
        try:
            import torch

            cuda = torch.cuda.is_available()
        except ImportError:
            cuda = False
        if not cuda and not args.allow_cpu:
            print("regen_multi_gpu: no CUDA GPU here; pass --allow-cpu (with fake --gpus) to "
                  "check the plumbing on Triton's interpreter", file=sys.stderr)
            return 2
    except BenchError as e:
        print(f"regen_multi_gpu: {e}", file=sys.stderr)
        return 2
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    uuids = gpu_uuids(listing)
    report: dict = {
        "command": shlex.join(["python3", "bench/regen_multi_gpu.py",
                               *(sys.argv[1:] if argv is None else argv)]),
        "host": {"gpus_line": f"{len(gpus)} GPU(s) {','.join(gpus) or '-'}; "
                              f"{os.cpu_count()} CPU cores",
                 "nvidia_smi": listing, "uuids": uuids, "cuda": cuda,
                 "python": sys.version.split()[0],
                 "multicast_env": {k: os.environ.get(k) for k in (
                     "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                     "NVSHMEM_DISABLE_NVLS")}},
        "jobs": [j.label for j in jobs], "scenarios": {},
    }
    for module in ("torch", "triton", "jax", "jaxlib", "google.protobuf"):
        try:
            report["host"][module] = __import__(module, fromlist=["__version__"]).__version__
        except Exception as e:  # noqa: BLE001 - recorded, not fatal (jax on a Triton host)
            report["host"][module] = f"unavailable: {type(e).__name__}"
    print(f"regen_multi_gpu: {report['host']['gpus_line']}; jobs: {', '.join(report['jobs'])}",
          flush=True)
    report["warm_up_s"] = warm_up()
    started = time.perf_counter()
    committed_loads = {j.label: j.cache for j in jobs}
    try:
        given = {d for d in args.strip_devices.split("|") if d}
        if "exact" in scenarios or not given:
            # Without --strip-devices, `exact` runs first: its single-GPU dumps name this
            # machine's device(s).
            report["scenarios"]["exact"] = run_scenario(
                "exact", jobs, gpus, out, committed_loads, uuids, cuda, args.job_timeout,
                single_runs=args.single_runs, expect_identical=True)
        if "retune" in scenarios:
            exact_dir = out / "work" / "exact" / "1gpu"
            devices = given or set().union(*(devices_in(
                exact_dir / j.label.strip("/").replace("/", "_").replace(":", "_")
                / "test.outputs" / DUMP_FILE_NAME) for j in jobs))
            loads: dict[str, str | None] = {}
            stripped: dict[str, dict] = {}
            for j in jobs:
                path, kept, dropped = strip_devices(ROOT / j.cache, devices,
                                                    out / "stripped" / j.cache)
                loads[j.label] = str(path) if path else None
                stripped[j.label] = {"load": loads[j.label], "kept": kept, "dropped": dropped}
            report["retune_input"] = {"devices_stripped": sorted(devices), "caches": stripped}
            report["scenarios"]["retune"] = run_scenario(
                "retune", jobs, gpus, out, loads, uuids, cuda, args.job_timeout,
                single_runs=args.single_runs)
    except BenchError as e:
        print(f"regen_multi_gpu: {e}", file=sys.stderr)
        return 2
    report["total_s"] = round(time.perf_counter() - started, 1)
    report["ok"] = all(s["ok"] for s in report["scenarios"].values())
    text = format_summary(report)
    (out / "results.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "summary.md").write_text(text + "\n")
    pack(out)
    print(text, flush=True)
    return 0 if report["ok"] else 1


# --------------------------------------------------------------------------------------------
# The observer: a `sitecustomize` the dump jobs import at start-up (its docstring says what it
# records). Kept here as text, written once per run into a directory of its own.

_observer_dir: Path | None = None


def observer_dir() -> Path:
    """The directory holding OBSERVER_SOURCE as `sitecustomize.py` (written on first use)."""
    global _observer_dir
    if _observer_dir is None:
        _observer_dir = Path(tempfile.mkdtemp(prefix="regen-observer-"))
        (_observer_dir / "sitecustomize.py").write_text(OBSERVER_SOURCE)
    return _observer_dir


OBSERVER_SOURCE = r'''"""The observer: records which GPU a dump job saw, from inside the job.

bench/regen_multi_gpu.py writes this file (its OBSERVER_SOURCE) as `sitecustomize.py` into a
temporary directory and puts that first on the dump jobs' PYTHONPATH, so Python
imports this file at start-up of every job (and of the processes it starts) without any change
to the example tests. It wraps `unittest.TestProgram.runTests` (every example's main is
`unittest.main()`) so that, after the tests ran and before the process exits, it writes
`$TEST_UNDECLARED_OUTPUTS_DIR/gpu_seen.json` (next to the dump); an exit hook writes it for a
main that does not go through unittest. The file holds:

- `cuda_visible_devices`: the pin the scheduler gave the job;
- `torch_device_count` and `torch_uuids`: what `torch.cuda.device_count()` and each visible
  device's UUID say inside the job (torch is imported then if the job did not import it, e.g.
  the JAX example; `ended` is read before that, so the timeline excludes it). This must happen
  before interpreter shutdown: importing torch from an exit hook fails ("can't register atexit
  after shutdown"), hence the runTests wrapper;
- `jax_devices`: `jax.devices()` when the job imported JAX;
- `started` / `ended` (epoch seconds) and the pid, to show which jobs overlapped.

Only the process that ran the test's main writes (its `sys.argv[0]` is `AUTOTUNE_TEST_MAIN`,
which the `.dump` wrapper sets): not the pin wrapper around it (`regen_gpu_pin.py`, also a Python
process with the same environment) nor any process the test starts. Writing is atomic.
`AUTOTUNE_OBSERVER_TORCH=0` skips the torch part (the CPU smoke test's cheap mode).

After registering, the next `sitecustomize` on sys.path (Debian ships one in
/usr/lib/python3.X) is run too, so shadowing it changes nothing else.
"""

from __future__ import annotations

import atexit
import importlib.machinery
import json
import os
import sys
import time

OUTPUT_NAME = "gpu_seen.json"
_STARTED = time.time()
_HERE = os.path.dirname(os.path.abspath(__file__))
_written = False


def _record() -> None:
    """Writes gpu_seen.json into TEST_UNDECLARED_OUTPUTS_DIR (nothing when it is unset)."""
    global _written
    if _written:
        return
    main = os.environ.get("AUTOTUNE_TEST_MAIN")
    if not main or not sys.argv or os.path.abspath(sys.argv[0]) != os.path.abspath(main):
        return
    outputs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
    if not outputs or not os.path.isdir(outputs):
        return
    _written = True
    path = os.path.join(outputs, OUTPUT_NAME)
    info: dict[str, object] = {
        "pid": os.getpid(),
        "argv0": sys.argv[0] if sys.argv else "",
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "started": _STARTED,
        "ended": time.time(),
        "jax_imported": "jax" in sys.modules,
    }
    if "jax" in sys.modules:
        try:
            info["jax_devices"] = [str(d) for d in sys.modules["jax"].devices()]
        except Exception as e:  # noqa: BLE001 - an observer must never fail the job
            info["jax_error"] = f"{type(e).__name__}: {e}"
    if os.environ.get("AUTOTUNE_OBSERVER_TORCH") == "0":
        # The CPU smoke test's cheap mode: importing torch takes seconds on a small CI machine.
        info["torch_error"] = "skipped: AUTOTUNE_OBSERVER_TORCH=0"
    else:
        _record_torch(info)
    temp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temp, "w") as handle:
            json.dump(info, handle, indent=1)
        os.replace(temp, path)
    except OSError:
        pass


def _record_torch(info: dict[str, object]) -> None:
    """What torch sees: the visible device count, UUIDs and names."""
    try:
        import torch

        count = torch.cuda.device_count()
        info["torch_device_count"] = count
        info["torch_uuids"] = [str(torch.cuda.get_device_properties(i).uuid)
                               for i in range(count)]
        info["torch_names"] = [torch.cuda.get_device_name(i) for i in range(count)]
    except Exception as e:  # noqa: BLE001 - an observer must never fail the job
        info["torch_error"] = f"{type(e).__name__}: {e}"


def _chain_next_sitecustomize() -> None:
    """Runs the sitecustomize this file shadows, if any (searching sys.path after this dir)."""
    rest = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin is None:
        return
    if os.path.dirname(os.path.abspath(spec.origin)) == _HERE:
        return
    try:
        code = spec.loader.get_code("sitecustomize")  # type: ignore[attr-defined]
        if code is not None:
            exec(code, {"__name__": "sitecustomize", "__file__": spec.origin})
    except Exception:  # noqa: BLE001, S110 - as site.py does: a broken sitecustomize is ignored
        pass


def _wrap_run_tests() -> None:
    """Records right after unittest ran the tests (before its sys.exit)."""
    import unittest

    original = unittest.TestProgram.runTests

    def run_tests(self: unittest.TestProgram, *args: object, **kwargs: object) -> None:
        try:
            original(self, *args, **kwargs)  # type: ignore[arg-type]
        finally:
            _record()

    unittest.TestProgram.runTests = run_tests  # type: ignore[method-assign]


_wrap_run_tests()
atexit.register(_record)
_chain_next_sitecustomize()
'''


if __name__ == "__main__":
    sys.exit(main())
