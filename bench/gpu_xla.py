"""XLA autotune-cache check on a GPU machine (H200, Python 3.12, JAX 0.11.2 with CUDA).

    python bench/gpu_xla.py OUT_DIR [--reps 3]

Every measurement runs in a fresh process (XLA keeps autotune results in memory per process),
with JAX's persistent compilation cache off. Steps:

  a. dump: examples/jax/matmul_chain_test.py with
     XLA_FLAGS=--xla_gpu_dump_autotune_results_to=TEST_UNDECLARED_OUTPUTS_DIR/autotune_cache.textproto
     and a TEST_UNDECLARED_OUTPUTS_DIR that does not exist yet (jax_test_helper.prepare() makes
     it); the file is copied to OUT_DIR/matmul_chain_test.autotune.textproto, the cache to
     commit as examples/jax/matmul_chain_test.autotune.textproto. Also dumps a binary file and a
     per-fusion directory, and runs `autotune-cache verify/inspect` on all of them.
  b. compile time of the chain without and with --xla_gpu_load_autotune_results_from (median of
     --reps fresh processes each).
  c. --xla_gpu_require_complete_aot_autotune_results: the test passes on the dumped shapes; a
     new shape fails with autotune_cache's stale-cache message and the AUTOTUNE_REGEN_HINT.

Writes OUT_DIR/results.json and OUT_DIR/summary.txt and prints the summary. Exit status 0 when
every check passed, 1 otherwise, 2 when there is no GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the example imports autotune_cache from this checkout
EXAMPLE = ROOT / "examples" / "jax" / "matmul_chain_test.py"
CACHE_NAME = "matmul_chain_test.autotune.textproto"
REGEN_HINT = "bazel run //examples/jax:matmul_chain_test.regen"
NEW_SHAPE = (384, 1024, 1536, 1024)  # differs from the example's SHAPE in two dimensions
CHILD_TIMEOUT_S = 300


def child_env(xla_flags: str = "", **extra: str) -> dict[str, str]:
    """A clean environment for a fresh JAX process."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLA_FLAGS", "TEST_UNDECLARED_OUTPUTS_DIR", "AUTOTUNE_REGEN_HINT")}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
               JAX_ENABLE_COMPILATION_CACHE="false", XLA_PYTHON_CLIENT_PREALLOCATE="false",
               PYTHONUNBUFFERED="1")
    if xla_flags:
        env["XLA_FLAGS"] = xla_flags
    env.update(extra)
    return env


def run(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.CompletedProcess[str]:
    """Run a child, keep its output in `log`, never raise on failure or timeout."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        proc = subprocess.CompletedProcess(cmd, 124, e.stdout or "", (e.stderr or "") +
                                           f"\n[timed out after {CHILD_TIMEOUT_S}s]")
    log.write_text(f"$ {' '.join(cmd)}\nXLA_FLAGS={env.get('XLA_FLAGS', '')}\n"
                   f"rc={proc.returncode} wall={time.perf_counter() - start:.1f}s\n"
                   f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}\n")
    return proc


def compile_child(shape: tuple[int, ...], log: Path, xla_flags: str = "",
                  **extra: str) -> dict[str, object]:
    """Time lower+compile+first run of the chain in a fresh process."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child",
           ",".join(str(d) for d in shape)]
    proc = run(cmd, child_env(xla_flags, **extra), log)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            out = json.loads(line[len("RESULT "):])
            out["rc"] = proc.returncode
            return out
    return {"rc": proc.returncode, "stderr_tail": proc.stderr[-3000:]}


def child_main(shape_text: str) -> int:
    """In the child: compile and run once, print RESULT {json}; exit 3 on a stale cache."""
    from autotune_cache.xla import jax_test_helper

    jax_test_helper.prepare()
    spec = importlib.util.spec_from_file_location("matmul_chain_test", EXAMPLE)
    example = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(example)  # type: ignore[union-attr]
    import jax
    import jax.numpy as jnp

    shape = tuple(int(d) for d in shape_text.split(","))
    args = [jax.device_put(jnp.asarray(a, dtype=jnp.bfloat16))
            for a in example.inputs(*shape)]
    jax.block_until_ready(args)
    try:
        with jax_test_helper.stale_cache_errors():
            t0 = time.perf_counter()
            lowered = jax.jit(example.chain).lower(*args)
            t1 = time.perf_counter()
            compiled = lowered.compile()
            t2 = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            t3 = time.perf_counter()
    except jax_test_helper.StaleXlaCacheError as e:
        print(f"STALE\n{e}", file=sys.stderr)
        return 3
    print("RESULT " + json.dumps({
        "lower_s": t1 - t0, "compile_s": t2 - t1, "first_run_s": t3 - t2,
        "device": str(jax.devices()[0].device_kind), "jax": jax.__version__}))
    return 0


