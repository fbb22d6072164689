"""Unit tests of rules/private/rules_autotune_test_wrapper.py: the sharding protocol and the
dump's refusal to shard, in-process and as Bazel runs it (a subprocess per shard)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import unittest
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WRAPPER = REPO / "rules/private/rules_autotune_test_wrapper.py"


def _load_wrapper():
    """rules/private/rules_autotune_test_wrapper.py as a module (it is not in a package)."""
    spec = importlib.util.spec_from_file_location("rules_autotune_test_wrapper", WRAPPER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


test_main = _load_wrapper()


def test_dump_refuses_forced_shards_with_a_clear_message() -> None:
    env = {"AUTOTUNE_DUMP_TARGET": "//pkg:t.dump", "TEST_TOTAL_SHARDS": "4",
           "TEST_SHARD_INDEX": "2"}
    message = test_main.sharding_error(env)
    assert message and "//pkg:t.dump is running as shard 2 of 4" in message
    assert "--test_sharding_strategy=disabled" in message
    assert test_main.sharding_error({**env, "TEST_TOTAL_SHARDS": "1"}) is None
    # A sharded *load* test is fine: only dumps refuse.
    assert test_main.sharding_error({"TEST_TOTAL_SHARDS": "4"}) is None
    with pytest.raises(SystemExit, match="not a number"):
        test_main.sharding_error({**env, "TEST_TOTAL_SHARDS": "x"})


def test_shards_split_unittest_cases_round_robin_by_id() -> None:
    class Many(unittest.TestCase):
        def test_a(self) -> None: ...
        def test_b(self) -> None: ...
        def test_c(self) -> None: ...
        def test_d(self) -> None: ...
        def test_e(self) -> None: ...

    suite = unittest.defaultTestLoader.loadTestsFromTestCase(Many)
    shards = [[c.id().rsplit(".", 1)[1] for c in test_main.shard_suite(suite, i, 3)]
              for i in range(3)]
    assert shards == [["test_a", "test_d"], ["test_b", "test_e"], ["test_c"]]


def test_missing_main_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="Set `main`"):
        test_main.resolve_main({"AUTOTUNE_TEST_MAIN": "pkg/nope.py", "TEST_SRCDIR": str(tmp_path),
                                "TEST_WORKSPACE": "ws"})
    with pytest.raises(SystemExit, match="AUTOTUNE_TEST_MAIN is not set"):
        test_main.resolve_main({})



# --- the wrapper run as Bazel would run it (a subprocess per shard) ----------------------------

TEST_MAIN = WRAPPER

ABSLTEST_LIKE_MAIN = '''
"""Nine cases in two classes, run the way absltest.main() runs them: absltest's _setup_sharding
touches TEST_SHARD_STATUS_FILE, then replaces getTestCaseNames on the loader *instance* with a
filter that deals sorted names round-robin to the shards, then hands the loader to
unittest.TestProgram."""
import itertools, os, sys, unittest

RAN = os.environ["RAN_FILE"]

def _record(self):
    with open(RAN, "a") as f:
        f.write(self.id().split(".", 1)[1] + "\\n")

class A(unittest.TestCase):
    pass

class B(unittest.TestCase):
    pass

for cls, names in ((A, "abcde"), (B, "fghi")):
    for n in names:
        setattr(cls, "test_" + n, _record)
del cls, names, n

def absl_like_main():
    if "TEST_SHARD_STATUS_FILE" in os.environ:
        open(os.environ["TEST_SHARD_STATUS_FILE"], "w").close()
    loader = unittest.TestLoader()
    if "TEST_TOTAL_SHARDS" in os.environ:
        total = int(os.environ["TEST_TOTAL_SHARDS"])
        index = int(os.environ["TEST_SHARD_INDEX"])
        delegate = loader.getTestCaseNames
        buckets = itertools.cycle(range(total))
        def sharded(test_case_class):
            names = delegate(test_case_class)
            mine = [n for n in sorted(names) if next(buckets) == index]
            return [n for n in names if n in mine]
        loader.getTestCaseNames = sharded
    unittest.TestProgram(argv=sys.argv[:1], testLoader=loader)

if __name__ == "__main__":
    absl_like_main()
'''

PLAIN_UNITTEST_MAIN = ABSLTEST_LIKE_MAIN.replace(
    "    absl_like_main()", "    unittest.main()")

SELF_SHARDING_MAIN = '''
import os, unittest

class T(unittest.TestCase):
    def test_all_sizes(self):
        total = int(os.environ.get("TEST_TOTAL_SHARDS", "1"))
        index = int(os.environ.get("TEST_SHARD_INDEX", "0"))
        open(os.environ["TEST_SHARD_STATUS_FILE"], "a").close()
        with open(os.environ["RAN_FILE"], "a") as f:
            for size in range(9)[index::total]:
                f.write(f"size{size}\\n")

if __name__ == "__main__":
    unittest.main()
'''

SCRIPT_MAIN = '''
import os
with open(os.environ["RAN_FILE"], "a") as f:
    f.write("script\\n")
'''


def _run_shards(tmp_path: Path, source: str, total: int = 3,
                extra_env: dict[str, str] | None = None) -> tuple[list[str], list[int], str]:
    """Runs a user main through test_main.py once per shard; returns what ran (one line per
    case), the exit codes, and the stderr of every shard."""
    main = tmp_path / "user_test.py"
    main.write_text(textwrap.dedent(source))
    ran = tmp_path / "ran.txt"
    ran.write_text("")
    codes, errors = [], []
    for index in range(total):
        status = tmp_path / f"status_{index}"
        env = {**os.environ, "AUTOTUNE_TEST_MAIN": str(main), "RAN_FILE": str(ran),
               "TEST_TOTAL_SHARDS": str(total), "TEST_SHARD_INDEX": str(index),
               "TEST_SHARD_STATUS_FILE": str(status), "TEST_TARGET": "//pkg:user_test",
               **(extra_env or {})}
        done = subprocess.run([sys.executable, str(TEST_MAIN)], env=env, capture_output=True,
                              text=True, check=False, timeout=60)
        codes.append(done.returncode)
        errors.append(done.stderr)
        assert done.returncode != 0 or status.exists(), (index, done.stderr)
    return ran.read_text().split(), codes, "\n".join(errors)


def test_absltest_sharding_is_not_split_a_second_time(tmp_path: Path) -> None:
    ran, codes, stderr = _run_shards(tmp_path, ABSLTEST_LIKE_MAIN)
    assert codes == [0, 0, 0], stderr
    # Every one of the nine cases ran exactly once over the three shards.
    assert sorted(ran) == sorted(f"{c}.test_{n}" for c, names in (("A", "abcde"), ("B", "fghi"))
                                 for n in names), ran
    assert "the test framework shards the test cases itself" in stderr


def test_plain_unittest_cases_are_split_over_the_shards(tmp_path: Path) -> None:
    ran, codes, stderr = _run_shards(tmp_path, PLAIN_UNITTEST_MAIN)
    assert codes == [0, 0, 0], stderr
    assert len(ran) == 9 and len(set(ran)) == 9, ran
    assert stderr.count("runs 3 test case(s)") == 3, stderr


def test_a_main_that_splits_its_work_itself_is_refused_unless_declared(tmp_path: Path) -> None:
    ran, codes, stderr = _run_shards(tmp_path, SELF_SHARDING_MAIN)
    # Shard 1 ran the only case, which split its sizes again: a silent skip without the check.
    assert codes[0] == 2 and "Set `shard_test_cases = False`" in stderr, (codes, stderr)
    ran, codes, stderr = _run_shards(tmp_path, SELF_SHARDING_MAIN,
                                     extra_env={"AUTOTUNE_SHARD_TEST_CASES": "0"})
    assert codes == [0, 0, 0], stderr
    assert sorted(ran) == sorted(f"size{i}" for i in range(9)), ran


def test_a_sharded_main_without_sharding_support_fails_clearly(tmp_path: Path) -> None:
    ran, codes, stderr = _run_shards(tmp_path, SCRIPT_MAIN)
    assert codes == [2, 2, 2], stderr
    assert "//pkg:user_test is sharded (shard 1 of 3), but its main did not implement" in stderr
    assert "--incompatible_check_sharding_support" in stderr
    assert ran == ["script"] * 3


ONE_CASE_MAIN = '''
import os, sys, unittest

class One(unittest.TestCase):
    def test_only(self):
        with open(os.environ["RAN_FILE"], "a") as f:
            f.write("only\\n")

if __name__ == "__main__":
    program = unittest.main(exit=False)
    # Python >= 3.12's unittest.main() exits 5 when no test ran; do the same on every version.
    result = program.result
    sys.exit(5 if result.testsRun == 0 else (0 if result.wasSuccessful() else 1))
'''


def test_more_shards_than_test_cases_pass(tmp_path: Path) -> None:
    ran, codes, stderr = _run_shards(tmp_path, ONE_CASE_MAIN)
    assert codes == [0, 0, 0], stderr
    assert ran == ["only"], ran
    assert stderr.count("this shard has no test cases") == 2, stderr


PATH_PROBE_MAIN = '''
import os, sys
with open(os.environ["RAN_FILE"], "w") as f:
    f.write(sys.path[0] + "\\n")
try:
    import undeclared_sibling
except ImportError:
    with open(os.environ["RAN_FILE"], "a") as f:
        f.write("no-sibling\\n")
'''


@pytest.mark.parametrize("safe_path", [False, True])
def test_user_main_gets_its_runfiles_directory_not_the_source_tree(
        tmp_path: Path, safe_path: bool) -> None:
    if safe_path and sys.version_info < (3, 11):
        pytest.skip("safe-path mode (-P) needs Python 3.11")
    source, runfiles = tmp_path / "src/pkg", tmp_path / "runfiles/ws/pkg"
    source.mkdir(parents=True)
    runfiles.mkdir(parents=True)
    (source / "user_test.py").write_text(PATH_PROBE_MAIN)
    (source / "undeclared_sibling.py").write_text("")  # in the source tree, not in runfiles
    (runfiles / "user_test.py").symlink_to(source / "user_test.py")
    ran = tmp_path / "ran.txt"
    env = {**os.environ, "AUTOTUNE_TEST_MAIN": "pkg/user_test.py", "RAN_FILE": str(ran),
           "TEST_SRCDIR": str(tmp_path / "runfiles"), "TEST_WORKSPACE": "ws"}
    env.pop("PYTHONSAFEPATH", None)
    argv = [sys.executable, *(["-P"] if safe_path else []), str(TEST_MAIN)]
    done = subprocess.run(argv, env=env, cwd=tmp_path / "runfiles/ws", capture_output=True,
                          text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    first, sibling = ran.read_text().split()
    assert sibling == "no-sibling"
    if safe_path:
        assert first not in (str(runfiles), str(source), str(TEST_MAIN.parent))
    else:
        assert first == str(runfiles)


# --- runner = "pytest" ---------------------------------------------------------------------------

PYTEST_MAIN = '''
"""Five items in pytest's style (no __main__): each records its node id."""
import os

