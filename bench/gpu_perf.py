"""Issue 13's GPU scenarios A, A2, B, C, D and E, and issue 38's R, in one command, as ratios of
one run.

    python3 bench/gpu_perf.py OUT_DIR [--smoke] [--skip-quality] [--skip-a2] [--skip-r]

Every scenario but E is the brief's 48-config fp16 matmul over three shapes
(bench/triton_matmul_workload.py), each run a fresh process; "workload" is the time inside the
process (the three shapes' first and second calls), "wall" the whole process.

  C   cold tuning, empty compile cache: triton.autotune(cache_results=True) vs ours (dumping
      the results file the later runs load). Target: ours <= 0.20x of Triton.
  D   quality of C's winners, with the compile cache C left (the workload's --quality):
      each tuner's pick against the fastest in two regimes, each the median of 5 interleaved
      rounds: bursts (do_bench warmup 10 ms, rep 25 ms, each after 0.1 s idle: below the power
      cap) over the best of a back-to-back screen of every candidate, and sustained load
      (25 / 100 ms, back to back: at the cap) over the best 6 of the bursts. A pick's D is its
      worse slowdown of the two. Target: within 3 % in both.
  A   fresh sandbox: ours loading C's results, empty compile cache (the results file indexed
      on load: nothing derived from it exists). Target: Triton cold / A >= 30x, and A <= 1.3x of
      `winners` (the plain kernel launched with exactly the recorded winners: the
      compile-the-winners-once floor).
  A2  the same with a warm *shared* compile cache: --autotune_remote_compile_cache on a local
      redis-server; one process fills it, a second with another empty local compile cache is
      measured. Target (issue 38): A2 <= 1.15x of B.
  B   both caches warm: triton.autotune(cache_results=True) again on C's compile cache vs ours
      loading the results again on A's compile cache.
      Target: ours <= 1.1x.
  E   hit path of a launch-bound 1024-element add (the workload's --launch-overhead): us
      per launch, ours and triton.autotune vs plain @triton.jit. Target: ours <= 1.10x.
  R   repeatability (bench/tuning_repeatability.py --shape all): every shape tuned
      --r-tunings times (default 6) by ours and by triton.autotune, fresh each time, in one
      process; each tuner's agreement is how many tunings picked its most frequent pick, and
      each pick is re-timed against the fastest. Target: ours the same pick at least 5 of 6
      times on every shape (Triton's beside it). About 3 minutes on the H200; --skip-r.

A2 needs a Redis server and client: a `redis-server` (find_redis_binary says where it is
looked for: --redis-server, PATH, or carried in .whl/), and `redis` importable or as a wheel in
.whl/. Writes OUT_DIR/gpu_perf.json, OUT_DIR/gpu_perf.md and
OUT_DIR/gpu_perf_logs.txt (every child's output; OUT_DIR/gpu_perf_partial.json holds each
child's result as it finishes). --smoke runs a tiny version on any machine
(2 configs, 1 shape, few launches; Triton's autotuner fails under the interpreter and is
reported as such): CI checks that the script works, never its numbers.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
CHILD_TIMEOUT_S = 300

# Issue 38's targets (A's are issue 13's, which issue 38 keeps).
TARGETS = {"C": "<= 0.20x", "D": "<= 3 % in both regimes", "A": ">= 30x, <= 1.3x of winners",
           "A2": "<= 1.15x of B", "B": "<= 1.1x", "E": "<= 1.10x",
           "R": ">= 5 of 6 same pick, every shape"}
R_TIMEOUT_S = 540  # every shape's tunings and re-timing in one child (about 180 s on the H200)


# ----- helpers shared with bench/suite_perf.py ----------------------------------------------------
#
# `--profile`: each child of a benchmark run under py-spy, for where a missed target's time went.
#
# `py-spy record` samples every thread of the child (`--threads`), waiting ones too (`--idle`,
# so a launch blocked on a compile shows as the wait it is), 100 times a second, and writes
# collapsed stacks (`--format raw`: one line per distinct stack, with its sample count) that
# `summarize` reads back. Sampling costs the child little, but a profiled run is for finding
# where time goes, not for the reported figures. py-spy comes from PyPI (`py-spy`), on PATH or
# as a wheel carried in `.whl/` (the carried files of docs/benchmarks.md's "Machines").

RATE_HZ = 100


def py_spy(work: Path) -> str:
    """The py-spy binary: on PATH, else installed from a carried wheel into `work`."""
    found = shutil.which("py-spy")
    if found:
        return found
    wheels = sorted((ROOT / ".whl").rglob("py_spy-*.whl"))
    if not wheels:
        raise SystemExit("--profile needs py-spy: `pip install py-spy`, or carry its wheel "
                         "in .whl/ (python3 -m pip download --no-deps py-spy -d .whl/tools)")
    target = work / "py-spy"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--target", str(target), str(wheels[-1])], check=True)
    return str(target / "bin" / "py-spy")


def py_spy_wrap(binary: str, cmd: list[str], out: Path) -> list[str]:
    """`cmd` run under py-spy, its profile written to `out`."""
    return [binary, "record", "--format", "raw", "--threads", "--idle", "--rate", str(RATE_HZ),
            "--output", str(out), "--", *cmd]


def summarize(profile: Path, top: int = 25) -> list[tuple[str, float]]:
    """The `top` functions by inclusive seconds summed over threads: (frame, seconds)."""
    inclusive: collections.Counter[str] = collections.Counter()
    for line in profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        for frame in set(stack.split(";")):
            inclusive[frame] += int(count)
    return [(frame, n / RATE_HZ) for frame, n in inclusive.most_common(top)]


# A real, throwaway `redis-server` for the benchmarks' shared-tier scenarios (gpu_perf's A2,
# suite_perf's S-fill / S-shared).
#
# The GPU machine has no network, so the binary is carried: `--redis-server PATH` (a `lib/`
# folder beside it holds the libraries it links, as Debian's `redis-server` needs off its own
# system), else `redis-server` on PATH, else a `.whl/redis/redis-server`, else the binary inside a
# carried PyPI `redis_server` wheel in `.whl/`.


def find_redis_binary(given: str | None, work: Path) -> str | None:
    """The redis-server to run (see the section's comment), or None when there is none."""
    if given:
        return given
    found = shutil.which("redis-server")
    if found:
        return found
    carried = ROOT / ".whl" / "redis" / "redis-server"
    if carried.is_file():
        return str(carried)
    wheels = sorted((ROOT / ".whl").glob("redis_server-*.whl"))
    if not wheels:
        return None
    with zipfile.ZipFile(wheels[-1]) as z:
        z.extract("redis_server/bin/redis-server", work)
    binary = work / "redis_server" / "bin" / "redis-server"
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    return str(binary)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def redis_server(binary: str, work: Path) -> Iterator[str]:
    """A real redis-server on a free port, no persistence, for the duration; yields its URL."""
    port = _free_port()
    env = dict(os.environ)
    libs = Path(binary).resolve().parent / "lib"
    if libs.is_dir():  # a carried binary with the libraries it needs beside it
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(libs),
                                                                env.get("LD_LIBRARY_PATH")]))
    proc = subprocess.Popen([binary, "--port", str(port), "--save", "", "--appendonly", "no",
                             "--dir", str(work)], stdout=subprocess.DEVNULL, env=env)
    try:
        for _ in range(200):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.1):
                break
            if proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {proc.returncode}")
            time.sleep(0.05)
        else:
            raise RuntimeError(f"redis-server did not listen on port {port} within 10 s")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class Runner:
    """Runs children, appending everything they print to one log file."""

    def __init__(self, log: Path, smoke: bool, pythonpath: list[str],
                 partial_path: Path | None = None) -> None:
        # --profile: the children's labels to run under py-spy (py_spy_wrap below), and its
        # binary; the profiles land beside the log as profile-<label>.txt.
        self.profile: set[str] = set()
        self.py_spy = ""
        self.log = log
        self.smoke = smoke
        self.pythonpath = pythonpath
        # Every child's result as it finishes, so a run cut short still leaves its figures.
        self.partial_path = partial_path
        self.partial: dict | None = {} if partial_path is not None else None

    def env(self, flags: str = "", triton_cache: Path | None = None) -> dict[str, str]:
        """A child's environment."""
        environment = {k: v for k, v in os.environ.items()
                       if k not in ("AUTOTUNE_FLAGS", "TRITON_CACHE_DIR")}
        environment.update(
            PYTHONPATH=os.pathsep.join([*self.pythonpath, str(ROOT),
                                        *filter(None, [os.environ.get("PYTHONPATH")])]),
            AUTOTUNE_FLAGS=flags, PYTHONUNBUFFERED="1")
        if triton_cache is not None:
            environment["TRITON_CACHE_DIR"] = str(triton_cache)
        if self.smoke:
            environment["AUTOTUNE_BENCH_SMOKE"] = "1"
        return environment

    def run(self, label: str, cmd: list[str], environment: dict[str, str],
            timeout: float = CHILD_TIMEOUT_S) -> dict:
        """One child; its RESULT line plus wall seconds and exit status."""
        if label in self.profile:
            cmd = py_spy_wrap(self.py_spy, cmd,
                                 self.log.parent / f"profile-{label.replace(' ', '_')}.txt")
        started = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=environment, cwd=ROOT, capture_output=True,
                                  text=True, timeout=timeout)
            rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as e:
            rc, stdout = 124, str(e.stdout or "")
            stderr = f"{e.stderr or ''}\n[timed out after {timeout} s]"
        wall = time.perf_counter() - started
        with open(self.log, "a") as f:
            f.write(f"===== {label}\n$ {' '.join(cmd)}\nAUTOTUNE_FLAGS="
                    f"{environment.get('AUTOTUNE_FLAGS', '')}\nTRITON_CACHE_DIR="
                    f"{environment.get('TRITON_CACHE_DIR', '')}\nrc={rc} wall={wall:.2f}s\n"
                    f"--- stdout\n{stdout[-20000:]}\n--- stderr\n{stderr[-20000:]}\n")
        result: dict = {"rc": rc, "wall_s": round(wall, 3)}
        for line in stdout.splitlines():
            if line.startswith("RESULT "):
                result.update(json.loads(line[len("RESULT "):]))
        if rc != 0 and "error" not in result:
            result["error"] = (stderr.strip().splitlines() or [f"exit {rc}"])[-1][:300]
        if self.partial is not None:
            self.partial[label] = result
            self.partial_path.write_text(json.dumps(self.partial, indent=1) + "\n")
        print(f"  {label:<16} rc={rc} wall={wall:6.2f}s workload="
              f"{result.get('workload_s', '-')}", flush=True)
        return result

    def workload(self, label: str, tuner: str, flags: str, triton_cache: Path,
                 *extra: str) -> dict:
        cmd = [sys.executable, str(BENCH / "triton_matmul_workload.py"), "--tuner", tuner,
               *extra]
        return self.run(label, cmd, self.env(flags, triton_cache))


