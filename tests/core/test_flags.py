"""AUTOTUNE_FLAGS: every flag, both path prefixes, and clear errors for bad input."""

from pathlib import Path

import pytest

from autotune_cache import FlagError, PathPrefixError, Settings, parse_flags
from autotune_cache.config.flags import flags_text, settings_from_env


def test_empty_flags_give_defaults():
    s = parse_flags("", env={})
    assert s == Settings(compile_workers=s.compile_workers)
    assert s.cache_mode == "update" and s.compile_workers >= 1


def test_every_flag(tmp_path):
    s = parse_flags(
        f"--autotune_cache_dir={tmp_path}/d --autotune_cache_mode=read "
        "--load_autotune_results_from=a.textproto,b.pb "
        f"--dump_autotune_results_to={tmp_path}/o.pb "
        "--require_complete_autotune_results --autotune_compile_workers=3", env={})
    assert s.cache_dir == tmp_path / "d"
    assert s.cache_mode == "read"
    assert s.load_from == (Path("a.textproto"), Path("b.pb"))
    assert s.dump_to == tmp_path / "o.pb"
    assert s.require_complete is True and s.compile_workers == 3


@pytest.mark.parametrize("value,expected", [("", True), ("=true", True), ("=1", True),
                                            ("=false", False), ("=0", False)])
def test_boolean_forms(value, expected):
    assert parse_flags(f"--require_complete_autotune_results{value}", env={}).require_complete \
        is expected


@pytest.mark.parametrize("flags,match", [
    ("--xla_gpu_autotune_level=4", "unknown flag --xla_gpu_autotune_level"),
    ("--autotune_cache_mode=write", "must be 'update' or 'read'"),
    ("--autotune_compile_workers=many", "expected a whole number"),
    ("--autotune_compile_workers=0", "must be >= 1"),
    ("--require_complete_autotune_results=maybe", "expected true or false"),
    ("--dump_autotune_results_to", "needs a value"),
    ("autotune_cache_dir=/x", "is not a flag"),
    ("--load_autotune_results_from='a", "cannot split"),
])
def test_bad_flags_are_named_and_valid_flags_listed(flags, match):
    with pytest.raises(FlagError, match=match) as info:
        parse_flags(flags, env={})
    if "cannot split" not in match and ">= 1" not in match:
        assert "--autotune_cache_dir" in str(info.value)
        assert "--require_complete_autotune_results" in str(info.value)


def test_outputs_prefix_resolves_and_creates_the_directory(tmp_path):
    outputs = tmp_path / "missing" / "outputs"
    s = parse_flags("--dump_autotune_results_to=TEST_UNDECLARED_OUTPUTS_DIR/sub/c.textproto",
                    env={"TEST_UNDECLARED_OUTPUTS_DIR": str(outputs)})
    assert s.dump_to == outputs / "sub" / "c.textproto"
    assert outputs.is_dir()


def test_workspace_prefix_resolves_under_srcdir():
    s = parse_flags("--load_autotune_results_from=TEST_WORKSPACE/pkg/c.textproto",
                    env={"TEST_SRCDIR": "/runfiles", "TEST_WORKSPACE": "my_ws"})
    assert s.load_from == (Path("/runfiles/my_ws/pkg/c.textproto"),)


@pytest.mark.parametrize("flags,env,match", [
    ("--dump_autotune_results_to=TEST_UNDECLARED_OUTPUTS_DIR/c.pb", {},
     "needs the TEST_UNDECLARED_OUTPUTS_DIR environment variable"),
    ("--load_autotune_results_from=TEST_WORKSPACE/c.pb", {"TEST_SRCDIR": "/r"},
     "needs TEST_WORKSPACE"),
    ("--load_autotune_results_from=TEST_WORKSPACE/c.pb", {},
     "needs TEST_SRCDIR and TEST_WORKSPACE"),
])
def test_unresolvable_prefix(flags, env, match):
    with pytest.raises(PathPrefixError, match=match):
        parse_flags(flags, env=env)


