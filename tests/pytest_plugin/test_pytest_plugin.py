"""The pytest plugin (autotune_cache/pytest_plugin.py), run as users run it: pytest in a
subprocess (pytester) on test files that launch a kernel. The kernel is tests/pytest_plugin/
fake_kernel.py (the library's cache API with a fake benchmark), so every asserted value is exact;
one slow test uses a real Triton kernel on the interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune_cache import Settings, parse_flags
from autotune_cache.formats import load_results, save_results
from autotune_cache.pytest_plugin import OPTIONS, args_from_flags, resolve_settings
from tests.pytest_plugin import fake_kernel

pytest_plugins = ["pytester"]

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
PLUGIN = ("-p", "autotune_cache.pytest_plugin")

# Four tests over three kernel launches; test_again repeats test_one's key.
SUITE = """
import fake_kernel

def test_one():
    assert fake_kernel.launch("softmax", 1024) == 64

def test_two():
    assert fake_kernel.launch("softmax", 2048) == 64

def test_three():
    assert fake_kernel.launch("matmul", 512) == 64

def test_again():
    assert fake_kernel.launch("softmax", 1024) == 64
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.delenv("AUTOTUNE_FLAGS", raising=False)
    monkeypatch.delenv("AUTOTUNE_REGEN_HINT", raising=False)
    monkeypatch.delenv("TEST_TOTAL_SHARDS", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # this checkout's autotune_cache, also in workers
    pytester.makepyfile(fake_kernel=(HERE / "fake_kernel.py").read_text())
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", *args)


def entries(path: Path) -> list[tuple[str, str, str]]:
    return [(e.key.kernel, e.key.problem, e.key.device.name) for e in load_results(path)]


# ----- inert unless asked ------------------------------------------------------------------------


def test_inert_without_options(suite):
    result = run(suite)
    result.assert_outcomes(passed=4)
    assert "autotune_cache ===" not in result.stdout.str()


def test_entry_point_is_declared_under_the_module_name():
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.entry-points.pytest11]\n", 1)[1].split("\n\n", 1)[0]
    assert section.strip() == '"autotune_cache.pytest_plugin" = "autotune_cache.pytest_plugin"'


# ----- dump, then load ---------------------------------------------------------------------------


def test_dump_then_strict_load(suite):
    dump = suite.path / "out" / "cache.textproto"
    result = run(suite, f"--autotune-dump={dump}")
    result.assert_outcomes(passed=4)
    assert entries(dump) == [("matmul", "N=512,x=float16", "NVIDIA H200"),
                             ("softmax", "N=1024,x=float16", "NVIDIA H200"),
                             ("softmax", "N=2048,x=float16", "NVIDIA H200")]
    result.stdout.fnmatch_lines([
        "*= autotune_cache =*",
        "1 hits, 3 misses (0 stale), 9 benchmarks, saved ~0.0 s of tuning, "
        "spent 6.0 s tuning 3 keys",
        "tests that missed:",
        "  test_suite.py::test_one: softmax [[]N=1024,x=float16[]] on NVIDIA H200 / sm_90 / "
        "132 SMs: new",
        "  test_suite.py::test_three: matmul *: new",
        "  test_suite.py::test_two: softmax *: new",
        f"dump: wrote 3 entries to {dump}; kept 0; dropped 0",
    ])

    result = run(suite, f"--autotune-load={dump}", "--autotune-require-complete")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines([
        "*= autotune_cache =*",
        "4 hits, 0 misses (0 stale), 0 benchmarks, saved ~6.0 s of tuning",
    ])
    assert "tests that missed" not in result.stdout.str()


def test_cache_dir_option_shares_results_between_runs(suite):
    cache_dir = suite.path / "cache"
    run(suite, f"--autotune-cache-dir={cache_dir}").assert_outcomes(passed=4)
    assert len(list(cache_dir.glob("*.textproto"))) == 3
    result = run(suite, f"--autotune-cache-dir={cache_dir}", "--autotune-require-complete")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["4 hits, 0 misses (0 stale), *"])


# ----- strict mode: a miss fails the test that launched the kernel -------------------------------


def committed_cache(path: Path) -> Path:
    """A committed cache that has softmax N=1024 on this device, matmul only for an A100."""
    save_results(path, [fake_kernel.tune(fake_kernel.key("softmax", 1024)),
                        fake_kernel.tune(fake_kernel.key("matmul", 512, fake_kernel.A100))])
    return path