def ensure_wheel(module: str, pattern: str, target: Path) -> str | None:
    """Make `module` importable by children: installed already, or from .whl/<pattern>;
    returns the directory to add to PYTHONPATH (None when nothing was needed)."""
    probe = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True)
    if probe.returncode == 0:
        return None
    wheels = sorted((ROOT / ".whl").glob(pattern))
    if not wheels:
        return None
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                    "--target", str(target), str(wheels[-1])], check=True)
    return str(target)


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 4) if a and b else None


def _w(result: dict) -> float | None:
    return None if "error" in result else result.get("workload_s")


def scenarios(run: Runner, work: Path, args: argparse.Namespace) -> dict:
    def fresh(name: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"tc-{name}-", dir=work))

    results_file = work / "matmul_workload.autotune.textproto"
    load = f"--load_autotune_results_from={results_file} --require_complete_autotune_results"
    out: dict = {}
    tc_triton, tc_a = fresh("triton"), fresh("a")

    print("== C: cold tuning", flush=True)
    out["triton_cold"] = run.workload("C triton", "triton-cached", "", tc_triton)
    out["ours_cold"] = run.workload("C ours", "ours", f"--dump_autotune_results_to="
                                    f"{results_file}", fresh("ours-cold"))
    print("== A: fresh sandbox loading the results", flush=True)
    out["ours_loaded"] = run.workload("A ours", "ours", load, tc_a)
    out["winners_only"] = run.workload("A winners", "winners", "", fresh("winners"),
                                       "--results", str(results_file))
    if not args.skip_a2:
        print("== A2: warm shared compile cache (Redis)", flush=True)
        binary = find_redis_binary(args.redis_server, work)
        if binary is None:
            out["a2_error"] = "no redis-server (--redis-server, PATH or .whl/)"
        else:
            with redis_server(binary, work) as url:
                remote = f"{load} --autotune_remote_cache={url} --autotune_remote_compile_cache"
                out["a2_fill"] = run.workload("A2 fill", "ours", remote, fresh("a2-fill"))
                out["ours_shared"] = run.workload("A2 ours", "ours", remote, fresh("a2"))
                info = subprocess.run(
                    [sys.executable, "-c", "import redis,sys,json; r=redis.Redis.from_url("
                     "sys.argv[1]); i=r.info('stats'); print(json.dumps({'keys': r.dbsize(), "
                     "'hits': i['keyspace_hits'], 'misses': i['keyspace_misses']}))", url],
                    env=run.env(), capture_output=True, text=True)
                out["redis_stats"] = (json.loads(info.stdout) if info.returncode == 0
                                      else info.stderr.strip()[-300:])
    print("== B: both caches warm", flush=True)
    out["triton_warm"] = run.workload("B triton", "triton-cached", "", tc_triton)
    out["ours_warm"] = run.workload("B ours", "ours", load, tc_a)
    print("== E: hit path of a tiny kernel", flush=True)
    out["launch"] = run.run("E launch", [
        sys.executable, str(BENCH / "triton_matmul_workload.py"), "--launch-overhead",
        "--launches", "5" if args.smoke else "5000", "--reps", "2" if args.smoke else "21"],
        run.env("", fresh("launch")))
    if not args.skip_quality:
        print("== D: quality of the winners", flush=True)
        winners = {name: {",".join(map(str, s["shape"])): s["best"]
                          for s in out[key].get("shapes", [])}
                   for name, key in (("triton", "triton_cold"), ("ours", "ours_cold"))}
        winners_file = work / "winners.json"
        winners_file.write_text(json.dumps(winners))
        out["quality"] = run.run("D quality", [
            sys.executable, str(BENCH / "triton_matmul_workload.py"), "--quality",
            str(winners_file),
            "--runs", "1" if args.smoke else "5", "--rep", "5" if args.smoke else "25",
            *(["--sustained-warmup", "1", "--sustained-rep", "5", "--sustained-top", "2"]
              if args.smoke else [])],
            run.env("", tc_triton))
    if not args.skip_r:
        print("== R: repeated cold tunings of every shape", flush=True)
        out["repeatability"] = run.run("R repeat", [
            sys.executable, str(BENCH / "tuning_repeatability.py"), str(work / "repeatability"),
            "--shape", "all", "--tunings", str(args.r_tunings), "--rounds",
            "1" if args.smoke else "3", "--tuners", "ours,triton"],
            run.env("", tc_triton), timeout=R_TIMEOUT_S)
    return out