import pytest


def _record(request):
    with open(os.environ["RAN_FILE"], "a") as f:
        f.write(request.node.nodeid.split("::", 1)[1] + "\\n")


@pytest.mark.parametrize("n", [1, 2, 3])
def test_sizes(request, n):
    _record(request)


def test_plain(request):
    _record(request)


class TestGroup:
    def test_in_class(self, request):
        _record(request)
        assert os.environ.get("FAIL_IN_CLASS") != "1", "asked to fail"
'''

PYTEST_ITEMS = sorted(["test_sizes[1]", "test_sizes[2]", "test_sizes[3]", "test_plain",
                       "TestGroup::test_in_class"])
PYTEST_ENV = {"AUTOTUNE_TEST_RUNNER": "pytest", "PYTHONPATH": str(REPO)}


def test_pytest_items_are_dealt_round_robin_by_node_id() -> None:
    class Item:
        def __init__(self, nodeid: str) -> None:
            self.nodeid = nodeid

    items = [Item(n) for n in ("t.py::c", "t.py::a", "t.py::e", "t.py::b", "t.py::d")]
    shares = [test_main.shard_items(items, index, 3) for index in range(3)]
    assert [[i.nodeid for i in mine] for mine, _ in shares] == [
        ["t.py::a", "t.py::d"], ["t.py::e", "t.py::b"], ["t.py::c"]]  # pytest's order kept
    assert all(len(mine) + len(rest) == 5 for mine, rest in shares)


def test_pytest_args_follow_the_bazel_test_environment() -> None:
    env = {"XML_OUTPUT_FILE": "/out/test.xml", "TEST_TMPDIR": "/tmp/t",
           "TESTBRIDGE_TEST_ONLY": "sizes", "TESTBRIDGE_TEST_RUNNER_FAIL_FAST": "1"}
    args = test_main.pytest_args(Path("pkg/t_test.py"), env, ["-v"], ["--autotune-load=c.pb"])
    assert args[:4] == ["pkg/t_test.py", "-p", "autotune_cache.pytest_plugin",
                        "--autotune-load=c.pb"]
    for expected in ("--junitxml=/out/test.xml", "--basetemp=/tmp/t/pytest", "--exitfirst",
                     "no:cacheprovider"):
        assert expected in args, args
    assert args[args.index("-k") + 1] == "sizes"
    assert args[-1] == "-v"  # the target's `args` come last, so they may override
    bare = test_main.pytest_args(Path("t.py"), {}, [], [])
    assert not any(a.startswith(("--junitxml", "--basetemp", "--exitfirst", "-k")) for a in bare)


def test_pytest_file_runs_every_item_once_over_the_shards(tmp_path: Path) -> None:
    ran, codes, stderr = _run_shards(tmp_path, PYTEST_MAIN, extra_env=PYTEST_ENV)
    assert codes == [0, 0, 0], stderr
    assert sorted(ran) == PYTEST_ITEMS, ran
    assert "shard 1 of 3 runs 2 of 5 test item(s)" in stderr, stderr
    assert "PytestAssertRewriteWarning" not in stderr


def test_pytest_empty_shard_passes_and_a_failure_fails_its_shard(tmp_path: Path) -> None:
    ran, codes, stderr = _run_shards(tmp_path, PYTEST_MAIN, total=6,
                                     extra_env={**PYTEST_ENV, "FAIL_IN_CLASS": "1"})
    assert sorted(ran) == PYTEST_ITEMS, ran
    # Sorted ids: TestGroup::test_in_class is first, so shard 1 fails; shard 6 is empty and
    # passes.
    assert codes == [1, 0, 0, 0, 0, 0], stderr
    assert "this shard has no test items" in stderr


def test_pytest_file_without_sharding_runs_everything(tmp_path: Path) -> None:
    main = tmp_path / "user_test.py"
    main.write_text(textwrap.dedent(PYTEST_MAIN))
    ran = tmp_path / "ran.txt"
    xml = tmp_path / "test.xml"
    env = {**os.environ, **PYTEST_ENV, "AUTOTUNE_TEST_MAIN": str(main), "RAN_FILE": str(ran),
           "XML_OUTPUT_FILE": str(xml), "TEST_TMPDIR": str(tmp_path / "tmp")}
    done = subprocess.run([sys.executable, str(TEST_MAIN)], env=env, capture_output=True,
                          text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(ran.read_text().split()) == PYTEST_ITEMS
    assert xml.read_text().count("<testcase ") == 5
    assert "5 passed" in done.stdout


def test_pytest_without_the_wrappers_split_must_claim_sharding(tmp_path: Path) -> None:
    """shard_test_cases = False: items are not dealt out, and a shard whose tests never touch
    TEST_SHARD_STATUS_FILE fails, naming the attribute."""
    ran, codes, stderr = _run_shards(tmp_path, PYTEST_MAIN, total=2,
                                     extra_env={**PYTEST_ENV, "AUTOTUNE_SHARD_TEST_CASES": "0"})
    assert sorted(ran) == sorted(PYTEST_ITEMS * 2), ran  # every shard ran everything
    assert codes == [2, 2], stderr
    assert 'runner = "pytest" and shard_test_cases = False' in stderr, stderr


# ----- env = select(...): the macro's variables arrive as leading arguments (issue 19, 6) -------


def test_leading_env_arguments_are_set_and_removed() -> None:
    environ: dict[str, str] = {"KEEP": "1"}
    argv = ["wrapper.py", "--rules_autotune_env=AUTOTUNE_REGEN_HINT=bazel run //p:t.regen",
            "--rules_autotune_env=EMPTY=", "--user-flag", "--rules_autotune_env=LATE=x"]
    rest = test_main.apply_env_arguments(argv, environ)
    assert environ == {"KEEP": "1", "AUTOTUNE_REGEN_HINT": "bazel run //p:t.regen",
                       "EMPTY": ""}
    # Only the leading ones are the macro's: a user argument and what follows it are kept.
    assert rest == ["wrapper.py", "--user-flag", "--rules_autotune_env=LATE=x"]


def test_a_malformed_env_argument_is_refused_by_name() -> None:
    with pytest.raises(SystemExit, match="malformed --rules_autotune_env=NAME=VALUE argument"):
        test_main.apply_env_arguments(["w.py", "--rules_autotune_env=NOVALUE"], {})


def test_all_kernels_is_read_from_either_flag_variable() -> None:
    assert test_main.wants_all_kernels(
        {"RULES_AUTOTUNE_MACRO_FLAGS": "--load_autotune_results_from=x --autotune_all_kernels"})
    assert test_main.wants_all_kernels({"AUTOTUNE_FLAGS": "--autotune_all_kernels=true"})
    assert not test_main.wants_all_kernels({"AUTOTUNE_FLAGS": "--autotune_all_kernels=false"})
    assert not test_main.wants_all_kernels({"AUTOTUNE_FLAGS": "--autotune_all_kernels_x"})
    assert not test_main.wants_all_kernels({})


# --- a main that sets TRITON_INTERPRET itself ---------------------------------------------------

INTERPRET_MAIN = '''
"""As examples/triton/example_env.py does: the interpreter when there is no GPU, set in code."""
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 8})], key=["n"])
@triton.jit
def row_max(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr, tl.max(tl.load(x_ptr + offsets, mask=offsets < n, other=0.0), axis=0))