def test_strict_miss_fails_only_the_test_that_launched_the_kernel(suite, monkeypatch):
    cache = committed_cache(suite.path / "committed.textproto")
    suite.makepyfile(test_swallow="""
        import fake_kernel

        def test_catches_everything():
            try:
                fake_kernel.launch("matmul", 512)
            except Exception:
                pass
    """)
    monkeypatch.setenv("AUTOTUNE_REGEN_HINT", "bazel run //kernels:suite.regen")
    result = run(suite, f"--autotune-load={cache}", "--autotune-require-complete")
    result.assert_outcomes(passed=2, failed=3)  # the run went on after the first miss
    out = result.stdout.str()
    failed = sorted(line.split(" ")[1] for line in out.splitlines() if line.startswith("FAILED"))
    assert failed == ["test_suite.py::test_three", "test_suite.py::test_two",
                      "test_swallow.py::test_catches_everything"]
    result.stdout.fnmatch_lines([
        "no tuned result for matmul [[]N=512,x=float16[]] (the cache is stale)",
        "  kernel:    matmul",
        "*The cache is stale: it has this kernel and problem only for",
        "*device [[]NVIDIA A100 / sm_80 / 108 SMs[]] != [[]NVIDIA H200 / sm_90 / 132 SMs[]]*",
        "*Regenerate the cache with:",
        "*bazel run //kernels:suite.regen",
    ])
    assert "the test caught the stale-cache error of a kernel it launched" in out
    # A short failure: the message, not the library's stack and locals (--full-trace has them).
    assert "MissingResultError" not in out and "cache.py:" not in out.split("Captured")[0]
    result.stdout.fnmatch_lines(["FAILED test_suite.py::test_two - Failed: no tuned result for "
                                 "softmax [[]N=2048*"])
    result.stdout.fnmatch_lines([
        "*= autotune_cache =*",
        "2 hits, 3 misses (2 stale), 0 benchmarks, saved ~2.0 s of tuning",
        "tests that missed:",
        "  test_suite.py::test_three: matmul [[]N=512,x=float16[]] on NVIDIA H200 / sm_90 / "
        "132 SMs: stale: device [[]NVIDIA A100 / sm_80 / 108 SMs[]] != "
        "[[]NVIDIA H200 / sm_90 / 132 SMs[]] (failed the test)",
        "  test_suite.py::test_two: softmax [[]N=2048,x=float16[]] *: new (failed the test)",
        "  test_swallow.py::test_catches_everything: matmul *: stale: * (failed the test)",
    ])


def test_strict_miss_in_a_fixture_errors_that_test(suite):
    cache = committed_cache(suite.path / "committed.textproto")
    suite.makepyfile(test_fixture="""
        import pytest, fake_kernel

        @pytest.fixture
        def warmed():
            return fake_kernel.launch("layer_norm", 64)

        def test_uses_fixture(warmed):
            pass

        def test_other():
            assert fake_kernel.launch("softmax", 1024) == 64
    """)
    result = run(suite, "test_fixture.py", f"--autotune-load={cache}",
                 "--autotune-require-complete")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["  test_fixture.py::test_uses_fixture: layer_norm *: new "
                                 "(failed the test)"])


# ----- options and AUTOTUNE_FLAGS ----------------------------------------------------------------


