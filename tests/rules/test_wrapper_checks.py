"""Unit tests of rules/private/rules_autotune_test_checks.py, the checks the test wrapper makes
before the user's main runs: a broken committed cache, a `.dump` run by hand, and a pytest-style
main left as runner "main" (which would pass having run nothing)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHECKS_FILE = REPO / "rules/private/rules_autotune_test_checks.py"
WRAPPER = REPO / "rules/private/rules_autotune_test_wrapper.py"
_spec = importlib.util.spec_from_file_location("rules_autotune_test_checks", CHECKS_FILE)
checks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(checks)

CONFLICTED = b"<<<<<<< HEAD\nversion: 1\n=======\nversion: 1\n>>>>>>> theirs\n"
GOOD = b"version: 1\n"


def _runfiles(tmp_path: Path, data: bytes, name: str = "team/t.autotune.textproto") -> dict:
    """A TEST_SRCDIR with the committed cache in it, and the env a load test gets."""
    path = tmp_path / "runfiles/ws" / name
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    return {"TEST_SRCDIR": str(tmp_path / "runfiles"), "TEST_WORKSPACE": "ws",
            "AUTOTUNE_REGEN_HINT": "bazel run //team:t.regen"}


def test_a_broken_committed_cache_fails_the_load_test_naming_its_path_and_the_command(
        tmp_path: Path) -> None:
    env = {**_runfiles(tmp_path, CONFLICTED), "RULES_AUTOTUNE_MACRO_FLAGS":
           "--load_autotune_results_from=TEST_WORKSPACE/team/t.autotune.textproto "
           "--require_complete_autotune_results"}
    message = checks.check_committed_cache(env)
    assert message == (
        "autotuned test: the committed cache team/t.autotune.textproto is not a readable "
        "results file: line 1 holds an unresolved merge-conflict marker. Regenerate it (the "
        "regen replaces a broken file):\n  bazel run //team:t.regen")


def test_xla_load_tests_get_the_full_check(tmp_path: Path) -> None:
    """On a CPU machine XLA ignores the file, so the wrapper must read it: any damage fails."""
    env = {**_runfiles(tmp_path, b"this is { not a results file", "jx/x.autotune.textproto"),
           "RULES_AUTOTUNE_MACRO_XLA_FLAGS":
           "--xla_gpu_load_autotune_results_from=TEST_WORKSPACE/jx/x.autotune.textproto"}
    message = checks.check_committed_cache(env)
    assert message and message.startswith(
        "autotuned test: the committed cache jx/x.autotune.textproto is not a readable "), message
    assert "bazel run //team:t.regen" in message
    (tmp_path / "runfiles/ws/jx/x.autotune.textproto").write_bytes(GOOD)
    assert checks.check_committed_cache(env) is None


def test_a_dump_does_not_load_a_broken_committed_cache(tmp_path: Path, capsys) -> None:
    env = {**_runfiles(tmp_path, CONFLICTED), "AUTOTUNE_DUMP_TARGET": "//team:t.dump",
           "RULES_AUTOTUNE_MACRO_FLAGS":
           "--load_autotune_results_from=TEST_WORKSPACE/other.textproto,"
           "TEST_WORKSPACE/team/t.autotune.textproto "
           "--dump_autotune_results_to=TEST_UNDECLARED_OUTPUTS_DIR/autotune_cache.textproto"}
    assert checks.check_committed_cache(env) is None
    assert env["RULES_AUTOTUNE_MACRO_FLAGS"] == (
        "--load_autotune_results_from=TEST_WORKSPACE/other.textproto "
        "--dump_autotune_results_to=TEST_UNDECLARED_OUTPUTS_DIR/autotune_cache.textproto")
    err = capsys.readouterr().err
    assert "the committed cache team/t.autotune.textproto is broken" in err
    assert "`bazel run //team:t.regen` replaces it" in err


def test_a_dump_says_where_its_results_go_and_refuses_to_run_without_an_outputs_dir() -> None:
    note, ok = checks.dump_note({"AUTOTUNE_DUMP_TARGET": "//team:t.dump",
                                 "TEST_UNDECLARED_OUTPUTS_DIR": "/x"})
    assert ok and "bazel-testlogs/team/t.dump/test.outputs/" in note
    assert "`bazel run //team:t.regen` runs this dump and writes them" in note
    note, ok = checks.dump_note({"AUTOTUNE_DUMP_TARGET": "//team:t.dump"})
    assert not ok and "results would go nowhere" in note and "bazel run //team:t.regen" in note
    assert checks.dump_note({}) == ("", True)


def test_a_pytest_style_main_is_recognised_and_the_others_are_not() -> None:
    assert checks.uncalled_tests("def test_a():\n    pass\nclass TestB:\n    pass\n") == [
        "test_a", "TestB"]
    for main in ("import unittest\nclass TestB(unittest.TestCase):\n    pass\n"
                 "if __name__ == '__main__':\n    unittest.main()\n",
                 "import pytest\ndef test_a():\n    pass\npytest.main([__file__])\n",
                 "def test_a():\n    pass\ntest_a()\n",
                 "print('a script')\n"):
        assert checks.uncalled_tests(main) == [], main


def test_the_wrapper_fails_a_main_that_defines_tests_and_runs_none(tmp_path: Path) -> None:
    main = tmp_path / "pyt_test.py"
    main.write_text("def test_it():\n    assert False\n")
    env = {**os.environ, "AUTOTUNE_TEST_MAIN": str(main), "TEST_TARGET": "//ml/sub:pyt_test"}
    done = subprocess.run([sys.executable, str(WRAPPER)], env=env, capture_output=True,
                          text=True, check=False, timeout=60)
    assert done.returncode == 2, done.stderr
    assert ("//ml/sub:pyt_test: its main pyt_test.py defines tests (test_it) and runs none of "
            "them") in done.stderr
    assert 'Set `runner = "pytest"`' in done.stderr