from autotune_cache.triton import routing

out = torch.zeros(1)
row_max[(1,)](torch.arange(8, dtype=torch.float32), out, 8)
assert out.item() == 7.0, out
if os.environ.get("EXPECT_ROUTED"):  # routed from the main's own import of Triton
    assert isinstance(row_max, routing.Autotuner), type(row_max)
'''


@pytest.mark.parametrize("flags", ["--autotune_all_kernels", "--require_complete_autotune_results"])
def test_a_main_setting_triton_interpret_itself_runs_under_the_switch_and_the_watch(
        tmp_path: Path, flags: str) -> None:
    """The wrapper once imported Triton before the main (to route or to watch), so the main's
    own TRITON_INTERPRET came too late: `tl.max` failed with "Cannot call @triton.jit'd outside
    of the scope of a kernel". Nothing outside the test's environment exports the variable."""
    runfiles = tmp_path / "runfiles/ws/pkg"
    runfiles.mkdir(parents=True)
    (runfiles / "interpret_test.py").write_text(INTERPRET_MAIN)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "AUTOTUNE_"))}
    env.update({"AUTOTUNE_TEST_MAIN": "pkg/interpret_test.py",
                "TEST_SRCDIR": str(tmp_path / "runfiles"), "TEST_WORKSPACE": "ws",
                "RULES_AUTOTUNE_MACRO_FLAGS": flags,
                "TRITON_CACHE_DIR": str(tmp_path / "triton-cache"),
                "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    if "all_kernels" in flags:
        env["EXPECT_ROUTED"] = "1"
    done = subprocess.run([sys.executable, str(TEST_MAIN)], env=env, cwd=tmp_path / "runfiles/ws",
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "outside of the scope of a kernel" not in done.stderr