@pytest.mark.parametrize(("env", "args", "message"), [
    ("--dump_autotune_results_to=a.textproto", ["--autotune-dump=b.textproto"],
     "--autotune-dump=b.textproto conflicts with AUTOTUNE_FLAGS "
     "--dump_autotune_results_to=a.textproto: both set --dump_autotune_results_to. Give it in "
     "one place only (or the same value in both)."),
    ("--require_complete_autotune_results=false", ["--autotune-require-complete"],
     "--autotune-require-complete=true conflicts with AUTOTUNE_FLAGS "
     "--require_complete_autotune_results=false: *"),
    ("", ["--autotune-load="],
     "--autotune-load= (the pytest twin of AUTOTUNE_FLAGS --load_autotune_results_from): "
     "--load_autotune_results_from= needs a path."),
    ("", ["--autotune-dump=TEST_UNDECLARED_OUTPUTS_DIR/x.textproto"],
     "*the TEST_UNDECLARED_OUTPUTS_DIR/ prefix needs the TEST_UNDECLARED_OUTPUTS_DIR environment "
     "variable, which `bazel test` sets. Outside Bazel, give a plain path."),
    ("", ["--autotune-load=missing.textproto"],
     "*/missing.textproto: autotune results file does not exist. Generate it with the dump flag *"),
    ("--autotune_cach_dir=x", ["--autotune-require-complete"],
     "AUTOTUNE_FLAGS: unknown flag --autotune_cach_dir."),
])
def test_usage_errors(suite, monkeypatch, env, args, message):
    monkeypatch.setenv("AUTOTUNE_FLAGS", env)
    result = run(suite, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])
    assert "passed" not in result.stdout.str()  # refused before any test ran


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_dump_in_a_sharded_bazel_test_is_a_usage_error(suite, monkeypatch, xdist):
    monkeypatch.setenv("TEST_TOTAL_SHARDS", "3")
    result = run(suite, *xdist, f"--autotune-dump={suite.path / 'd.textproto'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --dump_autotune_results_to=*: this test runs in 3 "
                                 "shards, so no shard sees every result *"])


def test_options_combine_with_autotune_flags(suite, monkeypatch):
    one, two = suite.path / "one.textproto", suite.path / "two.textproto"
    save_results(one, [fake_kernel.tune(fake_kernel.key("softmax", 1024))])
    save_results(two, [fake_kernel.tune(fake_kernel.key("softmax", 2048)),
                       fake_kernel.tune(fake_kernel.key("matmul", 512))])
    dump = suite.path / "dump.textproto"
    # Loads are the union; the same dump path in both places is no conflict.
    monkeypatch.setenv("AUTOTUNE_FLAGS", f"--load_autotune_results_from={one} "
                                         f"--dump_autotune_results_to={dump}")
    # The same dump path spelt relative to the directory pytest runs in.
    result = run(suite, f"--autotune-load={two}", "--autotune-dump=dump.textproto",
                 "--autotune-require-complete")
    result.assert_outcomes(passed=4)
    assert len(load_results(dump)) == 3


def test_resolve_settings_is_the_flags_meaning(tmp_path):
    env = {"AUTOTUNE_FLAGS": "--autotune_cache_mode=read "
                             f"--load_autotune_results_from={tmp_path}/a",
           "TEST_UNDECLARED_OUTPUTS_DIR": str(tmp_path / "outputs")}
    settings, combined = resolve_settings(
        {"autotune_load": f"{tmp_path}/b,{tmp_path}/a",
         "autotune_dump": "TEST_UNDECLARED_OUTPUTS_DIR/d.pb",
         "autotune_cache_dir": None, "autotune_require_complete": True}, env)
    assert settings == Settings(
        cache_mode="read", load_from=(tmp_path / "a", tmp_path / "b"),
        dump_to=tmp_path / "outputs" / "d.pb", require_complete=True)
    # The combined text (shown in messages) means exactly these settings.
    assert parse_flags(combined, env) == settings


def test_args_from_flags_round_trip(tmp_path):
    text = (f"--load_autotune_results_from={tmp_path}/a.textproto,{tmp_path}/b.pb "
            f"--dump_autotune_results_to={tmp_path}/d.textproto --autotune_cache_dir={tmp_path}/c "
            "--require_complete_autotune_results --autotune_compile_workers=3")
    args = args_from_flags(text, {})
    assert args == [f"--autotune-load={tmp_path}/a.textproto,{tmp_path}/b.pb",
                    f"--autotune-dump={tmp_path}/d.textproto",
                    f"--autotune-cache-dir={tmp_path}/c", "--autotune-require-complete"]
    values = {o.dest: None for o in OPTIONS}
    for arg in args:
        name, _, value = arg.partition("=")
        option = next(o for o in OPTIONS if o.name == name)
        values[option.dest] = value or True
    settings, _ = resolve_settings(values, {"AUTOTUNE_FLAGS": text})
    assert settings == parse_flags(text, {})
    assert args_from_flags("--require_complete_autotune_results=false", {}) == []
    # A load flag given twice: both count, in AUTOTUNE_FLAGS and in the options alike.
    twice = "--load_autotune_results_from=a.textproto --load_autotune_results_from=b.textproto"
    assert args_from_flags(twice, {}) == ["--autotune-load=a.textproto,b.textproto"]
    assert parse_flags(twice, {}).load_from == (Path("a.textproto"), Path("b.textproto"))


