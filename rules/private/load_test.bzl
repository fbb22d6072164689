"""The load-mode half of autotuned_py_test: the `<name>` py_test that loads the committed cache."""

load("@rules_python//python:defs.bzl", "py_test")
load(
    ":constants.bzl",
    "AUTOTUNED_TAG",
    "REGEN_HINT_ENV",
    "SHARD_TEST_CASES_ENV",
    "TEST_MAIN_ENV",
)
load(":env_channel.bzl", "env_and_args")

def autotuned_load_test(
        name,
        srcs,
        deps,
        data,
        env,
        select_env,
        args,
        location,
        regen_hint,
        user_main,
        wrapper,
        shard_test_cases,
        tags,
        **kwargs):
    """Declares `<name>`: the user's test with the committed cache in `data` and the load flags.

    Args:
      name: the macro's `name`.
      srcs: the user's srcs.
      deps: the user's deps.
      data: the user's data (the cache is appended when it exists).
      env: the user's env with the load-mode macro flags already set ({} plus the macro's
        variables when the user's env is a select()).
      select_env: the user's env when it is a select(), else None (env_channel.bzl).
      args: the user's args (a list or a select()).
      location: the resolved cache (cache_location.bzl).
      regen_hint: the command that regenerates the cache, for the miss message.
      user_main: the user's main file (explicit, or the default one).
      wrapper: the Label of rules_autotune_test_wrapper.py.
      shard_test_cases: the macro's `shard_test_cases`.
      tags: the user's tags.
      **kwargs: the remaining py_test attributes.
    """
    load_env = dict(env)
    load_env[REGEN_HINT_ENV] = regen_hint
    load_kwargs = dict(kwargs)
    load_srcs = srcs
    load_data = data + ([location.label] if location.exists else [])

    # The main always runs through the wrapper (autotuned_py_test.bzl says why); sharded, it
    # gives plain unittest mains (and pytest items) Bazel's sharding protocol.
    load_env[TEST_MAIN_ENV] = "$(rootpath {})".format(user_main)
    if not shard_test_cases:
        load_env[SHARD_TEST_CASES_ENV] = "0"
    load_srcs = srcs + [wrapper]
    load_data = load_data + [user_main]
    load_kwargs["main"] = wrapper
    test_env, test_args = env_and_args(load_env, select_env, args)
    py_test(
        name = name,
        srcs = load_srcs,
        deps = deps,
        data = load_data,
        env = test_env,
        args = test_args,
        tags = tags + [AUTOTUNED_TAG],
        **load_kwargs
    )
