"""Triton autotuner check on a GPU machine (H200, Python 3.12, torch, Triton 3.6), one command.

    python3 bench/gpu_triton.py OUT_DIR [--skip-examples] [--skip-workload] [--allow-cpu]

Steps, each child a fresh process:

  a. examples: each examples/triton/<kernel>_test.py runs on the GPU with
     AUTOTUNE_FLAGS="--load_autotune_results_from=<committed cache> --dump_autotune_results_to=..."
     (one shared, initially empty TRITON_CACHE_DIR). The dumped GPU entries replace the committed
     file's entries for that GPU; the merged file is written to
     OUT_DIR/examples/triton/<kernel>_test.autotune.textproto, ready to copy over the committed one.
     Each test then runs again loading the merged file with --require_complete_autotune_results
     and must pass with zero benchmarks.
  b. workload: the brief's 48-config fp16 matmul over three shapes (bench/triton_matmul_workload.py)
     three ways, each with an empty Triton compile cache: triton.autotune cold, ours cold (dumping
     OUT_DIR/bench/matmul_workload.autotune.textproto), ours loading that file. If time allows,
     also ours cold with --autotune_compile_workers=1, to isolate the parallel-compile gain.

Writes OUT_DIR/results.json and OUT_DIR/summary.txt (and logs/) and prints the summary. Exit status
0 when every check passed, 1 otherwise, 2 when there is no GPU. Budget: about 4-6 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

EXAMPLES = ("vector_add", "fused_softmax", "layer_norm", "matmul")
EXAMPLES_DIR = ROOT / "examples" / "triton"
CHILD_TIMEOUT_S = 240
EXTRA_RUN_DEADLINE_S = 300.0  # skip the optional 1-worker run after this much time


def sh(cmd: str) -> str:
    """Output of a shell command, for the environment report."""
    proc = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    return (proc.stdout + proc.stderr).strip()


def _protobuf_works() -> str | None:
    """The protobuf version if our generated schema imports with it, else None."""
    try:
        import google.protobuf

        import autotune_cache.proto.autotune_results_pb2  # noqa: F401  (checks the gencode)

        return google.protobuf.__version__
    except Exception:  # missing, or too old for the 4.25 gencode
        return None


def ensure_protobuf(out: Path) -> str:
    """Make our schema importable: the installed protobuf, else a wheel carried in .whl/ (pip
    download --no-deps --only-binary=:all: --platform any --implementation py protobuf)."""
    version = _protobuf_works()
    if version:
        return f"protobuf {version} (installed)"
    wheels = sorted((ROOT / ".whl").glob("protobuf-*-py3-none-any.whl"))
    if not wheels:
        raise SystemExit("gpu_triton: protobuf is missing or too old, and no "
                         ".whl/protobuf-*-py3-none-any.whl was carried (carry: ['.whl'])")
    target = out / "_pydeps"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                    "--target", str(target), str(wheels[-1])], check=True)
    sys.path.insert(0, str(target))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target),
                                                             os.environ.get("PYTHONPATH")]))
    for name in [m for m in sys.modules if m.startswith(("google.protobuf", "autotune_cache"))]:
        del sys.modules[name]
    version = _protobuf_works()
    if not version:
        raise SystemExit(f"gpu_triton: {wheels[-1].name} did not make the schema importable")
    return f"protobuf {version} (from {wheels[-1].name})"


def child_env(flags: str, outputs: Path, triton_cache: Path) -> dict[str, str]:
    """Environment of one example process on the GPU."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("AUTOTUNE_FLAGS", "TRITON_INTERPRET", "TEST_UNDECLARED_OUTPUTS_DIR")}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(EXAMPLES_DIR), str(ROOT),
                                                        env.get("PYTHONPATH")])),
               AUTOTUNE_FLAGS=flags, TEST_UNDECLARED_OUTPUTS_DIR=str(outputs),
               TRITON_CACHE_DIR=str(triton_cache), PYTHONUNBUFFERED="1")
    return env