def test_cache_dir_that_cannot_be_created(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(PathPrefixError, match="cannot create"):
        parse_flags("--autotune_cache_dir=TEST_UNDECLARED_OUTPUTS_DIR/x",
                    env={"TEST_UNDECLARED_OUTPUTS_DIR": str(tmp_path / "file" / "o")})


def test_settings_from_environment_variable(tmp_path):
    s = settings_from_env({"AUTOTUNE_FLAGS": "--autotune_cache_mode=read"})
    assert s.cache_mode == "read"


# ----- the macro's flags (RULES_AUTOTUNE_MACRO_FLAGS) and the user's AUTOTUNE_FLAGS -------------

BAZEL_ENV = {"TEST_SRCDIR": "/runfiles", "TEST_WORKSPACE": "ws"}
MACRO = ("--load_autotune_results_from=TEST_WORKSPACE/pkg/t.autotune.textproto "
         "--require_complete_autotune_results")


def test_test_env_flags_add_to_the_macros_instead_of_replacing_them(tmp_path):
    """`bazel test --test_env=AUTOTUNE_FLAGS=--autotune_cache_dir=...` keeps the committed
    cache loaded and strict (issue 19)."""
    env = {**BAZEL_ENV, "RULES_AUTOTUNE_MACRO_FLAGS": MACRO,
           "AUTOTUNE_FLAGS": f"--autotune_cache_dir={tmp_path}/shared"}
    s = settings_from_env(env)
    assert s.cache_dir == tmp_path / "shared"
    assert s.load_from == (Path("/runfiles/ws/pkg/t.autotune.textproto"),)
    assert s.require_complete is True


def test_the_committed_cache_loads_after_the_users_files():
    env = {**BAZEL_ENV, "RULES_AUTOTUNE_MACRO_FLAGS": MACRO,
           "AUTOTUNE_FLAGS": "--load_autotune_results_from=/extra/seed.textproto"}
    assert settings_from_env(env).load_from == (
        Path("/extra/seed.textproto"), Path("/runfiles/ws/pkg/t.autotune.textproto"))


def test_either_variable_alone_is_used_as_is():
    macro_only = {**BAZEL_ENV, "RULES_AUTOTUNE_MACRO_FLAGS": MACRO}
    assert flags_text(macro_only) == MACRO
    assert flags_text({"AUTOTUNE_FLAGS": "--autotune_cache_mode=read"}) == \
        "--autotune_cache_mode=read"
    assert flags_text({}) == ""


def test_the_same_value_in_both_is_not_a_conflict():
    env = {**BAZEL_ENV, "RULES_AUTOTUNE_MACRO_FLAGS": MACRO,
           "AUTOTUNE_FLAGS": "--require_complete_autotune_results=true"}
    assert settings_from_env(env).require_complete is True


@pytest.mark.parametrize("user,macro,flag", [
    ("--require_complete_autotune_results=false", MACRO, "--require_complete_autotune_results"),
    ("--dump_autotune_results_to=/tmp/elsewhere.textproto",
     "--dump_autotune_results_to=TEST_UNDECLARED_OUTPUTS_DIR/autotune_cache.textproto",
     "--dump_autotune_results_to"),
    ("--autotune_cache_mode=update", "--autotune_cache_mode=read", "--autotune_cache_mode"),
])
def test_a_flag_both_set_differently_fails_naming_both(tmp_path, user, macro, flag):
    env = {**BAZEL_ENV, "TEST_UNDECLARED_OUTPUTS_DIR": str(tmp_path),
           "RULES_AUTOTUNE_MACRO_FLAGS": macro, "AUTOTUNE_FLAGS": user}
    with pytest.raises(FlagError) as raised:
        settings_from_env(env)
    message = str(raised.value)
    assert f"{flag} is set twice, differently" in message
    theirs = next(token for token in macro.split() if token.split("=")[0] == flag)
    assert repr(user) in message and repr(theirs) in message
    assert "--test_env=AUTOTUNE_FLAGS" in message and "RULES_AUTOTUNE_MACRO_FLAGS" in message
