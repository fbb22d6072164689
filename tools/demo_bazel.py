"""The ruleset part of the demo: the autotuned_py_test cycle on real Bazel (4.2.3, WORKSPACE).

In a scratch copy of e2e/workspace (a user's workspace that gets rules_autotune through
local_repository), offline as in CI (tests/bazel/harness.py):

1. `bazel test` fails with the regen hint: there is no cache yet;
2. `bazel run //kernels:small_test.regen` writes the cache (shared by two tests);
3. `bazel test` passes with 0 benchmarks;
4. a stale kernel edit fails with the hint;
5. `regen_cache --check` reports the cache that would change.

Each step prints one line and its time.
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.bazel.harness import Result, Workspace, find_bazel  # noqa: E402

TESTS = ["//kernels:small_test", "//kernels:large_test"]
HINT = "bazel run //kernels:small_test.regen"


def _step(number: int, title: str, action: Callable[[], str]) -> None:
    """Runs one step and prints `[n/5] title: outcome (seconds)`; raises SystemExit on failure."""
    started = time.perf_counter()
    outcome = action()
    print(f"  [{number}/5] {title}: {outcome} ({time.perf_counter() - started:.0f} s)",
          flush=True)


def _fail(what: str, result: Result) -> SystemExit:
    return SystemExit(f"demo: {what} (exit {result.returncode})\n{result.output[-3000:]}")


def run_cycle(ws: Workspace) -> None:
    """The five steps, in the scratch workspace `ws`."""
    cache = ws.root / "kernels/kernels.autotune.textproto"

    def first_test() -> str:
        result = ws.run("test", *TESTS, check=False)
        if result.returncode != 3 or HINT not in ws.test_log(TESTS[0]):
            raise _fail("the first test should fail with the regen hint", result)
        return f"fails as it should, no cache yet; the log says `{HINT}`"

    def regen() -> str:
        result = ws.run("run", "//kernels:small_test.regen", check=False)
        line = re.search(r"kernels/kernels\.autotune\.textproto: ok: (.*)", result.output)
        if result.returncode != 0 or not line or not cache.is_file():
            raise _fail(".regen should write the cache", result)
        return f"wrote {cache.relative_to(ws.root)}: {line.group(1)}"

    def load_test() -> str:
        result = ws.run("test", *TESTS, check=False)
        counts = [re.search(r"autotune_cache: (\d+) hits, (\d+) misses, \d+ stale, (\d+) "
                            r"benchmarks", ws.test_log(t)) for t in TESTS]
        if result.returncode != 0 or not all(counts) or any(c.group(3) != "0" for c in counts):
            raise _fail("the tests should pass from the cache with 0 benchmarks", result)
        hits = sum(int(c.group(1)) for c in counts)
        return f"{len(TESTS)} tests pass: {hits} hits, 0 benchmarks"

    kernel = ws.root / "kernels/affine.py"
    original = kernel.read_text()

    def stale() -> str:
        kernel.write_text(original.replace("x * alpha + beta", "beta + x * alpha"))
        result = ws.run("test", TESTS[0], check=False)
        if result.returncode != 3 or HINT not in ws.test_log(TESTS[0]):
            raise _fail("the edited kernel should fail with the regen hint", result)
        return f"kernels/affine.py edited: fails with `{HINT}`"

    def check() -> str:
        result = ws.run("run", "@rules_autotune//tools:regen_cache", "--", "--check", *TESTS,
                        check=False)
        line = re.search(r"kernels/kernels\.autotune\.textproto: would change: (.*)",
                         result.output)
        if result.returncode != 1 or not line:
            raise _fail("regen_cache --check should report the stale cache", result)
        return f"exit 1, kernels.autotune.textproto would change: {line.group(1)}"

    _step(1, "bazel test", first_test)
    _step(2, "bazel run //kernels:small_test.regen", regen)
    _step(3, "bazel test", load_test)
    _step(4, "stale edit, bazel test", stale)
    _step(5, "regen_cache --check", check)


def main() -> int:
    """Sets up the scratch workspace, runs the cycle, stops the Bazel server."""
    bazel = find_bazel()
    if bazel is None:
        print("\ndemo: ruleset cycle skipped: Bazel 4.2.3 (bazel-4) is not installed "
              "(tools/dev.sh setup installs it)")
        return 0
    started = time.perf_counter()
    print("\n== the Bazel ruleset, on Bazel 4.2.3: a scratch copy of e2e/workspace", flush=True)
    with tempfile.TemporaryDirectory(prefix="autotune-demo-bazel-") as tmp:
        base = Path(tmp)
        ws = Workspace.create_e2e(base, base / "output_user_root", bazel)
        try:
            run_cycle(ws)
        finally:
            ws.shutdown()
    print(f"demo: ruleset cycle done in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