def run_example(name: str, flags: str, outputs: Path, triton_cache: Path, log: Path) -> dict:
    """Run one example test; returns rc, wall time and its autotune_report.json."""
    cmd = [sys.executable, str(EXAMPLES_DIR / f"{name}_test.py")]
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=child_env(flags, outputs, triton_cache), cwd=ROOT,
                              capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as e:
        rc, stdout, stderr = 124, str(e.stdout or ""), f"{e.stderr or ''}\n[timed out]"
    wall = time.perf_counter() - started
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"$ {' '.join(cmd)}\nAUTOTUNE_FLAGS={flags}\nrc={rc} wall={wall:.1f}s\n"
                   f"--- stdout\n{stdout}\n--- stderr\n{stderr}\n")
    report_path = outputs / "autotune_report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    return {"rc": rc, "wall_s": round(wall, 2), "report": report, "log": str(log),
            "error": "" if rc == 0 else (stderr.strip().splitlines() or ["?"])[-1]}


def merge_device_entries(committed: Path, dumped: Path, out: Path) -> dict:
    """Write `out`: the committed entries, with those for the dumped device(s) replaced."""
    from autotune_cache.formats import load_results, save_results
    from autotune_cache.foundation.key import Device

    new = load_results(dumped) if dumped.exists() else []
    devices = {Device.from_proto(e.key.device) for e in new}
    old = load_results(committed) if committed.exists() else []
    kept = [e for e in old if Device.from_proto(e.key.device) not in devices]
    save_results(out, kept + new)
    return {"kept": len(kept), "replaced": len(old) - len(kept), "new": len(new),
            "devices": sorted(str(d) for d in devices)}


def examples_step(out: Path) -> tuple[dict, bool]:
    """Tune + dump each example on the GPU, merge, then verify the merged file loads cleanly."""
    results: dict = {}
    ok = True
    triton_cache = Path(tempfile.mkdtemp(prefix="tc-examples-", dir=out))
    for name in EXAMPLES:
        committed = EXAMPLES_DIR / f"{name}_test.autotune.textproto"
        dumped = out / "dumps" / f"{name}.autotune.textproto"
        merged = out / "examples" / "triton" / f"{name}_test.autotune.textproto"
        flags = f"--dump_autotune_results_to={dumped}"
        if committed.exists():
            flags = f"--load_autotune_results_from={committed} {flags}"
        tune = run_example(name, flags, out / "reports" / f"{name}-tune", triton_cache,
                           out / "logs" / f"{name}-tune.log")
        entry = {"tune": tune}
        if tune["rc"] == 0:
            entry["merge"] = merge_device_entries(committed, dumped, merged)
            verify_flags = (f"--load_autotune_results_from={merged} "
                            "--require_complete_autotune_results")
            verify = run_example(name, verify_flags, out / "reports" / f"{name}-verify",
                                 triton_cache, out / "logs" / f"{name}-verify.log")
            entry["verify"] = verify
            entry["ok"] = verify["rc"] == 0 and verify["report"].get("benchmarks", -1) == 0
        else:
            entry["ok"] = False
        ok &= entry["ok"]
        r = tune["report"]
        print(f"  {name:<14} tune {tune['wall_s']:>6.1f} s ({r.get('tuned', 0)} tuned, "
              f"{r.get('benchmarks', 0)} benchmarks, {r.get('hits', 0)} hits)"
              + (f"; verify {entry['verify']['wall_s']:.1f} s, "
                 f"{entry['verify']['report'].get('benchmarks', '?')} benchmarks"
                 if "verify" in entry else f"; FAILED: {tune['error']}"), flush=True)
        results[name] = entry
    shutil.rmtree(triton_cache, ignore_errors=True)
    return results, ok


