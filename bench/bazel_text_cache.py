"""Target T under Bazel: `bazel test` of a test that loads a large committed text cache, with
autotuned_py_test's `<name>.binary_copy` build action and without it, in one run (CPU).

    python bench/bazel_text_cache.py OUT_DIR [--entries 10000] [--candidates 8] [--reps 3]
                                     [--smoke]

Builds a scratch Bazel 4.2.3 workspace from this repository (tests/bazel/harness.py: offline,
the interpreter running this script as the Python toolchain), with one package holding a text
cache of ENTRIES x CANDIDATES realistic entries (bench/cpu_cache_scaling.py's writer) and two
autotuned_py_tests that run the same main on it:

  copy      the macro's default: the load test reads the copy `<name>.binary_copy` built
  previous  `env = {"AUTOTUNE_BINARY_CACHE_DIR": ""}`: the behaviour before the action (the
            library parses the text and writes its own copy under HOME, which `bazel test`
            points at the test's private TEST_TMPDIR, so the copy dies with the test)

First `bazel build` of the copy target alone (the one-time action cost, from Bazel's --profile
trace, and the command's wall time), then REPS rounds of `bazel test --nocache_test_results`
of each test, interleaved. Per run it records the main's `get_cache()` time (the load), its
first-use lookups of 100 entries, whether the file came from a copy, Bazel's test time
("PASSED in") and the command's wall time. Ratios are medians, previous / copy.
Writes OUT_DIR/bazel_text_cache.json and OUT_DIR/bazel_text_cache.md. --smoke: 300 x 2
entries, one round (checks the script, not the speed). Needs bazel-4 (or AUTOTUNE_TEST_BAZEL).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from google.protobuf import __version__ as protobuf_version  # noqa: E402

from autotune_cache import binary_copy  # noqa: E402
from bench.cpu_cache_scaling import write_file  # noqa: E402
from tests.bazel.harness import Workspace, find_bazel  # noqa: E402

PKG = "bench_text_cache"
CACHE = "load_test.autotune.textproto"

BUILD = f"""\
load("//rules:defs.bzl", "autotuned_py_test")

# The macro's default: the test reads the copy that `load_test.binary_copy` built.
autotuned_py_test(
    name = "load_test",
    size = "large",
    srcs = ["load_test.py"],
    deps = ["//:autotune_cache"],
)

# The behaviour before the action: the library parses the text and writes its copy under
# HOME, which is the test's private TEST_TMPDIR.
autotuned_py_test(
    name = "previous_test",
    size = "large",
    srcs = ["load_test.py"],
    cache = "{CACHE}",
    env = {{"AUTOTUNE_BINARY_CACHE_DIR": ""}},
    main = "load_test.py",
    deps = ["//:autotune_cache"],
)
"""

MAIN = """\
import json
import os
import time
from pathlib import Path

from autotune_cache import get_cache

