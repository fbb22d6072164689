"""Does a short screening benchmark read slower after the GPU has idled? (decision 0025)

    python3 bench/idle_clock_probe.py OUT_DIR [--idle 0.5] [--rounds 8]

Benchmarking a regen's candidates beside their compiles was taken back twice because scenario
D's 4096^3 matmul picked BK 32 / 4 stages over BK 64 / 3 stages (3.57 %, 3.89 % off the best).
The mechanism named, untested: while the tuning waits for the next compile the device idles, and
the next candidate's first screening stage (bench.SCREENING_STAGES[0]: 5 ms warmup, 10 ms rep)
starts on a GPU that has clocked down. This probe tests that directly. Each candidate below is
compiled first; then, for `--rounds` rounds, each is timed by the same first-stage GpuBenchmark
in each of CONDITIONS: straight after the other candidate's timing (as screening after every
compile does), after `--idle` seconds with nothing on the device (as screening beside the
compiles does while it waits), and busy before but with a Python thread spinning for the GIL
(a compile thread's front end). The SM clock is sampled through NVML just before each timing.
Writes OUT_DIR/idle_clock_probe.{json,md}; figures are only meaningful on a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from triton_matmul_workload import mm, operands  # noqa: E402

from autotune_cache.triton import bench as bench_mod  # noqa: E402

# The pair scenario D swapped (docs/benchmarks.md, "Issue 24, sixth session"), on the workload's
# 4096^3 shape, with the tile the winners share.
CANDIDATES = {
    "BK32_s4": triton.Config({"BM": 128, "BN": 256, "BK": 32}, num_warps=8, num_stages=4),
    "BK64_s3": triton.Config({"BM": 128, "BN": 256, "BK": 64}, num_warps=8, num_stages=3),
}
M = N = K = 4096
# What comes just before a timing: another candidate's timing (screening after every compile),
# `--idle` seconds with nothing on the device (waiting for the next compile), or the device busy
# before and a Python thread competing for the GIL during it (a compile thread's front end).
CONDITIONS = {"busy": "busy before", "idle": "after idle", "gil": "busy before, GIL contended"}


def _sm_clock_mhz() -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        return int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:  # no NVML bindings: the timings still stand
        return None


@contextlib.contextmanager
def _gil_contention(on: bool) -> Iterator[None]:
    stop = threading.Event()

    def spin() -> None:
        n = 0
        while not stop.is_set():
            n += 1

    thread = threading.Thread(target=spin, daemon=True)
    if on:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        if on:
            thread.join()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--idle", type=float, default=0.5, help="seconds idle before 'idle'")
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("idle_clock_probe: no CUDA GPU; nothing to measure", file=sys.stderr)
        return 0
    grid, call_args = operands(M, N, K, seed=M + N + K)
    calls = {}
    for name, cfg in CANDIDATES.items():

        def call(cfg=cfg) -> None:
            mm[grid](*call_args, **cfg.all_kwargs())

        call()  # compile and load
        calls[name] = call
    torch.cuda.synchronize()
    warmup, rep, _ = bench_mod.SCREENING_STAGES[0]
    screen = bench_mod.GpuBenchmark(warmup=warmup, rep=rep)
    final = bench_mod.GpuBenchmark()
    rows: list[dict] = []
    for r in range(args.rounds):
        for name, call in calls.items():
            other = next(f for n, f in calls.items() if n != name)
            row: dict = {"round": r, "config": name}
            for condition in CONDITIONS:
                if condition == "idle":
                    torch.cuda.synchronize()
                    time.sleep(args.idle)
                else:
                    screen(other, None, {})  # the device busy right before
                row[f"{condition}_clock_mhz"] = _sm_clock_mhz()
                with _gil_contention(condition == "gil"):
                    row[f"{condition}_ms"] = screen(call, None, {})[0]
            rows.append(row)
    careful = {name: final(call, None, {})[0] for name, call in calls.items()}
    summary = {}
    for name in calls:
        mine = [row for row in rows if row["config"] == name]
        summary[name] = {"careful_ms": careful[name]}
        for condition in CONDITIONS:
            summary[name][f"{condition}_ms"] = statistics.median(r[f"{condition}_ms"] for r in mine)
            summary[name][f"{condition}_worst_ms"] = max(r[f"{condition}_ms"] for r in mine)
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"device": torch.cuda.get_device_name(), "triton": triton.__version__,
              "idle_s": args.idle, "rounds": args.rounds, "summary": summary, "rows": rows}
    (args.out / "idle_clock_probe.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"# idle_clock_probe: {result['device']}, Triton {triton.__version__}, "
             f"{M}x{N}x{K} fp16, idle {args.idle} s, {args.rounds} rounds", "",
             "Median (worst) of the first screening stage, ms, by what came before it; "
             "careful = the configured 25/100 ms benchmark.", "",
             "| config | careful | " + " | ".join(CONDITIONS.values()) + " |",
             "| --- | --- |" + " --- |" * len(CONDITIONS)]
    for name, s in summary.items():
        cells = [f"{s[c + '_ms']:.4f} ({s[c + '_worst_ms']:.4f})" for c in CONDITIONS]
        lines.append(f"| {name} | {s['careful_ms']:.4f} | " + " | ".join(cells) + " |")
    for condition in CONDITIONS:
        clocks = sorted({r[f"{condition}_clock_mhz"] for r in rows}, key=str)
        lines.append(f"\nSM clocks seen before '{condition}' timings (MHz): {clocks}")
    (args.out / "idle_clock_probe.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
