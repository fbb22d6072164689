"""Builds the AUTOTUNE_FLAGS / XLA_FLAGS values that autotuned_py_test puts in a test's env.

Pure string functions, kept apart from the macro so that the exact flag strings are easy to
read in one place. The integration tests (tests/bazel/) assert these strings byte for byte.
"""

load(":constants.bzl", "DUMP_FILE_NAME", "OUTPUTS_PREFIX")

# Where every `.dump` target writes its results (see constants.bzl).
DUMP_PATH = OUTPUTS_PREFIX + DUMP_FILE_NAME

# Our library's flags (see autotune_cache/config/flags.py).
_LOAD = "--load_autotune_results_from"
_DUMP = "--dump_autotune_results_to"
_REQUIRE = "--require_complete_autotune_results"
_ALL_KERNELS = "--autotune_all_kernels"

# XLA's flags (see docs/architecture.md and shared/BRIEF.md).
_XLA_LOAD = "--xla_gpu_load_autotune_results_from"
_XLA_DUMP = "--xla_gpu_dump_autotune_results_to"
_XLA_REQUIRE = "--xla_gpu_require_complete_aot_autotune_results"
_XLA_PER_FUSION = "--xla_gpu_per_fusion_autotune_cache_dir"

def split_flags(text):
    """Splits a space-separated flag string (as XLA_FLAGS) into tokens, dropping empty ones."""
    text = text.replace("\t", " ").replace("\n", " ")
    return [token for token in text.split(" ") if token]

def _flag_name(token):
    """Returns the `--name` part of a `--name=value` token."""
    return token.split("=", 1)[0]

def _check_not_set(target, env_var, tokens, owned):
    """Fails when the user's own flags already set a flag that the macro owns."""
    for token in tokens:
        if _flag_name(token) in owned:
            fail(("autotuned_py_test(name = \"{target}\"): env[\"{var}\"] already sets {flag}, " +
                  "which the macro sets itself from `cache` (load mode) and for the .dump " +
                  "target. Remove it from env and use the `cache` / `require_complete` " +
                  "attributes instead.").format(target = target, var = env_var, flag = _flag_name(token)))

def autotune_flags(target, user_flags, cache_path, dump, require_complete, all_kernels = False):
    """Returns the AUTOTUNE_FLAGS value for the Triton backend.

    Args:
      target: the macro's `name`, for error messages.
      user_flags: AUTOTUNE_FLAGS the user gave in `env` ("" when none); kept first.
      cache_path: "TEST_WORKSPACE/$(rootpath ...)" of the committed cache, or None when it does not exist yet.
      dump: True for the `.dump` target (dump to the test outputs, never require complete).
      require_complete: add --require_complete_autotune_results (load mode only).
      all_kernels: add --autotune_all_kernels (route every triton.autotune through the cache).

    Returns:
      The space-separated flag string.
    """
    tokens = split_flags(user_flags)
    _check_not_set(target, "AUTOTUNE_FLAGS", tokens, [_DUMP, _REQUIRE])
    loads = []
    kept = []
    for token in tokens:
        if _flag_name(token) == _LOAD:
            loads.append(token.split("=", 1)[1] if "=" in token else "")
        else:
            kept.append(token)
    if cache_path:
        # The committed cache goes last: a key found in several loaded files takes the last one.
        loads.append(cache_path)
    loads = [path for path in loads if path]
    if loads:
        kept.append(_LOAD + "=" + ",".join(loads))
    if dump:
        kept.append(_DUMP + "=" + DUMP_PATH)
    elif require_complete:
        kept.append(_REQUIRE)
    if all_kernels and _ALL_KERNELS not in [_flag_name(token) for token in kept]:
        kept.append(_ALL_KERNELS)
    return " ".join(kept)

def xla_flags(target, user_flags, cache_path, dump, require_complete, per_fusion_cache_dir):
    """Returns the XLA_FLAGS value for the XLA backend.

    Args:
      target: the macro's `name`, for error messages.
      user_flags: XLA_FLAGS the user gave in `env` ("" when none); kept first, unchanged.
      cache_path: "TEST_WORKSPACE/$(rootpath ...)" of the committed cache, or None when it does not exist yet.
      dump: True for the `.dump` target.
      require_complete: add --xla_gpu_require_complete_aot_autotune_results (load mode only).
      per_fusion_cache_dir: value for --xla_gpu_per_fusion_autotune_cache_dir, or None.

    Returns:
      The space-separated flag string.
    """
    tokens = split_flags(user_flags)
    _check_not_set(target, "XLA_FLAGS", tokens, [_XLA_LOAD, _XLA_DUMP, _XLA_REQUIRE, _XLA_PER_FUSION])
    if cache_path:
        tokens.append(_XLA_LOAD + "=" + cache_path)
    if dump:
        tokens.append(_XLA_DUMP + "=" + DUMP_PATH)
    elif require_complete:
        tokens.append(_XLA_REQUIRE)
    if per_fusion_cache_dir:
        tokens.append(_XLA_PER_FUSION + "=" + per_fusion_cache_dir)
    return " ".join(tokens)
