"""Entry point that autotuned_py_test puts in front of a test's own main, when needed.

Two jobs, chosen by the environment the macro sets:

- `<name>.dump` (AUTOTUNE_DUMP_TARGET set): a dump must see every kernel in one process, so it
  refuses to run as one of several shards. `--test_sharding_strategy=forced=K` overrides the
  `shard_count = 1` that the macro sets, so this is checked at run time.
- a sharded load test (TEST_TOTAL_SHARDS > 1): a `unittest` main gets Bazel's sharding
  protocol: it runs only this shard's share of the test cases (round-robin over sorted test
  ids) and touches TEST_SHARD_STATUS_FILE. Mains that do not go through `unittest.main()` run
  unchanged and do not claim sharding support.

Then it runs the user's main (AUTOTUNE_TEST_MAIN, a runfiles path) as `__main__`.
Standard library only: this file is also used when rules_autotune is an external repository.
"""

from __future__ import annotations

import os
import runpy
import sys
import unittest
from collections.abc import Iterator, Mapping
from pathlib import Path

# Exit code for a test that cannot run as configured (distinct from a failing test's 1).
EXIT_BAD_SETUP = 2


def _total_shards(env: Mapping[str, str]) -> int:
    """TEST_TOTAL_SHARDS as a number (1 when unset)."""
    raw = env.get("TEST_TOTAL_SHARDS", "") or "1"
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"autotuned test: TEST_TOTAL_SHARDS={raw!r} is not a number.") from None


def sharding_error(env: Mapping[str, str]) -> str | None:
    """The message to print when a `.dump` target runs as one of several shards, else None."""
    target = env.get("AUTOTUNE_DUMP_TARGET")
    total = _total_shards(env)
    if not target or total <= 1:
        return None
    return (
        f"autotune dump: {target} is running as shard {env.get('TEST_SHARD_INDEX', '?')} of "
        f"{total}, but a dump must see every kernel in one process or the written cache would "
        "be incomplete. Sharding was forced from the command line (for example "
        "--test_sharding_strategy=forced=K); rerun without it, or with "
        "--test_sharding_strategy=disabled."
    )


def resolve_main(env: Mapping[str, str]) -> Path:
    """The user's test main from AUTOTUNE_TEST_MAIN (a `$(rootpath)`), checked to exist."""
    raw = env.get("AUTOTUNE_TEST_MAIN", "")
    if not raw:
        raise SystemExit(
            "autotuned test: AUTOTUNE_TEST_MAIN is not set. autotuned_py_test sets it; run the "
            "target through Bazel (bazel test //pkg:name)."
        )
    candidates = [Path(raw)]
    for root in (env.get("TEST_SRCDIR"), env.get("RUNFILES_DIR")):
        if root and env.get("TEST_WORKSPACE"):
            candidates.append(Path(root) / env["TEST_WORKSPACE"] / raw)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise SystemExit(
        f"autotuned test: the test main {raw!r} (AUTOTUNE_TEST_MAIN) is not in the runfiles "
        f"(looked at {', '.join(str(c) for c in candidates)}). Set `main` on the "
        "autotuned_py_test to a file listed in its srcs."
    )


def _flatten(suite: unittest.TestSuite) -> Iterator[unittest.TestCase]:
    """Every test case in a (nested) suite."""
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _flatten(item)
        else:
            yield item


def shard_suite(suite: unittest.TestSuite, index: int, total: int) -> unittest.TestSuite:
    """This shard's share of `suite`: every `total`-th case by sorted test id, from `index`."""
    cases = sorted(_flatten(suite), key=lambda case: case.id())
    return unittest.TestSuite(cases[index::total])


def install_unittest_sharding(env: Mapping[str, str]) -> None:
    """Makes unittest.main() run only this shard's tests and acknowledge Bazel's sharding."""
    total = _total_shards(env)
    if total <= 1:
        return
    index = int(env.get("TEST_SHARD_INDEX", "0"))
    status_file = env.get("TEST_SHARD_STATUS_FILE")
    original = unittest.TestProgram.createTests

    def create_sharded_tests(self: unittest.TestProgram, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        self.test = shard_suite(self.test, index, total)
        if status_file:
            Path(status_file).touch()
        print(f"autotuned test: shard {index + 1} of {total} runs {self.test.countTestCases()} "
              "test case(s)", file=sys.stderr)

    unittest.TestProgram.createTests = create_sharded_tests  # type: ignore[method-assign]


def main() -> None:
    """Checks or installs sharding, then runs the user's main as py_test would have."""
    problem = sharding_error(os.environ)
    if problem:
        print(problem, file=sys.stderr)
        sys.exit(EXIT_BAD_SETUP)
    user_main = resolve_main(os.environ)
    install_unittest_sharding(os.environ)
    # As Python does for a script: its (symlink-resolved) directory first on sys.path.
    sys.path[0] = str(user_main.resolve().parent)
    sys.argv[0] = str(user_main)
    runpy.run_path(str(user_main), run_name="__main__")


if __name__ == "__main__":
    main()
