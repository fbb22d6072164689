"""The JAX test helper, with fake XLA errors: no jax needed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from autotune_cache import MissingResultError, PathPrefixError
from autotune_cache.xla import jax_test_helper as h

HINT = "bazel run //examples/jax:matmul_chain_test.regen"
MISS = ("NOT_FOUND: No cached config found for HLO instr: %gemm_fusion_dot.1 = bf16[1024,1024]"
        "{1,0} fusion(bf16[1024,512]{1,0} %p0, bf16[512,1024]{1,0} %p1), kind=kCustom, "
        "calls=%gemm_fusion_dot.1_computation")
LEGACY_MISS = ("NOT_FOUND: Complete XLA AOT autotuning results are required, but no AOT result "
               "was found for key: <key model='CUDA: 9.0, Cores: 132', hlo='(dot)', version=52>")


class XlaRuntimeError(RuntimeError):
    """Stands in for jax's JaxRuntimeError / jaxlib's XlaRuntimeError."""


def env(**extra: str) -> dict[str, str]:
    return {"XLA_FLAGS": f"--xla_gpu_load_autotune_results_from=cache.textproto "
                         f"--{h.REQUIRE_FLAG}", **extra}


def test_importable_without_jax():
    code = ("import sys; sys.modules['jax'] = None; sys.modules['jaxlib'] = None\n"
            "from autotune_cache.xla import jax_test_helper\n"
            "assert 'jax' not in {m for m in sys.modules if sys.modules[m] is not None}")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_parse_xla_flags_picks_autotune_flags():
    flags = h.parse_xla_flags(
        "--xla_gpu_autotune_level=4 --xla_gpu_dump_autotune_results_to=a.txt "
        "--xla_gpu_load_autotune_results_from='TEST_WORKSPACE/x y.textproto' "
        "--xla_gpu_require_complete_aot_autotune_results=false "
        "--xla_gpu_per_fusion_autotune_cache_dir=/tmp/c --xla_gpu_dump_autotune_results_to=b.pb")
    assert flags == h.XlaAutotuneFlags(dump_to="b.pb", load_from="TEST_WORKSPACE/x y.textproto",
                                       require_complete=False, per_fusion_dir="/tmp/c")
    assert h.parse_xla_flags(f"--{h.REQUIRE_FLAG}").require_complete
    assert h.parse_xla_flags(f"--{h.REQUIRE_FLAG}=true").require_complete
    assert h.parse_xla_flags("") == h.XlaAutotuneFlags()


def test_prepare_creates_the_outputs_dir(tmp_path):
    outputs = tmp_path / "not" / "yet"
    e = {"XLA_FLAGS": f"--{h.DUMP_FLAG}=TEST_UNDECLARED_OUTPUTS_DIR/sub/cache.textproto",
         "TEST_UNDECLARED_OUTPUTS_DIR": str(outputs)}
    flags = h.prepare(e)
    assert (outputs / "sub").is_dir() and flags.dump_to.endswith("cache.textproto")


def test_prepare_creates_plain_dump_and_per_fusion_dirs(tmp_path):
    e = {"XLA_FLAGS": f"--{h.DUMP_FLAG}={tmp_path}/a/b.pb --{h.PER_FUSION_FLAG}={tmp_path}/pf"}
    h.prepare(e)
    assert (tmp_path / "a").is_dir() and (tmp_path / "pf").is_dir()


def test_prepare_outside_bazel_says_what_is_wrong():
    with pytest.raises(PathPrefixError, match="TEST_UNDECLARED_OUTPUTS_DIR environment"):
        h.prepare({"XLA_FLAGS": f"--{h.DUMP_FLAG}={h.DEFAULT_DUMP}"})


def test_prepare_checks_the_load_file(tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "c.textproto").write_text("")
    ok = {"XLA_FLAGS": f"--{h.LOAD_FLAG}=TEST_WORKSPACE/c.textproto",
          "TEST_SRCDIR": str(tmp_path), "TEST_WORKSPACE": "ws"}
    assert h.prepare(ok).load_from == "TEST_WORKSPACE/c.textproto"
    missing = {"XLA_FLAGS": f"--{h.LOAD_FLAG}={tmp_path}/nope.textproto",
               "AUTOTUNE_REGEN_HINT": HINT}
    with pytest.raises(h.MissingXlaCacheFileError, match="nope.textproto") as e:
        h.prepare(missing)
    assert HINT in str(e.value) and isinstance(e.value, FileNotFoundError)


@pytest.mark.parametrize("xla", [MISS, LEGACY_MISS], ids=["new", "legacy"])
def test_miss_becomes_stale_cache_error_with_hint(xla):
    with pytest.raises(h.StaleXlaCacheError) as e, h.stale_cache_errors(env(
            AUTOTUNE_REGEN_HINT=HINT)):
        raise XlaRuntimeError(xla)
    text = str(e.value)
    assert text.startswith("autotune_cache: XLA has no autotune result")
    assert "loaded:  cache.textproto" in text and "stale" in text
    assert f"Regenerate the cache with:\n  {HINT}" in text
    assert isinstance(e.value, MissingResultError)
    assert isinstance(e.value.__cause__, XlaRuntimeError)


def test_miss_without_hint_explains_the_dump_recipe():
    message = h.stale_cache_message(MISS, {"XLA_FLAGS": ""})
    assert "no --xla_gpu_load_autotune_results_from" in message
    assert f"--{h.DUMP_FLAG}=TEST_UNDECLARED_OUTPUTS_DIR/autotune_cache.textproto" in message


def test_long_hlo_is_shortened():
    message = h.stale_cache_message(MISS + " x" * 1000, env())
    assert len(message) < 1200 and " ..." in message


def test_other_errors_pass_through_unchanged():
    err = XlaRuntimeError("RESOURCE_EXHAUSTED: out of memory")
    with pytest.raises(XlaRuntimeError) as e, h.stale_cache_errors(env()):
        raise err
    assert e.value is err
    assert h.translate(ValueError("nothing to see")) is None


def test_decorator():
    @h.translating
    def compile_it():
        raise XlaRuntimeError(MISS)

    with pytest.raises(h.StaleXlaCacheError):
        compile_it()
    assert h.translating(lambda x: x + 1)(1) == 2