def summarise(out: dict) -> dict:
    """Each scenario's figures and ratio against its target."""
    t_cold = _w(out["triton_cold"])
    s: dict = {}
    s["C"] = {"triton_s": t_cold, "ours_s": _w(out["ours_cold"]),
              "ratio": _ratio(_w(out["ours_cold"]), t_cold)}
    s["A"] = {"ours_s": _w(out["ours_loaded"]), "winners_s": _w(out["winners_only"]),
              "speedup": _ratio(t_cold, _w(out["ours_loaded"])),
              "vs_winners": _ratio(_w(out["ours_loaded"]), _w(out["winners_only"]))}
    if "ours_shared" in out:
        s["A2"] = {"ours_s": _w(out["ours_shared"]),
                   "speedup": _ratio(t_cold, _w(out["ours_shared"])),
                   "vs_b": _ratio(_w(out["ours_shared"]), _w(out["ours_warm"])),
                   "redis": out.get("redis_stats")}
    s["B"] = {"triton_s": _w(out["triton_warm"]), "ours_s": _w(out["ours_warm"]),
              "ratio": _ratio(_w(out["ours_warm"]), _w(out["triton_warm"]))}
    if "quality" in out and "shapes" in out["quality"]:
        rows = out["quality"]["shapes"]
        def worst(tuner: str, field: str) -> float | None:
            pcts = [r["picks"][tuner][field] for r in rows if field in r["picks"].get(tuner, {})]
            return max(pcts) if len(pcts) == len(rows) else None

        # D (issue 38): every winner within 3 % of the best in both regimes.
        s["D"] = {"worst_ours_pct": worst("ours", "worst_pct"),
                  "worst_triton_pct": worst("triton", "worst_pct"),
                  "ours_short_pct": worst("ours", "slowdown_pct"),
                  "ours_sustained_pct": worst("ours", "slowdown_sustained_pct"),
                  "triton_short_pct": worst("triton", "slowdown_pct"),
                  "triton_sustained_pct": worst("triton", "slowdown_sustained_pct"),
                  "agree": sum(1 for r in rows if r["agree"]), "shapes": len(rows)}
    if "shapes" in out.get("repeatability", {}):
        rows = out["repeatability"]["shapes"]

        def fewest(tuner: str) -> int | None:
            counts = [r["agreement"][tuner] for r in rows if tuner in r["agreement"]]
            return min(counts) if len(counts) == len(rows) else None

        s["R"] = {"ours_same": fewest("ours"), "triton_same": fewest("triton"),
                  "tunings": max((r["picks"].get("ours", 0) for r in rows), default=0),
                  "shapes": len(rows),
                  "ours_worst_pct": max((r["worst_pct"].get("ours") or 0.0 for r in rows),
                                        default=None) if all(r["worst_pct"] for r in rows)
                  else None,
                  "triton_error": next((r["errors"]["triton"] for r in rows
                                        if "triton" in r["errors"]), None)}
    launch = out["launch"].get("us_per_launch", {})
    s["E"] = {"us": launch, "ours_vs_plain": _ratio(launch.get("ours"), launch.get("plain_jit")),
              "triton_vs_plain": _ratio(launch.get("triton_autotune"), launch.get("plain_jit"))}
    return s


