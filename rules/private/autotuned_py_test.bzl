"""Implementation of autotuned_py_test: a py_test that loads a committed autotuning cache.

The macro turns XLA's three-step test recipe (dump with sharding off, commit, load through
`data` + `env`) into one target family:

- `<name>`: the test in load mode, with the committed cache in `data`;
- `<name>.dump`: the same test dumping every result it used or tuned to
  `TEST_UNDECLARED_OUTPUTS_DIR/autotune_cache.textproto`;
- `<name>.regen`: `bazel run` it to run the dump and write the new cache into the source tree.
"""

load("@rules_python//python:defs.bzl", "py_binary", "py_test")
load(":flags.bzl", "autotune_flags", "xla_flags")

# The tag that //tools:regen_cache queries to find every load-mode test.
AUTOTUNED_TAG = "autotuned"

# The tag on every `.dump` target, and the prefix of the tag that records the source path of
# the cache the dump regenerates (relative to the workspace root).
DUMP_TAG = "autotune_dump"
CACHE_PATH_TAG_PREFIX = "autotune_cache_path="

_BACKENDS = ["triton", "xla"]

# Variables the macro sets itself; a user value would be silently lost, so it is an error.
_RESERVED_ENV = [
    "AUTOTUNE_REGEN_HINT",
    "AUTOTUNE_TEST_MAIN",
    "AUTOTUNE_DUMP_TARGET",
    "AUTOTUNE_SHARD_TEST_CASES",
]

# py_test attributes that make no sense on the `.dump` target: it is never sharded and a flaky
# retry would hide a failed dump.
_DUMP_DROPPED_KWARGS = ["shard_count", "flaky"]

def _check_cache_extension(name, path):
    """Fails when the cache file name has no extension, which selects neither format clearly.

    Args:
      name: the macro's `name`.
      path: the cache file's path relative to its package.
    """
    basename = path.split("/")[-1]
    if "." not in basename.lstrip("."):
        fail(("autotuned_py_test(name = \"{name}\"): cache = \"{path}\" has no file " +
              "extension. Name it \"{path}.textproto\" (text, reviewable diffs) or " +
              "\"{path}.pb\" (binary).").format(name = name, path = path))

def _cache_location(name, cache):
    """Resolves the `cache` attribute.

    Args:
      name: the macro's `name`.
      cache: the `cache` attribute: None, a file name relative to this package, or a label.

    Returns:
      struct(label, source_path, exists): the label to put in `data`, the file's path relative
      to the workspace root (where `.regen` writes it), and whether it exists now (a label to
      another package is trusted to exist).
    """
    package = native.package_name()
    if cache == None:
        cache = name + ".autotune.textproto"
    if cache.startswith("@//"):
        cache = cache[1:]
    if cache.startswith("@"):
        fail(("autotuned_py_test(name = \"{name}\"): cache = \"{cache}\" is in another " +
              "repository; .regen can only write caches in this workspace. Copy the file into " +
              "this workspace and point `cache` at it.").format(name = name, cache = cache))
    if cache.startswith("//"):
        cache_package, _, cache_name = cache[2:].partition(":")
        if not cache_name:
            cache_name = cache_package.split("/")[-1]
        if cache_package != package:
            source_path = cache_package + "/" + cache_name if cache_package else cache_name
            _check_cache_extension(name, cache_name)
            return struct(label = cache, source_path = source_path, exists = True)
        cache = cache_name
    relative = cache[1:] if cache.startswith(":") else cache
    _check_cache_extension(name, relative)

    # glob() instead of a plain label, so that a test whose cache has not been generated yet
    # still builds (and, with require_complete, fails with the regen hint).
    exists = len(native.glob([relative], allow_empty = True)) > 0
    return struct(
        label = ":" + relative,
        source_path = package + "/" + relative if package else relative,
        exists = exists,
    )

def _default_main(name, srcs):
    """The src py_test would pick as the main of `name`: the one whose path ends in `<name>.py`.

    Args:
      name: the macro's `name`.
      srcs: the `srcs` attribute.

    Returns:
      The matching entry of `srcs`, as written there.
    """
    if type(srcs) != "list":
        fail(("autotuned_py_test(name = \"{}\"): srcs is not a plain list (a select()?), so " +
              "the main cannot be found; set `main`.").format(name))
    wanted = name + ".py"
    matches = []
    for src in srcs:
        path = str(src)
        if path == wanted or path.endswith("/" + wanted) or path.endswith(":" + wanted):
            matches.append(src)
    if len(matches) != 1:
        fail(("autotuned_py_test(name = \"{}\"): {} of srcs end in \"{}\" ({}); set `main` " +
              "to the test's main file.").format(
            name,
            "none" if not matches else "several",
            wanted,
            ", ".join([str(m) for m in matches]) or "srcs: " + ", ".join([str(s) for s in srcs]),
        ))
    return matches[0]

