"""Loading, lookup and CLI costs of large caches, on the CPU (target T of issue 13), one command.

    python bench/cpu_cache_scaling.py OUT_DIR [--sizes 1000,10000,100000] [--candidates 8,48]
                                      [--parse-limit 10000] [--dir-limit 10000] [--smoke]

For each size (entries) and candidate count (timings per entry) it builds a results file of
realistic entries (the brief's matmul: three block sizes, warps, stages; two toolchain
versions), as text and as binary, and a cache directory, then measures:

  load text, parse   formats.load_results(FILE.textproto): the whole-file parse the CLI's verbs
                     (and a non-canonical file's load) pay (only up to --parse-limit entries)
  load text, 1st     Cache(--load_autotune_results_from=FILE.textproto): the file indexed
                     (results_index), one run
  load text          the same again (the target: <= 0.15 s at 10,000 x 8)
  load binary        Cache(--load_autotune_results_from=FILE.pb)
  lookup             a hit's cost, first use of an entry (parsed on use) and repeated
  first miss         a miss, which searches every loaded entry for near misses
  dir lookup         DirectoryTier.get of a hit and a miss, and a near-miss scan, in a
                     directory of N entry files (up to --dir-limit entries)
  CLI                `python -m autotune_cache` inspect --json, verify, convert (text to
                     binary), diff and merge (against a binary file of N-1 entries) and
                     prune --dry-run, each a fresh process, on the text file

Times are the best of --reps runs (wall clock, and CPU time of this process: the CI machine
is shared, so wall time there includes other jobs' load); the CLI is one run each. Files over
limits.MAX_TEXT_BYTES (text) or formats.MAX_FILE_BYTES (binary) are refused by the library and
reported as such, not measured.
Writes OUT_DIR/cpu_cache_scaling.json and OUT_DIR/cpu_cache_scaling.md. --smoke runs a tiny
version (sizes 20 and 60, 2 and 4 candidates), for CI: it checks the script, not the speed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from google.protobuf import __version__ as protobuf_version  # noqa: E402
from google.protobuf import text_format  # noqa: E402

from autotune_cache import Cache, Settings  # noqa: E402
from autotune_cache.formats import FORMAT_VERSION, MAX_FILE_BYTES, load_results  # noqa: E402
from autotune_cache.foundation.key import CacheKey, Device  # noqa: E402
from autotune_cache.foundation.limits import MAX_TEXT_BYTES  # noqa: E402
from autotune_cache.proto import autotune_results_pb2 as pb  # noqa: E402
from autotune_cache.store.dirstore import DirectoryStore  # noqa: E402
from autotune_cache.tiers import DirectoryTier  # noqa: E402

H200 = Device("NVIDIA H200", "sm_90", 132)
TOOLCHAIN = {"triton": "3.6.0", "ptxas": "12.8.93"}
SOURCE = "d7361422b8cddf3b974025f08b5b2ad3f3da4f02d629e8bd437440fb5d4e8cb1"
CONFIGS = "575a1484f53ffe4cc1985623cede8f8785b482f77bb3aa9be14f17b8f0a13a99"
DIGITS = 7  # problem sizes are zero-padded, so every entry has the same length


def problem(i: int) -> str:
    return f"K=2048,M={i:0{DIGITS}d},N=8192,a_ptr=float16,b_ptr=float16,c_ptr=float16"


def key_of(i: int) -> CacheKey:
    return CacheKey("matmul_kernel", SOURCE, CONFIGS, problem(i), H200, TOOLCHAIN)


def entry_of(i: int, candidates: int) -> pb.Entry:
    """A realistic entry: the brief's matmul configs, `candidates` timings."""
    timings = []
    for j in range(candidates):
        cfg = pb.Config(params=[pb.Param(name="BLOCK_K", int_value=(32, 64)[j % 2]),
                                pb.Param(name="BLOCK_M", int_value=(64, 128)[j // 2 % 2]),
                                pb.Param(name="BLOCK_N", int_value=(64, 128, 256)[j // 4 % 3])],
                        num_warps=(4, 8)[j // 12 % 2], num_stages=(3, 4)[j // 24 % 2],
                        num_ctas=1)
        timings.append(pb.Timing(config=cfg, time_ms=0.05 + 0.001 * j))
    return pb.Entry(key=key_of(i).to_proto(), result=pb.Result(
        config=timings[0].config, time_ms=timings[0].time_ms, candidates=timings,
        tuned_at="2026-11-30T12:00:00Z", tuner_version="0.1.0", tuning_seconds=12.5,
        timing_method="do_bench"))


def _template(candidates: int, text: bool) -> tuple[bytes, bytes, bytes]:
    """(header, one entry with a placeholder problem, placeholder) of a results file."""
    placeholder = f"{0:0{DIGITS}d}".encode()
    one = pb.AutotuneResultsFile(version=FORMAT_VERSION, entries=[entry_of(0, candidates)])
    header = pb.AutotuneResultsFile(version=FORMAT_VERSION)
    if text:
        head = text_format.MessageToString(header).encode()
        body = text_format.MessageToString(one).encode()[len(head):]
    else:
        head = header.SerializeToString()
        body = one.SerializeToString()[len(head):]
    return head, body, b"M=" + placeholder


def write_file(path: Path, n: int, candidates: int) -> int:
    """A results file of n entries, built by substituting each entry's problem into one
    serialized entry (the same bytes the library writes, in a fraction of the time)."""
    head, body, placeholder = _template(candidates, text=path.suffix == ".textproto")
    before, after = body.split(placeholder)
    with open(path, "wb") as f:
        f.write(head)
        for i in range(n):
            f.write(before + f"M={i:0{DIGITS}d}".encode() + after)
    return path.stat().st_size


def write_directory(root: Path, n: int, candidates: int) -> None:
    """A cache directory of n entry files (written plainly: DirectoryStore.put fsyncs each)."""
    store = DirectoryStore(root)
    head, body, placeholder = _template(candidates, text=True)
    before, after = body.split(placeholder)
    for i in range(n):
        store.path_for(key_of(i)).write_bytes(head + before + f"M={i:0{DIGITS}d}".encode()
                                              + after)


def timed(fn: Callable[[], object], reps: int) -> dict:
    """Best and median wall and CPU seconds of `reps` calls."""
    walls, cpus = [], []
    for _ in range(reps):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    walls.sort()
    return {"wall_s": round(walls[0], 5), "cpu_s": round(min(cpus), 5),
            "median_wall_s": round(walls[len(walls) // 2], 5), "reps": reps}


def load(path: Path) -> Callable[[], Cache]:
    return lambda: Cache(Settings(load_from=(path,)))


def cli(args: list[str], log: Path) -> dict:
    """One `python -m autotune_cache` process; wall seconds and exit status."""
    environment = {**os.environ,
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                               os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "autotune_cache", *args], env=environment,
                          capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    with open(log, "a") as f:
        f.write(f"$ autotune-cache {' '.join(args)}\nrc={proc.returncode} wall={wall:.2f}s\n"
                f"{proc.stderr[-2000:]}\n")
    return {"wall_s": round(wall, 3), "rc": proc.returncode}


def measure(work: Path, n: int, candidates: int, args: argparse.Namespace) -> dict:
    text, binary = work / f"cache-{n}-{candidates}.textproto", work / f"cache-{n}-{candidates}.pb"
    row: dict = {"entries": n, "candidates": candidates}
    row["text_bytes"] = write_file(text, n, candidates)
    row["binary_bytes"] = write_file(binary, n, candidates)
    reps = args.reps
    hits = [key_of(i) for i in range(0, n, max(1, n // 1000))]

    text_cap = min(MAX_TEXT_BYTES, MAX_FILE_BYTES)
    if row["text_bytes"] > text_cap:
        row["text"] = f"refused: {row['text_bytes']:,} bytes > the {text_cap:,}-byte text cap"
    else:
        if n <= args.parse_limit:
            row["load_text_parse"] = timed(lambda: load_results(text), 1)
        row["load_text_first"] = timed(load(text), 1)
        row["load_text"] = timed(load(text), reps)
        cache = load(text)()
        assert isinstance(cache, Cache)
        row["lookup_first_us"] = round(timed(lambda: [cache.lookup(k) for k in hits], 1)
                                       ["wall_s"] / len(hits) * 1e6, 2)
        row["lookup_us"] = round(timed(lambda: [cache.lookup(k) for k in hits], reps)
                                 ["wall_s"] / len(hits) * 1e6, 2)
        miss = CacheKey("matmul_kernel", SOURCE, CONFIGS, problem(0), H200, {"triton": "9.9"})
        row["first_miss"] = timed(lambda: cache.lookup(miss), 1)
    if row["binary_bytes"] > MAX_FILE_BYTES:
        row["binary"] = (f"refused: {row['binary_bytes']:,} bytes > the {MAX_FILE_BYTES:,}-byte "
                         "cap")
    else:
        row["load_binary"] = timed(load(binary), reps)

    if n <= args.dir_limit:
        directory = work / f"dir-{n}-{candidates}"
        write_directory(directory, n, candidates)
        tier = DirectoryTier(directory, writable=False)
        absent = key_of(n + 1)
        row["dir_hit_us"] = round(timed(lambda: [tier.get(k) for k in hits], reps)["wall_s"]
                                  / len(hits) * 1e6, 1)
        row["dir_miss_us"] = round(timed(lambda: tier.get(absent), reps)["wall_s"] * 1e6, 1)
        row["dir_near_miss_scan"] = timed(lambda: list(tier.same_problem(absent)), reps)

    if row["text_bytes"] <= text_cap and row["binary_bytes"] <= MAX_FILE_BYTES:
        log = work / "cli.log"
        other = work / f"other-{n}-{candidates}.pb"  # binary: diff and merge read a 2nd file
        write_file(other, max(1, n - 1), candidates)
        row["cli"] = {
            "inspect": cli(["inspect", "--json", str(text)], log),
            "verify": cli(["verify", str(text)], log),
            "convert": cli(["convert", str(text), str(work / "converted.pb")], log),
            "diff": cli(["diff", str(other), str(text)], log),
            "merge": cli(["merge", str(other), str(text), "-o", str(work / "merged.pb"),
                          "--on-conflict", "newest"], log),
            "prune": cli(["prune", str(text), "--keep-device", "H200", "--dry-run"], log),
        }
        other.unlink()
    for p in (text, binary):
        p.unlink(missing_ok=True)
    return row


def _seconds(s: float) -> str:
    return f"{s:.2f} s" if s >= 1 else f"{s * 1e3:.1f} ms"


def _fmt(v: object) -> str:
    if isinstance(v, dict) and "wall_s" in v:
        return f"{_seconds(v['wall_s'])} (cpu {_seconds(v['cpu_s'])})"
    if isinstance(v, float):
        return f"{v:g}"
    return "—" if v is None else str(v)


def markdown(result: dict) -> str:
    rows = result["rows"]
    lines = [f"machine: {result['machine']}", "",
             "| entries | cand. | text MB | load text, whole parse | load text, 1st (index) | "
             "**load text (index)** | load .pb | lookup hit 1st / again (µs) | 1st miss | dir "
             "hit / miss (µs) | dir near-miss scan |",
             "| " + " | ".join(["---"] * 11) + " |"]
    for r in rows:
        lines.append("| " + " | ".join([
            f"{r['entries']:,}", str(r["candidates"]), f"{r['text_bytes'] / 1e6:.1f}",
            _fmt(r.get("load_text_parse", r.get("text", "not run"))),
            _fmt(r.get("load_text_first")), _fmt(r.get("load_text")),
            _fmt(r.get("load_binary", r.get("binary"))),
            f"{_fmt(r.get('lookup_first_us'))} / {_fmt(r.get('lookup_us'))}",
            _fmt(r.get("first_miss")),
            f"{_fmt(r.get('dir_hit_us'))} / {_fmt(r.get('dir_miss_us'))}",
            _fmt(r.get("dir_near_miss_scan"))]) + " |")
    verbs = ("inspect", "verify", "convert", "diff", "merge", "prune")
    lines += ["", "CLI, one fresh process each, on the text file (wall s):", "",
              "| entries | cand. | " + " | ".join(verbs) + " |",
              "| " + " | ".join(["---"] * (len(verbs) + 2)) + " |"]
    for r in rows:
        if "cli" in r:
            lines.append(f"| {r['entries']:,} | {r['candidates']} | " + " | ".join(
                f"{r['cli'][v]['wall_s']:.2f}" + ("" if r["cli"][v]["rc"] in (0, 1)
                                                  else f" (rc {r['cli'][v]['rc']})")
                for v in verbs) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--candidates", default="8,48")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--parse-limit", type=int, default=1000,
                        help="measure the old text parse only up to this many entries")
    parser.add_argument("--dir-limit", type=int, default=10000,
                        help="build cache directories only up to this many entries")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    args = parser.parse_args()
    if args.smoke:
        args.sizes, args.candidates, args.reps = "20,60", "2,4", 2
    args.out.mkdir(parents=True, exist_ok=True)
    logging.getLogger("autotune_cache").setLevel(logging.ERROR)  # the near-miss warnings
    result = {
        "machine": f"{platform.node()}: {os.cpu_count()} cores, {platform.processor() or '?'}, "
                   f"Python {platform.python_version()}, protobuf {protobuf_version}, load "
                   f"average {os.getloadavg()[0]:.1f} at start",
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "max_file_bytes": MAX_FILE_BYTES,
        "max_text_bytes": MAX_TEXT_BYTES,
        "rows": [],
    }
    with tempfile.TemporaryDirectory(prefix="cache-scaling-") as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            for c in (int(s) for s in args.candidates.split(",")):
                print(f"== {n} entries, {c} candidates", flush=True)
                row = measure(Path(tmp), n, c, args)
                print(json.dumps(row), flush=True)
                result["rows"].append(row)
                (args.out / "cpu_cache_scaling.json").write_text(
                    json.dumps(result, indent=2) + "\n")
    table = markdown(result)
    (args.out / "cpu_cache_scaling.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