def markdown(summary: dict, env_report: dict) -> str:
    def f(v: object, unit: str = "") -> str:
        return "—" if v is None else (f"{v:g}{unit}" if isinstance(v, (int, float)) else str(v))

    s = summary
    lines = [f"{env_report['gpu']}; {env_report['versions']}; {env_report['cores']} cores", "",
             "| id | scenario | ours | Triton / reference | result | target |",
             "| --- | --- | --- | --- | --- | --- |"]
    c, a, b, e = s["C"], s["A"], s["B"], s["E"]
    lines.append(f"| C | cold tuning (workload) | {f(c['ours_s'], ' s')} | "
                 f"{f(c['triton_s'], ' s')} | {f(c['ratio'], '×')} | {TARGETS['C']} |")
    if "D" in s:
        d = s["D"]
        lines.append(f"| D | winners vs the best, worse of two regimes (25 ms / 100 ms) | worst "
                     f"{f(d['worst_ours_pct'])} % ({f(d['ours_short_pct'])} / "
                     f"{f(d['ours_sustained_pct'])}) | Triton worst "
                     f"{f(d['worst_triton_pct'])} % ({f(d['triton_short_pct'])} / "
                     f"{f(d['triton_sustained_pct'])}) | agree on {d['agree']}/"
                     f"{d['shapes']} shapes | {TARGETS['D']} |")
    lines.append(f"| A | fresh sandbox, results loaded | {f(a['ours_s'], ' s')} | Triton cold "
                 f"{f(c['triton_s'], ' s')}; winners only {f(a['winners_s'], ' s')} | "
                 f"{f(a['speedup'], '×')} faster; {f(a['vs_winners'], '×')} of winners | "
                 f"{TARGETS['A']} |")
    if "A2" in s:
        a2 = s["A2"]
        lines.append(f"| A2 | + warm shared compile cache | {f(a2['ours_s'], ' s')} | B (ours) "
                     f"{f(b['ours_s'], ' s')}; Triton cold {f(c['triton_s'], ' s')} | "
                     f"{f(a2['vs_b'], '×')} of B; {f(a2['speedup'], '×')} faster than Triton "
                     f"cold | {TARGETS['A2']} |")
    lines.append(f"| B | both caches warm | {f(b['ours_s'], ' s')} | {f(b['triton_s'], ' s')} |"
                 f" {f(b['ratio'], '×')} | {TARGETS['B']} |")
    us = e["us"]
    lines.append(f"| E | hit path, 1024-element add (µs/launch) | {f(us.get('ours'))} | plain "
                 f"{f(us.get('plain_jit'))}; triton.autotune {f(us.get('triton_autotune'))} | "
                 f"{f(e['ours_vs_plain'], '×')} of plain (Triton {f(e['triton_vs_plain'], '×')})"
                 f" | {TARGETS['E']} |")
    if "R" in s:
        r = s["R"]
        triton_cell = (f"Triton {r['triton_same']}/{r['tunings']}" if r["triton_same"] is not None
                       else f"Triton could not tune: {r['triton_error']}")
        lines.append(f"| R | same pick in {r['tunings']} cold tunings, fewest over "
                     f"{r['shapes']} shapes | {f(r['ours_same'])}/{r['tunings']} (worst pick "
                     f"{f(r['ours_worst_pct'], ' %')} off) | {triton_cell} | | {TARGETS['R']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    # The shared compile cache's passes: the fleet's key, made up for this run (every pass's
    # processes inherit it), as a CI secret store would hand it out.
    os.environ.setdefault("AUTOTUNE_REMOTE_COMPILE_KEY", secrets.token_hex(32))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--smoke", action="store_true", help="tiny, any machine (CI)")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-a2", action="store_true")
    parser.add_argument("--skip-r", action="store_true", help="no scenario R (about 3 minutes)")
    parser.add_argument("--r-tunings", type=int, default=None,
                        help="tunings per shape and tuner in R (default 6; 2 with --smoke)")
    parser.add_argument("--work", type=Path, help="scratch directory (default: a temp dir)")
    parser.add_argument("--profile", default="", metavar="LABELS",
                        help="comma-separated children to run under py-spy, as the log names "
                        "them (e.g. 'C ours,A ours'): py_spy_wrap")
    parser.add_argument("--redis-server", default=None,
                        help="redis-server binary for A2 (default: PATH, then .whl/; "
                        "a lib/ beside it is used)")
    args = parser.parse_args()
    if args.r_tunings is None:
        args.r_tunings = 2 if args.smoke else 6
    out_dir = args.out.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-perf-"))
    work.mkdir(parents=True, exist_ok=True)
    log = out_dir / "gpu_perf_logs.txt"
    log.write_text("")
    pythonpath = [p for p in (ensure_wheel("redis", "redis-*-py3-none-any.whl",
                                           work / "_pydeps"),) if p]
    sys.path[:0] = pythonpath

    def sh(cmd: str) -> str:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()

    env_report = {
        "gpu": sh("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader") or "no GPU",
        "versions": sh(f"{sys.executable} -c 'import sys, torch, triton, google.protobuf as p; "
                       "print(\"Python\", sys.version.split()[0], \"torch\", torch.__version__, "
                       "\"triton\", triton.__version__, \"protobuf\", p.__version__)'"),
        "cores": os.cpu_count(),
        "command": " ".join(["python3", "bench/gpu_perf.py", *sys.argv[1:]]),
    }
    print(json.dumps(env_report), flush=True)
    started = time.perf_counter()
    run = Runner(log, args.smoke, pythonpath, out_dir / "gpu_perf_partial.json")
    run.profile = {label.strip() for label in args.profile.split(",") if label.strip()}
    if run.profile:
        run.py_spy = py_spy(work)
    raw = scenarios(run, work, args)
    summary = summarise(raw)
    result = {"env": env_report, "summary": summary, "raw": raw,
              "total_s": round(time.perf_counter() - started, 1)}
    (out_dir / "gpu_perf.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    table = markdown(summary, env_report)
    (out_dir / "gpu_perf.md").write_text(table)
    print("\n" + table, flush=True)
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