started = time.perf_counter()
cache = get_cache()
load_s = time.perf_counter() - started
(loaded,) = cache.memory.loaded
from_copy = loaded.from_copy
digests = loaded.digests()
keys = [loaded.get(d)[0] for d in digests[:: max(1, len(digests) // 100)]]
started = time.perf_counter()
assert all(cache.lookup(key) is not None for key in keys)
lookups_s = time.perf_counter() - started
report = {"load_s": load_s, "lookups": len(keys), "lookups_s": lookups_s,
          "from_copy": from_copy, "entries": len(loaded)}
print("bench: " + json.dumps(report))
outputs = Path(os.environ["TEST_UNDECLARED_OUTPUTS_DIR"])
outputs.mkdir(parents=True, exist_ok=True)
(outputs / "bench.json").write_text(json.dumps(report))
"""


def action_seconds(profile: Path) -> float | None:
    """The duration of the binary-copy action in a Bazel --profile trace, or None when it did
    not run (an action cache hit)."""
    data = json.loads(profile.read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    durations = [e["dur"] / 1e6 for e in events
                 if e.get("cat") == "action processing" and "binary copy" in str(e.get("name"))]
    return max(durations) if durations else None


def run_test(ws: Workspace, name: str) -> dict:
    """One `bazel test` of //PKG:name, never a cached result."""
    label = f"//{PKG}:{name}"
    started = time.perf_counter()
    result = ws.run("test", label, "--nocache_test_results", timeout=1800)
    wall = time.perf_counter() - started
    passed = re.search(re.escape(label) + r"\s+PASSED in ([\d.]+)s", result.output)
    report = json.loads(ws.undeclared_output(label, "bench.json"))
    return {**report, "bazel_test_s": float(passed.group(1)) if passed else None,
            "wall_s": round(wall, 3)}


def summary(runs: list[dict]) -> dict:
    return {name: round(statistics.median(r[name] for r in runs), 4)
            for name in ("load_s", "lookups_s", "bazel_test_s", "wall_s")}


def markdown(result: dict) -> str:
    copy, previous = result["copy"]["median"], result["previous"]["median"]
    ratio = result["ratio_previous_over_copy"]
    one = result["one_time"]
    lines = [
        f"machine: {result['machine']}", f"command: `{result['command']}`", "",
        f"cache: {result['entries']:,} entries x {result['candidates']} candidates, "
        f"{result['text_bytes'] / 1e6:.1f} MB of text; medians of {result['reps']} runs each",
        "",
        "| run | load (get_cache) | 100 first lookups | Bazel test time | `bazel test` wall |",
        "| --- | --- | --- | --- | --- |"]
    for name, label in (("previous", "previous: text parse in every test"),
                        ("copy", "**with `<name>.binary_copy`**")):
        m = result[name]["median"]
        lines.append(f"| {label} | {m['load_s']:.3f} s | {m['lookups_s'] * 1e3:.1f} ms | "
                     f"{m['bazel_test_s']} s | {m['wall_s']:.2f} s |")
    lines += ["", f"ratio previous / copy: load {ratio['load_s']}x, Bazel test time "
              f"{ratio['bazel_test_s']}x, wall {ratio['wall_s']}x "
              f"(saved per test run: {previous['bazel_test_s'] - copy['bazel_test_s']:.1f} s)",
              "", f"one-time action (`bazel build //{PKG}:load_test.binary_copy`): "
              f"{one['action_s']} s in the action, {one['wall_s']:.2f} s wall; "
              f"the copy is {one['copy_bytes'] / 1e6:.1f} MB"]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--entries", type=int, default=10000)
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="300 x 2 entries, one round")
    args = parser.parse_args()
    if args.smoke:
        args.entries, args.candidates, args.reps = 300, 2, 1
    bazel = find_bazel()
    if bazel is None:
        print("bazel_text_cache: Bazel 4.2.3 is not installed (bazel-4, or set "
              "AUTOTUNE_TEST_BAZEL)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict = {
        "machine": f"{platform.node()}: {os.cpu_count()} cores, {platform.processor() or '?'}, "
                   f"Python {platform.python_version()}, protobuf {protobuf_version}, "
                   f"Bazel 4.2.3 ({bazel}), load average {os.getloadavg()[0]:.1f} at start",
        "command": " ".join(["python", "bench/bazel_text_cache.py", *sys.argv[1:]]),
        "entries": args.entries, "candidates": args.candidates, "reps": args.reps,
    }
    with tempfile.TemporaryDirectory(prefix="bazel-text-cache-") as tmp:
        ws = Workspace.create(Path(tmp) / "ws", Path(tmp) / "output_user_root", bazel)
        try:
            package = ws.root / PKG
            package.mkdir()
            (package / "BUILD.bazel").write_text(BUILD)
            (package / "load_test.py").write_text(MAIN)
            result["text_bytes"] = write_file(package / CACHE, args.entries, args.candidates)
            if result["text_bytes"] < binary_copy.MIN_BYTES:
                raise SystemExit("the cache is under binary_copy.MIN_BYTES: use more entries")
            # Analysis and the tool first (previous_test has no copy), so that the timed build
            # holds the action alone.
            ws.run("build", f"//{PKG}:previous_test", "//rules/private:make_binary_copy")
            profile = Path(tmp) / "profile.json"
            started = time.perf_counter()
            ws.run("build", f"//{PKG}:load_test.binary_copy", f"--profile={profile}",
                   timeout=1800)
            copies = list((ws.root / "bazel-bin" / PKG / "load_test.binary_copy").iterdir())
            action = action_seconds(profile)
            result["one_time"] = {"wall_s": round(time.perf_counter() - started, 3),
                                  "action_s": None if action is None else round(action, 3),
                                  "copy_bytes": sum(p.stat().st_size for p in copies
                                                    if p.suffix == ".binpb")}
            runs: dict[str, list[dict]] = {"copy": [], "previous": []}
            for rep in range(args.reps):
                for name, target in (("copy", "load_test"), ("previous", "previous_test")):
                    run = run_test(ws, target)
                    print(f"round {rep + 1}, {name}: {json.dumps(run)}", flush=True)
                    runs[name].append(run)
        finally:
            ws.shutdown()
    for name in runs:
        result[name] = {"runs": runs[name], "median": summary(runs[name])}
    assert all(r["from_copy"] for r in runs["copy"]), runs["copy"]
    assert not any(r["from_copy"] for r in runs["previous"]), runs["previous"]
    copy, previous = result["copy"]["median"], result["previous"]["median"]
    result["ratio_previous_over_copy"] = {
        name: round(previous[name] / copy[name], 1) if copy[name] else None
        for name in ("load_s", "bazel_test_s", "wall_s")}
    (args.out / "bazel_text_cache.json").write_text(json.dumps(result, indent=2) + "\n")
    table = markdown(result)
    (args.out / "bazel_text_cache.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