def cli(*args: str, log: Path) -> subprocess.CompletedProcess[str]:
    """Run `python -m autotune_cache ARGS` (the reader layer on XLA's fresh files)."""
    return run([sys.executable, "-m", "autotune_cache", *args], child_env(), log)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out", type=Path, nargs="?")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--allow-cpu", action="store_true",
                   help="smoke-test the plumbing without a GPU (the GPU checks then fail)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child_main(args.child)
    if args.out is None:
        p.error("give the results directory")
    out: Path = args.out.resolve()
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    results: dict[str, object] = {"python": sys.version.split()[0]}
    checks: dict[str, bool] = {}

    probe = run([sys.executable, "-c", "import jax, google.protobuf as p; import autotune_cache; "
                 "print(jax.__version__, jax.default_backend(), jax.devices()[0].device_kind, "
                 "'protobuf', p.__version__)"], child_env(), logs / "probe.log")
    results["probe"] = probe.stdout.strip()
    print(f"jax probe: {probe.stdout.strip() or probe.stderr[-800:]}", flush=True)
    if probe.returncode != 0 or (" gpu " not in f" {probe.stdout} " and not args.allow_cpu):
        (out / "results.json").write_text(json.dumps(results, indent=2))
        print("no GPU backend: this script needs the H200 machine", file=sys.stderr)
        return 2

    # a. dump mode, into a TEST_UNDECLARED_OUTPUTS_DIR that does not exist yet.
    outputs = out / "dump_outputs" / "not_yet_created"
    shutil.rmtree(out / "dump_outputs", ignore_errors=True)
    dump_flags = ("--xla_gpu_dump_autotune_results_to="
                  "TEST_UNDECLARED_OUTPUTS_DIR/autotune_cache.textproto")
    proc = run([sys.executable, str(EXAMPLE)],
               child_env(dump_flags, TEST_UNDECLARED_OUTPUTS_DIR=str(outputs)),
               logs / "a_dump.log")
    dumped = outputs / "autotune_cache.textproto"
    checks["a_dump_test_passed"] = proc.returncode == 0
    checks["a_dump_file_written"] = dumped.is_file() and dumped.stat().st_size > 0
    cache = out / CACHE_NAME
    if checks["a_dump_file_written"]:
        shutil.copyfile(dumped, cache)
    # Control (informational): the same dump without jax_test_helper.prepare().
    bare = out / "dump_outputs" / "bare_not_created"
    control = run([sys.executable, "-c", "import jax, jax.numpy as jnp; "
                   "x = jnp.ones((256, 256), jnp.bfloat16); jax.block_until_ready(jax.jit("
                   "lambda a: (a @ a) @ a)(x)); print('finished')"],
                  child_env(dump_flags, TEST_UNDECLARED_OUTPUTS_DIR=str(bare)),
                  logs / "a_control_without_helper.log")
    results["a_control_without_helper"] = {
        "rc": control.returncode, "dump_written": (bare / "autotune_cache.textproto").exists(),
        "stderr_tail": control.stderr.strip()[-600:]}
    # The same run's results as a binary file and a per-fusion directory, for the readers.
    run([sys.executable, str(EXAMPLE)], child_env(
        f"--xla_gpu_dump_autotune_results_to={out}/dump_binary/autotune_cache.pb "
        f"--xla_gpu_per_fusion_autotune_cache_dir={out}/per_fusion"), logs / "a_dump_binary.log")
    readable = [p for p in (cache, out / "dump_binary" / "autotune_cache.pb",
                            out / "per_fusion") if p.exists()]
    verify = cli("verify", *map(str, readable), log=logs / "a_verify.log")
    inspect = cli("inspect", str(cache), log=logs / "a_inspect.log") if cache.exists() else None
    checks["a_readers_verify_all_outputs"] = verify.returncode == 0 and len(readable) == 3
    results["a"] = {"dump_rc": proc.returncode, "dump_file": str(cache),
                    "entries": inspect.stdout.splitlines()[0] if inspect else "",
                    "verify": verify.stdout.strip().splitlines()}

    # b. compile time, fresh processes: autotuning vs loaded results.
    shape = _example_shape()
    load = f"--xla_gpu_load_autotune_results_from={cache}"
    timings: dict[str, list[dict[str, object]]] = {"no_cache": [], "loaded": []}
    for i in range(args.reps):
        timings["no_cache"].append(compile_child(shape, logs / f"b_no_cache_{i}.log"))
        timings["loaded"].append(compile_child(shape, logs / f"b_loaded_{i}.log", load))
    medians = {}
    for mode, runs in timings.items():
        ok = [float(r["compile_s"]) for r in runs if r.get("rc") == 0 and "compile_s" in r]
        medians[mode] = statistics.median(ok) if ok else None
    results["b"] = {"shape": shape, "reps": args.reps, "median_compile_s": medians,
                    "runs": timings}
    checks["b_loading_cuts_compile_time"] = bool(
        medians["no_cache"] and medians["loaded"] and medians["loaded"] < medians["no_cache"])

    # c. require_complete: same shapes pass, new shapes fail with our message.
    strict = f"{load} --xla_gpu_require_complete_aot_autotune_results"
    same = run([sys.executable, str(EXAMPLE)], child_env(strict, AUTOTUNE_REGEN_HINT=REGEN_HINT),
               logs / "c_same_shapes.log")
    new = compile_child(NEW_SHAPE, logs / "c_new_shapes.log", strict,
                        AUTOTUNE_REGEN_HINT=REGEN_HINT)
    new_log = (logs / "c_new_shapes.log").read_text()
    checks["c_same_shapes_pass"] = same.returncode == 0
    checks["c_new_shapes_fail_with_our_message"] = (
        new.get("rc") == 3 and "autotune_cache: XLA has no autotune result" in new_log
        and REGEN_HINT in new_log)
    start = new_log.find("autotune_cache: XLA has no autotune result")
    results["c"] = {"same_shapes_rc": same.returncode, "new_shape": NEW_SHAPE,
                    "new_shapes_rc": new.get("rc"),
                    "new_shapes_message": new_log[start:start + 1500] if start >= 0 else ""}

    results["checks"] = checks
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    summary = _summary(results, checks, medians)
    (out / "summary.txt").write_text(summary)
    print(summary)
    return 0 if all(checks.values()) else 1