# ----- pytest-xdist ------------------------------------------------------------------------------


def test_xdist_dump_merges_every_worker_deterministically(suite):
    single = suite.path / "single.textproto"
    run(suite, f"--autotune-dump={single}").assert_outcomes(passed=4)
    # --dist each: every worker launches every kernel, so both tune or read every key.
    each = suite.path / "each.textproto"
    result = run(suite, "-n", "2", "--dist", "each", f"--autotune-dump={each}")
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines([
        "*= autotune_cache =*",
        "* (over 2 xdist workers)",
        f"dump: wrote 3 entries to {each}; kept 0; dropped 0 (summed over 2 xdist workers)",
    ])
    # Each key was tuned once across the workers (they shared a temporary cache directory).
    assert "spent 6.0 s tuning 3 keys" in result.stdout.str()
    load = suite.path / "load.textproto"
    run(suite, "-n", "2", f"--autotune-dump={load}").assert_outcomes(passed=4)
    assert single.read_bytes() == each.read_bytes() == load.read_bytes()
    assert [p.name for p in suite.path.iterdir() if ".xdist-" in p.name] == []  # cleaned up


def test_xdist_dump_keeps_the_faster_of_two_workers_tunings_of_one_key(suite, monkeypatch):
    """Both workers tune every key (read mode: no shared tuning), with noise: the dump is written
    (the run's one merge rule, dumpfile.merge_run), and the summary names the keys tuned twice."""
    monkeypatch.setenv("FAKE_KERNEL_NOISE", "1")
    monkeypatch.setenv("AUTOTUNE_FLAGS", "--autotune_cache_mode=read")  # no shared tuning lock
    dump = suite.path / "dump.textproto"
    result = run(suite, "-n", "2", "--dist", "each", f"--autotune-dump={dump}")
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines([
        f"dump: wrote 3 entries to {dump}; kept 0; dropped 0 (summed over 2 xdist workers)",
        "* key(s) were tuned by more than one worker, with different results; the dump keeps "
        "the faster winner of each: *matmul [[]N=512,x=float16[]] on NVIDIA H200*",
    ])
    assert len(load_results(dump)) == 3
    assert list(suite.path.glob(".dump.textproto.xdist-*")) == []  # merged: nothing left over


def test_xdist_load_with_a_shared_cache_dir(suite):
    committed = committed_cache(suite.path / "committed.textproto")
    cache_dir = suite.path / "shared"
    result = run(suite, "-n", "2", "--dist", "each", f"--autotune-load={committed}",
                 f"--autotune-cache-dir={cache_dir}")
    result.assert_outcomes(passed=8)
    # softmax 2048 and matmul 512 (stale: A100 only) are tuned once, by one of the workers.
    assert "spent 4.0 s tuning 2 keys" in result.stdout.str()
    assert len(list(cache_dir.glob("*.textproto"))) == 2
    result.stdout.fnmatch_lines(["tests that missed:", "*matmul *: stale: device *"])


# ----- a real kernel -----------------------------------------------------------------------------


@pytest.mark.slow
def test_real_triton_kernel_on_the_interpreter(pytester, monkeypatch):
    monkeypatch.delenv("AUTOTUNE_FLAGS", raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_add="""
        import torch, triton, triton.language as tl
        from autotune_cache.triton import autotune

        @autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})],
                  key=["n"])
        @triton.jit
        def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask),
                     mask=mask)

        def add(n):
            x, y = torch.arange(n, dtype=torch.float32), torch.ones(n)
            out = torch.empty(n)
            add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
            assert torch.equal(out, x + 1)

        def test_small():
            add(100)

        def test_large():
            add(1000)
    """)
    dump = pytester.path / "add.textproto"
    run(pytester, f"--autotune-dump={dump}").assert_outcomes(passed=2)
    assert [e.key.problem for e in load_results(dump)] == [
        "n=100,out=float32,x=float32,y=float32", "n=1000,out=float32,x=float32,y=float32"]
    result = run(pytester, f"--autotune-load={dump}", "--autotune-require-complete")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["2 hits, 0 misses (0 stale), 0 benchmarks, *"])
