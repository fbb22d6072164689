"""rules_autotune_test_wrapper.py and the flag variables (issue 19): `--test_env=XLA_FLAGS=...`
(or AUTOTUNE_FLAGS with runner = "pytest") must add to the macro's flags, never replace them,
and a flag both set differently fails naming both."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.rules.test_rules_autotune_test_wrapper import WRAPPER, test_main

LOAD = "--xla_gpu_load_autotune_results_from=TEST_WORKSPACE/pkg/t.autotune.textproto"
REQUIRE = "--xla_gpu_require_complete_aot_autotune_results"
MACRO = f"{LOAD} {REQUIRE}"


def test_user_xla_flags_come_first_and_the_macros_follow() -> None:
    env = {"RULES_AUTOTUNE_MACRO_XLA_FLAGS": MACRO, "XLA_FLAGS": "--xla_gpu_autotune_level=4"}
    assert test_main.merge_xla_flags(env) == f"--xla_gpu_autotune_level=4 {MACRO}"
    assert test_main.merge_xla_flags({"RULES_AUTOTUNE_MACRO_XLA_FLAGS": MACRO}) == MACRO
    # The same flag with the same value is no conflict.
    assert test_main.merge_xla_flags({**env, "XLA_FLAGS": REQUIRE}) == f"{REQUIRE} {MACRO}"
    # Not an autotuned test (or a plain py_test): XLA_FLAGS is left alone.
    assert test_main.merge_xla_flags({"XLA_FLAGS": "--xla_dump_to=/tmp/d"}) is None


def test_a_flag_both_set_differently_names_both() -> None:
    env = {"RULES_AUTOTUNE_MACRO_XLA_FLAGS": MACRO,
           "XLA_FLAGS": "--xla_gpu_load_autotune_results_from=/elsewhere.textproto"}
    with pytest.raises(SystemExit) as raised:
        test_main.merge_xla_flags(env)
    message = str(raised.value.code)
    assert "--xla_gpu_load_autotune_results_from is set twice, differently" in message
    assert "'--xla_gpu_load_autotune_results_from=/elsewhere.textproto'" in message
    assert repr(LOAD) in message and "--test_env=XLA_FLAGS" in message


def _run_wrapped(tmp_path: Path, source: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Runs a user main through the wrapper as an unsharded Bazel test would."""
    main = tmp_path / "user_test.py"
    main.write_text(textwrap.dedent(source))
    full_env = {k: v for k, v in os.environ.items()
                if k not in ("XLA_FLAGS", "AUTOTUNE_FLAGS", "TEST_TOTAL_SHARDS")}
    full_env.update({"AUTOTUNE_TEST_MAIN": str(main), "TEST_TMPDIR": str(tmp_path / "tmp"),
                     **env})
    return subprocess.run([sys.executable, str(WRAPPER)], env=full_env, capture_output=True,
                          text=True, check=False, timeout=120)


XLA_MAIN = '''
import os
print("XLA_FLAGS=" + os.environ["XLA_FLAGS"])
print("macro var left:", "RULES_AUTOTUNE_MACRO_XLA_FLAGS" in os.environ)
'''


def test_the_main_sees_one_merged_xla_flags(tmp_path: Path) -> None:
    done = _run_wrapped(tmp_path, XLA_MAIN, {"RULES_AUTOTUNE_MACRO_XLA_FLAGS": MACRO,
                                             "XLA_FLAGS": "--xla_gpu_autotune_level=4"})
    assert done.returncode == 0, done.stderr
    assert f"XLA_FLAGS=--xla_gpu_autotune_level=4 {MACRO}\n" in done.stdout
    assert "macro var left: False" in done.stdout


def test_a_conflicting_xla_flag_stops_the_test_before_its_main(tmp_path: Path) -> None:
    done = _run_wrapped(tmp_path, XLA_MAIN, {"RULES_AUTOTUNE_MACRO_XLA_FLAGS": MACRO,
                                             "XLA_FLAGS": f"{REQUIRE}=false"})
    assert done.returncode != 0
    assert "XLA_FLAGS=" not in done.stdout
    assert f"{REQUIRE} is set twice, differently" in done.stderr, done.stderr


PYTEST_MAIN = '''
import os

def test_flags(request):
    os.makedirs(os.environ["TEST_TMPDIR"], exist_ok=True)
    with open(os.path.join(os.environ["TEST_TMPDIR"], "seen.txt"), "w") as f:
        f.write(os.environ["AUTOTUNE_FLAGS"])
    assert request.config.getoption("autotune_require_complete") is True
'''


def test_pytest_runner_gets_the_users_flags_and_the_macros(tmp_path: Path) -> None:
    env = {"AUTOTUNE_TEST_RUNNER": "pytest",
           "RULES_AUTOTUNE_MACRO_FLAGS": "--require_complete_autotune_results",
           "AUTOTUNE_FLAGS": f"--autotune_cache_dir={tmp_path / 'dir'}"}
    done = _run_wrapped(tmp_path, PYTEST_MAIN, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "tmp/seen.txt").read_text() == (
        f"--autotune_cache_dir={tmp_path / 'dir'} --require_complete_autotune_results")


def test_pytest_runner_refuses_a_conflict_naming_both(tmp_path: Path) -> None:
    env = {"AUTOTUNE_TEST_RUNNER": "pytest",
           "RULES_AUTOTUNE_MACRO_FLAGS": "--require_complete_autotune_results",
           "AUTOTUNE_FLAGS": "--require_complete_autotune_results=false"}
    done = _run_wrapped(tmp_path, PYTEST_MAIN, env)
    assert done.returncode == test_main.EXIT_BAD_SETUP, done.stdout + done.stderr
    assert "--require_complete_autotune_results is set twice, differently" in done.stderr
