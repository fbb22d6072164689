"""Loading a committed results file in a fresh process, through its own index (issue 23; CPU).

    python bench/text_index_load.py OUT_DIR [--entries 10000] [--small 1000] [--candidates 8]
                                            [--reps 5] [--smoke]

Builds, with cpu_cache_scaling's generator (the brief's matmul entries, the bytes the library
writes), a text file of --entries entries (10,000 x 8 candidates: 39 MB), one of --small
entries, and a binary file of --entries entries. Each measurement is a fresh Python process
(a `python -c` child), so nothing is warm but the OS page cache, and nothing derived from the
file exists anywhere:

  load       loading FILE (the memory tier's load_file) after the import: wall seconds, and
             the child's CPU seconds (on a shared machine the steadier figure)
  lookups    the first lookup of a hit (the index: its block is parsed), the first of another
             key, and the first key again (kept parsed)
  peak RSS   the child's ru_maxrss after the lookups
  import     `import autotune_cache` in the child

Each row runs `--reps` times; the first and second process are reported, and the best and
median over all.

The comparison with the binary copy the index replaced (issue 23) was measured by this script
at commit dbe02c8, the last with autotune_cache.binary_copy, in one run: the copy written on a
first load (protoc parsing the text: grpc_tools was importable), the copy read on later loads,
and a plain parse with copies off, by protoc and by protobuf's Python parser. Its figures were
committed in cf4a540 (git history); run that commit's script to redo them.

Writes OUT_DIR/text_index_load.json and OUT_DIR/text_index_load.md. --smoke: 200 and 50
entries, 2 candidates, one rep (checks the script, not the speed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cpu_cache_scaling import write_file  # noqa: E402
from google.protobuf import __version__ as protobuf_version  # noqa: E402

# What one child measures; argv: FILE, entries, the bench directory.
CHILD = r"""
import json, resource, sys, time
started = time.perf_counter()
import autotune_cache
imported = time.perf_counter() - started
sys.path.insert(0, sys.argv[3])
from cpu_cache_scaling import key_of
from autotune_cache.store.results_index import load_file
path, n = sys.argv[1], int(sys.argv[2])
t, c = time.perf_counter(), time.process_time()
loaded = load_file(path)
loaded_s, loaded_cpu_s = time.perf_counter() - t, time.process_time() - c
lookups = []
for i in (n // 2, n // 2 + 1, n // 2):
    t = time.perf_counter()
    assert loaded.get(key_of(i)) is not None
    lookups.append(time.perf_counter() - t)
print(json.dumps({"import_s": imported, "load_s": loaded_s, "load_cpu_s": loaded_cpu_s,
                  "lookup1_ms": lookups[0] * 1e3, "lookup2_ms": lookups[1] * 1e3,
                  "lookup3_ms": lookups[2] * 1e3,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def child(path: Path, n: int) -> dict:
    """One fresh process's figures."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), str(n), str(ROOT / "bench")],
                          env=environment, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"child {path} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summary(runs: list[dict]) -> dict:
    """First and second process, best and median over all, of each figure."""
    out: dict = {"runs": runs}
    for name in runs[0]:
        values = sorted(r[name] for r in runs)
        out[name] = {"first": round(runs[0][name], 4),
                     "second": round(runs[1][name], 4) if len(runs) > 1 else None,
                     "best": round(values[0], 4), "median": round(values[len(values) // 2], 4)}
    return out


def measure(work: Path, args: argparse.Namespace) -> dict:
    files = {
        "text": (work / f"cache-{args.entries}.textproto", args.entries),
        "text_small": (work / f"cache-{args.small}.textproto", args.small),
        "binary": (work / f"cache-{args.entries}.pb", args.entries),
    }
    result: dict = {"files": {}, "rows": {}}
    for name, (path, n) in files.items():
        result["files"][name] = {"path": path.name, "entries": n,
                                 "bytes": write_file(path, n, args.candidates)}
    for name, (path, n) in files.items():
        result["rows"][f"index {name}"] = summary(
            [child(path, n) for _ in range(max(2, args.reps))])
    return result


def markdown(result: dict) -> str:
    lines = [f"# Loading a committed results file in a fresh process ({result['machine']})", "",
             f"`{result['command']}`; Python {result['python']}, protobuf {result['protobuf']}.",
             "", "Files: " + "; ".join(
                 f"{name} {f['entries']:,} entries, {f['bytes'] / 1e6:.1f} MB"
                 for name, f in result["files"].items()), "",
             "| row | load 1st process | load 2nd process | load best / median | load CPU "
             "best / median | first lookup | another key | same key again | peak RSS | import |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, row in result["rows"].items():
        second = row["load_s"]["second"]
        lines.append(
            f"| {name} | {row['load_s']['first']:.3f} s | "
            f"{'-' if second is None else f'{second:.3f} s'} | "
            f"{row['load_s']['best']:.3f} / {row['load_s']['median']:.3f} s | "
            f"{row['load_cpu_s']['best']:.3f} / {row['load_cpu_s']['median']:.3f} s | "
            f"{row['lookup1_ms']['median']:.2f} ms | {row['lookup2_ms']['median']:.2f} ms | "
            f"{row['lookup3_ms']['median']:.3f} ms | "
            f"{row['rss_mb']['median']:.0f} MB | {row['import_s']['median']:.3f} s |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--entries", type=int, default=10000)
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.entries, args.small, args.candidates, args.reps = 200, 50, 2, 1
    args.out.mkdir(parents=True, exist_ok=True)
    load_at_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="text-index-bench-") as tmp:
        result = measure(Path(tmp), args)
    result.update(command="python bench/text_index_load.py " + " ".join(sys.argv[2:]),
                  python=platform.python_version(), protobuf=protobuf_version,
                  machine=f"{platform.machine()}, {os.cpu_count()} CPUs, load average "
                          f"{load_at_start:.1f} at start")
    (args.out / "text_index_load.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "text_index_load.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
