"""Where a fresh sandbox's time goes (target A of issue 13): a timeline of Triton's compile work.

    python3 bench/profile_sandbox_start.py OUT [--results FILE] [--reps 2]

Runs the brief's matmul workload (bench/triton_matmul_workload.py) in fresh processes, each with
an empty TRITON_CACHE_DIR, with Triton's slow steps wrapped to record when they start and end and
on which thread:
- `compile`: triton.compile of one kernel (front end to cubin; `ptxas` inside);
- `build`: triton.runtime.build.compile_module_from_src, the C compiler building Triton's CUDA
  driver stub (`cuda_utils`) or a kernel's launcher (`__triton_launcher`);
- `handles`: CompiledKernel._init_handles, loading the cubin at the first launch (the
  launcher's build shows inside it);
- `first_call`: each shape's first launch, as the workload times it.

Variants, in one run: `ours` (the committed results loaded: the winners compile in the
background, issue 13's A) and `winners` (the plain kernel launched with exactly the recorded
winners, no tuner: the floor). Without --results the workload is tuned first, as
scenario C does, to make the results file. Writes OUT/profile.json and prints a table per run.
Needs a GPU (under the interpreter nothing is compiled, so there is nothing to profile).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import runpy
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
WORKLOAD = BENCH / "triton_matmul_workload.py"
VARIANTS = ("ours", "winners")


def _instrument(events: list[dict], t0: float) -> None:
    """Wrap Triton's slow steps so each call appends {what, thread, start, end, detail}."""
    import triton.compiler.compiler as compiler
    import triton.runtime.build as build

    def wrap(owner: object, attr: str, what: str, detail=lambda *a, **k: "") -> None:
        original = getattr(owner, attr)

        def timed(*args, **kwargs):
            start = time.perf_counter() - t0
            try:
                return original(*args, **kwargs)
            finally:
                events.append({"what": what, "thread": threading.current_thread().name,
                               "start": round(start, 4),
                               "end": round(time.perf_counter() - t0, 4),
                               "detail": str(detail(*args, **kwargs))[:80]})
        setattr(owner, attr, timed)

    import triton.compiler

    wrap(compiler, "compile", "compile", lambda src, **k: getattr(src, "name", ""))
    triton.compiler.compile = compiler.compile  # jit.py imports it from the package
    wrap(build, "compile_module_from_src", "build", lambda *a, **k: k.get("name", ""))
    import triton.backends.nvidia.driver as nvidia_driver
    nvidia_driver.compile_module_from_src = build.compile_module_from_src
    wrap(compiler.CompiledKernel, "_init_handles", "handles",
         lambda self: getattr(self, "name", ""))


def child(variant: str, results: str) -> int:
    """Run the workload in this process, instrumented, and print TIMELINE {json}."""
    t0 = time.perf_counter()
    events: list[dict] = []
    _instrument(events, t0)
    tuner = "winners" if variant == "winners" else "ours"
    argv = [str(WORKLOAD), "--tuner", tuner] + (["--results", results] if tuner == "winners"
                                                 else [])
    sys.argv = argv
    import io
    from contextlib import redirect_stdout

    captured = io.StringIO()
    with redirect_stdout(captured), contextlib.suppress(SystemExit):
        runpy.run_path(str(WORKLOAD), run_name="__main__")
    result = {}
    for line in captured.getvalue().splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
    print("TIMELINE " + json.dumps({"variant": variant, "result": result,
                                    "events": sorted(events, key=lambda e: e["start"])}),
          flush=True)
    return 0


def _env(flags: str, triton_cache: str) -> dict[str, str]:
    environment = dict(os.environ)
    environment.update(AUTOTUNE_FLAGS=flags, TRITON_CACHE_DIR=triton_cache,
                       PYTHONUNBUFFERED="1",
                       PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                               os.environ.get("PYTHONPATH")])))
    return environment


def table(run: dict) -> str:
    result = run["result"]
    lines = [f"## {run['variant']}: workload {result.get('workload_s')} s, first calls "
             f"{[s.get('first_call_s') for s in result.get('shapes', [])]}",
             "| what | thread | start s | end s | took s | detail |",
             "| --- | --- | --- | --- | --- | --- |"]
    for e in run["events"]:
        lines.append(f"| {e['what']} | {e['thread']} | {e['start']:.3f} | {e['end']:.3f} | "
                     f"{e['end'] - e['start']:.3f} | {e['detail']} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?")
    parser.add_argument("--results", help="a results file of the workload (else tuned first)")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.results or "")
    if not args.out:
        parser.error("OUT (a directory for profile.json) is required")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="profile-a-"))
    results = args.results or str(work / "matmul_workload.autotune.textproto")
    if not args.results:
        print("tuning the workload to make the results file", flush=True)
        subprocess.run([sys.executable, str(WORKLOAD), "--tuner", "ours"], check=True,
                       env=_env(f"--dump_autotune_results_to={results}",
                                tempfile.mkdtemp(dir=work)), cwd=ROOT, capture_output=True)
    load = f"--load_autotune_results_from={results} --require_complete_autotune_results"
    runs = []
    for rep in range(args.reps):
        for variant in VARIANTS:
            proc = subprocess.run(
                [sys.executable, __file__, "--child", variant, "--results", results],
                env=_env(load if variant != "winners" else "", tempfile.mkdtemp(dir=work)),
                cwd=ROOT, capture_output=True, text=True)
            timeline = next((json.loads(line[len("TIMELINE "):])
                             for line in proc.stdout.splitlines()
                             if line.startswith("TIMELINE ")), None)
            if timeline is None:
                print(f"{variant}: failed (exit {proc.returncode})\n{proc.stderr[-2000:]}")
                continue
            timeline["rep"] = rep
            runs.append(timeline)
            print(table(timeline) + "\n", flush=True)
    (out / "profile.json").write_text(json.dumps(runs, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