def workload_step(out: Path, started: float) -> tuple[dict, bool]:
    """The brief's workload three ways, plus the optional 1-compile-worker cold run."""
    from triton_cold_vs_cached import format_summary, measure_three_ways, run_workload

    work = out / "workload"
    work.mkdir(parents=True, exist_ok=True)
    results_file = out / "bench" / "matmul_workload.autotune.textproto"
    results_file.parent.mkdir(parents=True, exist_ok=True)
    summary = measure_three_ways(work, reps=1, results_file=results_file)
    if time.perf_counter() - started < EXTRA_RUN_DEADLINE_S:
        scratch = work / "one-worker.autotune.textproto"
        cache = Path(tempfile.mkdtemp(prefix="tc-one-worker-", dir=work))
        one = run_workload("ours", f"--autotune_compile_workers=1 "
                           f"--dump_autotune_results_to={scratch}", cache,
                           work / "logs" / "ours-cold-1-worker.log")
        summary["runs"]["ours-cold-1w"] = [one]
        if "error" not in one:
            summary["median_wall_s"]["ours-cold-1w"] = one["wall_s"]
            summary["median_workload_s"]["ours-cold-1w"] = one["workload_s"]
        print(f"  ours-cold-1w rep 0: wall {one['wall_s']:.1f} s", flush=True)
    for path in work.glob("tc-*"):
        shutil.rmtree(path, ignore_errors=True)
    text = format_summary(summary)
    ok = all(k in summary["median_wall_s"] for k in ("triton", "ours-cold", "ours-cached"))
    return {"summary": summary, "table": text}, ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--skip-examples", action="store_true")
    parser.add_argument("--skip-workload", action="store_true")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="run without a GPU (interpreter), to test this script itself")
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    env_report = {
        "gpu": sh("nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader"),
        "python": sys.version.split()[0],
        "cores": os.cpu_count(),
        "protobuf": ensure_protobuf(out),
        "versions": sh(f"{sys.executable} -c 'import torch, triton; "
                       "print(torch.__version__, triton.__version__, torch.version.cuda, "
                       "torch.cuda.is_available())'"),
    }
    print(json.dumps(env_report, indent=2), flush=True)
    if not env_report["versions"].endswith("True") and not args.allow_cpu:
        print("gpu_triton: no CUDA GPU visible to torch", file=sys.stderr)
        return 2

    results: dict = {"env": env_report}
    ok = True
    if not args.skip_examples:
        print("== examples: tune on the GPU, merge, verify", flush=True)
        results["examples"], examples_ok = examples_step(out)
        ok &= examples_ok
        (out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    if not args.skip_workload:
        print("== workload: brief's 48-config matmul, three shapes", flush=True)
        results["workload"], workload_ok = workload_step(out, started)
        ok &= workload_ok
    results["total_s"] = round(time.perf_counter() - started, 1)
    (out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")

    lines = [f"gpu: {env_report['gpu']}; torch/triton/cuda: {env_report['versions']}; "
             f"cores: {env_report['cores']}"]
    if "examples" in results:
        lines.append("examples (tune+dump on GPU, then load with require_complete):")
        for name, entry in results["examples"].items():
            r = entry["tune"]["report"]
            lines.append(f"  {name:<14} {'ok' if entry['ok'] else 'FAILED'}: "
                         f"tune {entry['tune']['wall_s']:.1f} s, {r.get('benchmarks', 0)} "
                         f"benchmarks, merge {entry.get('merge')}")
        lines.append(f"  merged caches: {out / 'examples' / 'triton'}")
    if "workload" in results:
        lines.append("workload (fresh process each, empty Triton compile cache each):")
        lines.append(results["workload"]["table"])
    lines.append(f"total {results['total_s']} s; {'ALL OK' if ok else 'SOME CHECKS FAILED'}")
    summary = "\n".join(lines)
    (out / "summary.txt").write_text(summary + "\n")
    print("\n" + summary, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
