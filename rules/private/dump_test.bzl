"""The dump half of autotuned_py_test: `<name>.dump` (tunes and dumps) and `<name>.regen`."""

load("@rules_python//python:defs.bzl", "py_binary", "py_test")
load(
    ":constants.bzl",
    "CACHE_PATH_TAG_PREFIX",
    "DUMP_TAG",
    "DUMP_TARGET_ENV",
    "DUMP_TARGET_SUFFIX",
    "REGEN_HINT_ENV",
    "REGEN_TARGET_SUFFIX",
    "TEST_MAIN_ENV",
)
load(":env_channel.bzl", "env_and_args")

# py_test attributes that make no sense on the `.dump` target: it is never sharded, a flaky
# retry would hide a failed dump, and tuning takes far longer than loading (its own size and
# timeout come from `dump_size` / `dump_timeout`).
DUMP_DROPPED_KWARGS = ["shard_count", "flaky", "size", "timeout"]

# The tag that records the backend of a `.dump`, so that regen_cache writes a first-time
# placeholder in the right format.
BACKEND_TAG_PREFIX = "autotune_backend="

def autotuned_dump_test(
        name,
        srcs,
        deps,
        data,
        env,
        select_env,
        args,
        location,
        regen_hint,
        label_prefix,
        user_main,
        wrapper,
        backend,
        size,
        timeout,
        exec_properties,
        extra_tags,
        tags,
        **kwargs):
    """Declares `<name>.dump` and `<name>.regen`.

    Args:
      name: the macro's `name`.
      srcs: the user's srcs.
      deps: the user's deps.
      data: the user's data.
      env: the user's env with the dump-mode macro flags already set ({} plus the macro's
        variables when the user's env is a select()).
      select_env: the user's env when it is a select(), else None (env_channel.bzl).
      args: the user's args (a list or a select()).
      location: the resolved cache (cache_location.bzl).
      regen_hint: the command that regenerates the cache.
      label_prefix: "@repo//pkg" of this package ("//pkg" in the main repository).
      user_main: the user's main file.
      wrapper: the Label of rules_autotune_test_wrapper.py.
      backend: "triton" or "xla".
      size: the dump's `size`.
      timeout: the dump's `timeout`.
      exec_properties: the dump's `exec_properties` (e.g. a remote GPU pool); when non-empty
        the dump may run remotely (no `no-remote-exec` tag).
      extra_tags: tags for the dump only (e.g. a remote-execution pool's).
      tags: the user's tags (shared with the load test).
      **kwargs: the remaining py_test attributes, without DUMP_DROPPED_KWARGS.
    """
    dump_env = dict(env)
    dump_env[REGEN_HINT_ENV] = regen_hint
    dump_env[TEST_MAIN_ENV] = "$(rootpath {})".format(user_main)
    dump_env[DUMP_TARGET_ENV] = "{}:{}{}".format(label_prefix, name, DUMP_TARGET_SUFFIX)
    dump_kwargs = dict(kwargs)
    if exec_properties:
        dump_kwargs["exec_properties"] = exec_properties
    locality = [] if exec_properties else ["no-remote-exec"]
    test_env, test_args = env_and_args(dump_env, select_env, args)
    py_test(
        name = name + DUMP_TARGET_SUFFIX,
        srcs = srcs + [wrapper],
        main = wrapper,
        deps = deps,
        data = data + ([location.label] if location.exists else []) + [user_main],
        env = test_env,
        args = test_args,
        shard_count = 1,
        size = size,
        timeout = timeout,
        tags = tags + extra_tags + locality + [
            "manual",
            "external",
            "no-cache",
            DUMP_TAG,
            CACHE_PATH_TAG_PREFIX + location.source_path,
            BACKEND_TAG_PREFIX + backend,
        ],
        **dump_kwargs
    )

    # `.regen` is //tools:regen_cache bound to this one dump target.
    py_binary(
        name = name + REGEN_TARGET_SUFFIX,
        srcs = [Label("//tools:regen_cache.py")],
        main = Label("//tools:regen_cache.py"),
        deps = [Label("//tools:regen_lib")],
        args = ["{}:{}{}".format(label_prefix, name, DUMP_TARGET_SUFFIX)],
        visibility = kwargs.get("visibility"),
        tags = ["manual"],
    )
