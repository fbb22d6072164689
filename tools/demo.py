"""The README's main command: tune the example Triton kernels, dump a cache, reload it, compare.

Run 1 starts with no results and tunes every example kernel (on Triton's CPU interpreter when
there is no GPU), dumping every result to one text file. Run 2 is a fresh process that loads that
file with --require_complete_autotune_results, so it must benchmark nothing. The two runs' own
statistics (autotune_report.json, written by autotune_cache at exit) are printed side by side.

Then the ruleset's own cycle on Bazel 4.2.3 (tools/demo_bazel.py): a first `bazel test`
fails with the regen hint, `.regen` writes the cache, the tests pass with 0 benchmarks, a stale
edit fails with the hint, `regen_cache --check` reports it.

    python tools/demo.py [--examples vector_add,matmul] [--keep DIR] [--no-bazel]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES_DIR = ROOT / "examples" / "triton"
EXAMPLES = ("vector_add", "fused_softmax", "layer_norm", "matmul")


@dataclass
class RunResult:
    """What one demo run did, from its exit report and the clock."""

    label: str
    wall_seconds: float
    report: dict

    def row(self) -> str:
        r = self.report
        return (f"{self.label:<32} {self.wall_seconds:>7.1f} s {r.get('hits', 0):>5} "
                f"{r.get('misses', 0):>7} {r.get('benchmarks', 0):>11} "
                f"{r.get('tuning_seconds', 0.0):>9.1f} s {r.get('saved_seconds', 0.0):>8.1f} s")


def run_examples(label: str, examples: list[str], flags: str, outputs: Path) -> RunResult:
    """Run the example tests in a fresh Python process with AUTOTUNE_FLAGS=`flags`."""
    env = dict(os.environ)
    env["AUTOTUNE_FLAGS"] = flags
    env["TEST_UNDECLARED_OUTPUTS_DIR"] = str(outputs)  # where the exit report goes
    env["PYTHONPATH"] = os.pathsep.join(
        [str(EXAMPLES_DIR), str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    modules = [f"{name}_test" for name in examples]
    code = ("import sys, unittest; "
            f"suite = unittest.defaultTestLoader.loadTestsFromNames({modules!r}); "
            "ok = unittest.TextTestRunner(verbosity=1).run(suite).wasSuccessful(); "
            "sys.exit(0 if ok else 1)")
    print(f"\n== {label}: AUTOTUNE_FLAGS={flags!r}", flush=True)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"demo: {label} failed (exit {proc.returncode})")
    report_path = outputs / "autotune_report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    return RunResult(label, wall, report)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", default=",".join(EXAMPLES),
                        help="comma-separated example kernels (default: all four)")
    parser.add_argument("--keep", type=Path, help="keep the dumped cache and reports in DIR")
    parser.add_argument("--no-bazel", action="store_true",
                        help="skip the ruleset cycle on Bazel 4.2.3")
    args = parser.parse_args(argv)
    examples = [e for e in args.examples.split(",") if e]
    unknown = sorted(set(examples) - set(EXAMPLES))
    if unknown:
        parser.error(f"unknown examples {unknown}; choose from {', '.join(EXAMPLES)}")

    with tempfile.TemporaryDirectory(prefix="autotune-demo-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        results = work / "demo.autotune.textproto"
        results.unlink(missing_ok=True)
        # One Triton compile cache for both runs, as a developer machine would have.
        os.environ.setdefault("TRITON_CACHE_DIR", str(work / "triton_cache"))
        print(f"demo: examples {', '.join(examples)}; results file {results}")
        print("demo: tunings longer than 1 s print per-config progress (AUTOTUNE_PROGRESS=1 for "
              "all, 0 for none)")
        first = run_examples("run 1: tune + dump", examples,
                             f"--dump_autotune_results_to={results}", work / "run1")
        second = run_examples(
            "run 2: load, require complete", examples,
            f"--load_autotune_results_from={results} --require_complete_autotune_results",
            work / "run2")

        print("\n" + f"{'':<32} {'wall':>9} {'hits':>5} {'misses':>7} {'benchmarks':>11} "
              f"{'tuning':>11} {'saved':>10}")
        print(first.row())
        print(second.row())
        entries = sum(1 for line in results.read_text().splitlines()
                      if line.startswith("entries {"))
        print(f"\n{entries} tuned results in {results.name}; run 2 benchmarked "
              f"{second.report.get('benchmarks', 0)} configs and saved "
              f"~{second.report.get('saved_seconds', 0.0):.1f} s of tuning "
              f"(run 1 spent {first.report.get('tuning_seconds', 0.0):.1f} s).")
        if second.report.get("benchmarks", 0) or second.report.get("misses", 0):
            print("demo: run 2 should not have tuned anything", file=sys.stderr)
            return 1
    if args.no_bazel:
        return 0
    import demo_bazel

    return demo_bazel.main()


if __name__ == "__main__":
    sys.exit(main())
