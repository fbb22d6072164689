"""Names shared by the macro (Starlark) and the tools and library that read its targets (Python).

The Python side keeps its own copies (tools/regen_bazel.py, rules/private/rules_autotune_test_wrapper.py,
autotune_cache/config/flags.py, autotune_cache/xla/jax_test_helper.py); tests/rules/test_constants.py
reads this file and fails when any of them differs, so a rename here cannot silently break
`regen_cache` or the test wrapper.
"""

# The tag that //tools:regen_cache queries to find every load-mode test.
AUTOTUNED_TAG = "autotuned"

# The tag on every `.dump` target.
DUMP_TAG = "autotune_dump"

# Prefix of the `.dump` tag that records the source path of the cache it regenerates (relative
# to the root of the repository that holds the cache).
CACHE_PATH_TAG_PREFIX = "autotune_cache_path="

# Suffixes of the generated targets: `<name>.dump` and `<name>.regen`.
DUMP_TARGET_SUFFIX = ".dump"
REGEN_TARGET_SUFFIX = ".regen"

# The file every `.dump` target writes into TEST_UNDECLARED_OUTPUTS_DIR; //tools:regen_cache
# reads it back from bazel-testlogs/<pkg>/<name>/test.outputs/.
DUMP_FILE_NAME = "autotune_cache.textproto"

# Environment variables the macro sets on its targets.
REGEN_HINT_ENV = "AUTOTUNE_REGEN_HINT"
TEST_MAIN_ENV = "AUTOTUNE_TEST_MAIN"
DUMP_TARGET_ENV = "AUTOTUNE_DUMP_TARGET"
SHARD_TEST_CASES_ENV = "AUTOTUNE_SHARD_TEST_CASES"

# Set to "pytest" on the targets of `runner = "pytest"`: the wrapper then runs the main with
# pytest instead of as `__main__`.
RUNNER_ENV = "AUTOTUNE_TEST_RUNNER"

# When the user's `env` is a select(), the macro cannot add its variables to it (Bazel 4 cannot
# concatenate dict selects), so it passes each as a leading `args` entry
# `--rules_autotune_env=NAME=VALUE`; the test wrapper sets them and drops those arguments before
# the main (or pytest) sees its arguments.
ENV_ARG_PREFIX = "--rules_autotune_env="

# The flag variables: our library's and XLA's.
AUTOTUNE_FLAGS_ENV = "AUTOTUNE_FLAGS"
XLA_FLAGS_ENV = "XLA_FLAGS"

# Where the macro puts its own flags (the committed cache, dump, require-complete, and the user's
# `env` flags), so that `bazel test --test_env=AUTOTUNE_FLAGS=...` (or XLA_FLAGS) adds to them
# instead of replacing them. The library combines AUTOTUNE_FLAGS with its variable
# (autotune_cache/config/flags.py); the test wrapper sets XLA_FLAGS from both before the main runs
# (XLA reads XLA_FLAGS itself), so backend "xla" tests always run through the wrapper.
MACRO_FLAGS_ENV = "RULES_AUTOTUNE_MACRO_FLAGS"
MACRO_XLA_FLAGS_ENV = "RULES_AUTOTUNE_MACRO_XLA_FLAGS"

# The path prefix that both our library and XLA resolve to $TEST_SRCDIR/$TEST_WORKSPACE/: an
# absolute runfiles path, so a test that changes its working directory still finds its cache.
WORKSPACE_PREFIX = "TEST_WORKSPACE/"

# And the one that they resolve to $TEST_UNDECLARED_OUTPUTS_DIR/.
OUTPUTS_PREFIX = "TEST_UNDECLARED_OUTPUTS_DIR/"