def _example_shape() -> tuple[int, ...]:
    spec = importlib.util.spec_from_file_location("matmul_chain_test", EXAMPLE)
    example = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(example)  # type: ignore[union-attr]
    return tuple(example.SHAPE)


def _summary(results: dict[str, object], checks: dict[str, bool],
             medians: dict[str, float | None]) -> str:
    lines = ["== XLA autotune cache on GPU ==", f"jax probe: {results.get('probe')}"]
    a = results.get("a", {})
    lines.append(f"a. dump: {a.get('entries', '')}  -> {a.get('dump_file', '')}")
    for v in a.get("verify", []):  # type: ignore[union-attr]
        lines.append(f"   verify: {v}")
    ctl = results.get("a_control_without_helper", {})
    lines.append(f"   control without jax_test_helper.prepare(): rc={ctl.get('rc')}, "  # type: ignore[union-attr]
                 f"dump written={ctl.get('dump_written')}")  # type: ignore[union-attr]
    no, yes = medians.get("no_cache"), medians.get("loaded")
    if no and yes:
        lines.append(f"b. compile (median of {results['b']['reps']} fresh processes): "  # type: ignore[index]
                     f"without cache {no:.3f} s, with loaded file {yes:.3f} s "
                     f"({no / yes:.1f}x faster, {no - yes:.3f} s saved)")
    else:
        lines.append(f"b. compile: incomplete ({medians})")
    c = results.get("c", {})
    lines.append(f"c. require_complete: same shapes rc={c.get('same_shapes_rc')}, "  # type: ignore[union-attr]
                 f"new shapes {c.get('new_shape')} rc={c.get('new_shapes_rc')}")  # type: ignore[union-attr]
    message = str(c.get("new_shapes_message", ""))  # type: ignore[union-attr]
    if message:
        lines.extend("   | " + m for m in message.splitlines()[:8])
    lines.append("checks:")
    lines.extend(f"  {'PASS' if ok else 'FAIL'}  {name}" for name, ok in checks.items())
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