def _env_with_flags(name, backend, env, cache_path, dump, require_complete, xla_per_fusion_cache_dir):
    """Returns a copy of the user's env with AUTOTUNE_FLAGS or XLA_FLAGS set for one mode."""
    result = dict(env)
    if backend == "triton":
        variable = "AUTOTUNE_FLAGS"
        value = autotune_flags(
            target = name,
            user_flags = env.get("AUTOTUNE_FLAGS", ""),
            cache_path = cache_path,
            dump = dump,
            require_complete = require_complete,
        )
    else:
        variable = "XLA_FLAGS"
        value = xla_flags(
            target = name,
            user_flags = env.get("XLA_FLAGS", ""),
            cache_path = cache_path,
            dump = dump,
            require_complete = require_complete,
            per_fusion_cache_dir = xla_per_fusion_cache_dir,
        )

    # An empty XLA_FLAGS / AUTOTUNE_FLAGS would only add noise to the test's env.
    if value:
        result[variable] = value
    else:
        result.pop(variable, None)
    return result

def autotuned_py_test(
        name,
        srcs,
        deps = [],
        data = [],
        env = {},
        cache = None,
        backend = "triton",
        require_complete = True,
        xla_per_fusion_cache_dir = None,
        shard_test_cases = True,
        **kwargs):
    """A py_test that loads a committed autotuning cache, plus `.dump` and `.regen` targets.

    Generated targets:

    - `<name>`: py_test in load mode. `cache` is added to `data`; `env` gets
      `AUTOTUNE_FLAGS=--load_autotune_results_from=$(rootpath <cache>)` (backend "triton") or
      `XLA_FLAGS=--xla_gpu_load_autotune_results_from=$(rootpath <cache>)` (backend "xla"), plus
      the require-complete flag when asked, and `AUTOTUNE_REGEN_HINT`. Tagged "autotuned".
      Sharding works as configured: with `shard_count > 1` the main runs through
      `test_main.py`, which gives plain `unittest.main()` mains Bazel's sharding protocol (each
      shard runs every N-th test case by id and touches TEST_SHARD_STATUS_FILE); absltest's
      own sharding is detected and left alone. A shard whose main claims no sharding support
      fails with a message saying so.
    - `<name>.dump`: the same test dumping to
      `TEST_UNDECLARED_OUTPUTS_DIR/autotune_cache.textproto`. It also loads the existing cache,
      so only new or stale keys are tuned. `shard_count` is 1, it is tagged
      `manual`/`external`/`no-cache`/`no-remote`, and it fails at run time when
      `TEST_TOTAL_SHARDS > 1` (`--test_sharding_strategy=forced=k` overrides the attribute).
    - `<name>.regen`: `bazel run` it to run the dump and write the result to
      `$BUILD_WORKSPACE_DIRECTORY/<cache path>`, printing the entries added, removed and changed.

    If the cache file does not exist yet the targets still build: load mode then runs without a
    load flag (with `require_complete` the first lookup fails and prints the regen hint).

    Args:
      name: name of the load-mode test; also the prefix of `<name>.dump` and `<name>.regen`.
      srcs: Python sources, as for py_test. `main` must be among them; by default it is the
        one whose path ends in `<name>.py` (e.g. `tests/<name>.py`), as for py_test.
      deps: py_test deps. Add `@rules_autotune//:autotune_cache` for the Triton backend.
      data: py_test data; the cache file is appended.
      env: py_test env. An `AUTOTUNE_FLAGS` / `XLA_FLAGS` value given here is kept and the
        macro's flags are appended; setting a flag the macro owns (load, dump, require
        complete, per-fusion dir) is an error.
      cache: the committed results file: a file name relative to this package or a label of a
        source file in this workspace. Default `<name>.autotune.textproto`.
      backend: "triton" sets `AUTOTUNE_FLAGS` (our library); "xla" sets `XLA_FLAGS` (XLA's
        own flags, for JAX tests).
      require_complete: in load mode a missing result is an error naming the regen command,
        instead of a silent re-tune. Never applied to `.dump`.
      xla_per_fusion_cache_dir: backend "xla" only: passed as
        `--xla_gpu_per_fusion_autotune_cache_dir` in both modes. XLA does not guarantee this
        per-fusion cache works together with the results file; leave it None unless needed.
      shard_test_cases: with `shard_count > 1`, let test_main.py split the `unittest` test
        cases over the shards (default). Set False when the main splits its work itself by
        TEST_SHARD_INDEX / TEST_TOTAL_SHARDS and touches TEST_SHARD_STATUS_FILE; splitting
        both ways would skip most of the work (the shard then fails and says so).
      **kwargs: anything else py_test takes (shard_count, size, timeout, tags, args, main,
        visibility, ...). `.dump` gets the same except shard_count and flaky.
    """
    if backend not in _BACKENDS:
        fail("autotuned_py_test(name = \"{}\"): backend = \"{}\" is not one of {}.".format(
            name,
            backend,
            ", ".join(_BACKENDS),
        ))
    if xla_per_fusion_cache_dir and backend != "xla":
        fail(("autotuned_py_test(name = \"{}\"): xla_per_fusion_cache_dir only applies to " +
              "backend = \"xla\"; for Triton put --autotune_cache_dir=DIR in " +
              "env[\"AUTOTUNE_FLAGS\"].").format(name))
    for reserved in _RESERVED_ENV:
        if reserved in env:
            fail(("autotuned_py_test(name = \"{}\"): env[\"{}\"] is set by the macro; " +
                  "remove it from env.").format(name, reserved))

    location = _cache_location(name, cache)
    cache_data = [location.label] if location.exists else []
    cache_path = "$(rootpath {})".format(location.label) if location.exists else None
    package = native.package_name()
    regen_hint = "bazel run //{}:{}.regen".format(package, name)
    user_tags = kwargs.pop("tags", [])
    main = kwargs.pop("main", None)

    # Sharded load tests and every `.dump` run the user's main through test_main.py: it gives
    # unittest mains Bazel's sharding protocol, and refuses sharded dumps. py_test's default
    # main (`<name>.py`) would be `<name>.dump.py` for the dump, so main is always explicit.
    user_main = main if main != None else _default_main(name, srcs)
    wrapper = Label("//rules/private:test_main.py")

    load_env = _env_with_flags(
        name,
        backend,
        env,
        cache_path,
        dump = False,
        require_complete = require_complete,
        xla_per_fusion_cache_dir = xla_per_fusion_cache_dir,
    )
    load_env["AUTOTUNE_REGEN_HINT"] = regen_hint
    load_kwargs = dict(kwargs)
    load_srcs = srcs
    load_data = data + cache_data
    if (kwargs.get("shard_count") or 0) > 1:
        load_env["AUTOTUNE_TEST_MAIN"] = "$(rootpath {})".format(user_main)
        if not shard_test_cases:
            load_env["AUTOTUNE_SHARD_TEST_CASES"] = "0"
        load_srcs = srcs + [wrapper]
        load_data = load_data + [user_main]
        load_kwargs["main"] = wrapper
    elif main != None:
        load_kwargs["main"] = main
    py_test(
        name = name,
        srcs = load_srcs,
        deps = deps,
        data = load_data,
        env = load_env,
        tags = user_tags + [AUTOTUNED_TAG],
        **load_kwargs
    )

    dump_env = _env_with_flags(
        name,
        backend,
        env,
        cache_path,
        dump = True,
        require_complete = False,
        xla_per_fusion_cache_dir = xla_per_fusion_cache_dir,
    )
    dump_env["AUTOTUNE_REGEN_HINT"] = regen_hint
    dump_env["AUTOTUNE_TEST_MAIN"] = "$(rootpath {})".format(user_main)
    dump_env["AUTOTUNE_DUMP_TARGET"] = "//{}:{}.dump".format(package, name)
    dump_kwargs = {k: v for k, v in kwargs.items() if k not in _DUMP_DROPPED_KWARGS}
    py_test(
        name = name + ".dump",
        srcs = srcs + [wrapper],
        main = wrapper,
        deps = deps,
        data = data + cache_data + [user_main],
        env = dump_env,
        shard_count = 1,
        tags = user_tags + [
            "manual",
            "external",
            "no-cache",
            "no-remote",
            DUMP_TAG,
            CACHE_PATH_TAG_PREFIX + location.source_path,
        ],
        **dump_kwargs
    )

    # `.regen` is //tools:regen_cache bound to this one dump target.
    py_binary(
        name = name + ".regen",
        srcs = [Label("//tools:regen_cache.py")],
        main = Label("//tools:regen_cache.py"),
        deps = [Label("//tools:regen_lib")],
        args = ["//{}:{}.dump".format(package, name)],
        visibility = kwargs.get("visibility"),
        tags = ["manual"],
    )
