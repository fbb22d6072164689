"""Implementation of autotuned_py_test: a py_test that loads a committed autotuning cache.

The macro turns XLA's three-step test recipe (dump with sharding off, commit, load through
`data` + `env`) into one target family:

- `<name>`: the test in load mode, with the committed cache in `data`;
- `<name>.dump`: the same test dumping every result it used or tuned to
  `TEST_UNDECLARED_OUTPUTS_DIR/autotune_cache.textproto`;
- `<name>.regen`: `bazel run` it to run the dump and write the new cache into the source tree.
"""

load(":cache_location.bzl", "cache_location", "repository_prefix")
load(
    ":constants.bzl",
    "AUTOTUNE_FLAGS_ENV",
    "DUMP_TARGET_ENV",
    "MACRO_FLAGS_ENV",
    "MACRO_XLA_FLAGS_ENV",
    "REGEN_HINT_ENV",
    "REGEN_TARGET_SUFFIX",
    "RUNNER_ENV",
    "SHARD_TEST_CASES_ENV",
    "TEST_MAIN_ENV",
    "XLA_FLAGS_ENV",
)
load(":dump_test.bzl", "DUMP_DROPPED_KWARGS", "autotuned_dump_test")
load(":env_channel.bzl", "is_select")
load(":flags.bzl", "autotune_flags", "xla_flags")
load(":load_test.bzl", "autotuned_load_test")

_BACKENDS = ["triton", "xla"]

# How the main runs: as `__main__` (py_test's way: unittest.main(), absltest, a script), or
# collected and run by pytest (a pytest-style file with no `__main__` block).
_RUNNERS = ["main", "pytest"]

# Variables the macro sets itself; a user value would be silently lost, so it is an error.
_RESERVED_ENV = [
    REGEN_HINT_ENV,
    TEST_MAIN_ENV,
    DUMP_TARGET_ENV,
    SHARD_TEST_CASES_ENV,
    RUNNER_ENV,
    MACRO_FLAGS_ENV,
    MACRO_XLA_FLAGS_ENV,
]

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

def _env_with_flags(name, backend, env, cache_path, dump, require_complete, xla_per_fusion_cache_dir, all_kernels):
    """Returns a copy of the user's env with the macro's flags set for one mode.

    The user's `env` AUTOTUNE_FLAGS / XLA_FLAGS and the macro's own flags go together into
    RULES_AUTOTUNE_MACRO_FLAGS / RULES_AUTOTUNE_MACRO_XLA_FLAGS, never into AUTOTUNE_FLAGS /
    XLA_FLAGS themselves: `bazel test --test_env=AUTOTUNE_FLAGS=...` would replace those, and
    the test would silently stop loading its cache. The library (AUTOTUNE_FLAGS) and the test
    wrapper (XLA_FLAGS) apply both variables, and fail on a flag the two set differently.

    Args:
      name: the macro's `name`.
      backend: "triton" or "xla".
      env: the user's env (a dict; {} when it is a select()).
      cache_path: the cache's flag path, or None when it does not exist yet.
      dump: True for the `.dump` target.
      require_complete: the macro's `require_complete` (load mode only).
      xla_per_fusion_cache_dir: the macro's `xla_per_fusion_cache_dir`.
      all_kernels: the macro's `all_kernels` (backend "triton" only).

    Returns:
      The env dict with the macro's flag variable set.
    """
    result = dict(env)
    if backend == "triton":
        result.pop(AUTOTUNE_FLAGS_ENV, None)
        variable = MACRO_FLAGS_ENV
        value = autotune_flags(
            target = name,
            user_flags = env.get(AUTOTUNE_FLAGS_ENV, ""),
            cache_path = cache_path,
            dump = dump,
            require_complete = require_complete,
            all_kernels = all_kernels,
        )
    else:
        result.pop(XLA_FLAGS_ENV, None)
        variable = MACRO_XLA_FLAGS_ENV
        value = xla_flags(
            target = name,
            user_flags = env.get(XLA_FLAGS_ENV, ""),
            cache_path = cache_path,
            dump = dump,
            require_complete = require_complete,
            per_fusion_cache_dir = xla_per_fusion_cache_dir,
        )

    # An empty flag string would only add noise to the test's env.
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
        runner = "main",
        require_complete = True,
        all_kernels = False,
        xla_per_fusion_cache_dir = None,
        shard_test_cases = True,
        dump_size = "large",
        dump_timeout = "eternal",
        dump_exec_properties = {},
        dump_tags = [],
        **kwargs):
    """A py_test that loads a committed autotuning cache, plus `.dump` and `.regen` targets.

    Generated targets:

    - `<name>`: py_test in load mode (load_test.bzl). `cache` is added to `data`; `env` gets
      `RULES_AUTOTUNE_MACRO_FLAGS=--load_autotune_results_from=TEST_WORKSPACE/$(rootpath
      <cache>)` (backend "triton") or
      `RULES_AUTOTUNE_MACRO_XLA_FLAGS=--xla_gpu_load_autotune_results_from=TEST_WORKSPACE/...`
      (backend "xla"): both resolve the prefix to an absolute path under $TEST_SRCDIR, so the
      test may change its working directory. The flags are not put in AUTOTUNE_FLAGS /
      XLA_FLAGS, which `bazel test --test_env=...` would replace: the library (Triton) and the
      test wrapper (XLA, so these tests always run through it) apply the user's AUTOTUNE_FLAGS /
      XLA_FLAGS first and the macro's after, and fail on a flag both set differently. Plus the require-complete flag when asked, and
      `AUTOTUNE_REGEN_HINT` (`bazel run [@repo]//pkg:<name>.regen`). Tagged "autotuned".
      The main runs through `rules_autotune_test_wrapper.py`, which first checks the
      committed cache (a broken file fails the test with its workspace path and the regen
      command) and, with `runner = "main"`, fails a main that defines tests and runs none.
      Sharding works as configured: with `shard_count > 1` the wrapper gives plain
      `unittest.main()` mains Bazel's sharding protocol (each shard runs every N-th test case by
      id and touches TEST_SHARD_STATUS_FILE); absltest's own sharding is detected and left
      alone. A shard whose main claims no sharding support fails with a message saying so.
      With `runner = "pytest"` the wrapper runs pytest on the main with the macro's flags as
      the autotune_cache plugin's options (and, when sharded, gives each shard every N-th test
      item by sorted node id).
    - `<name>.dump`: the same test dumping to
      `TEST_UNDECLARED_OUTPUTS_DIR/autotune_cache.textproto` (dump_test.bzl). It also loads
      the existing cache, so only new or stale keys are tuned. `shard_count` is 1, its size and
      timeout are `dump_size` / `dump_timeout`, it is tagged `manual`/`external`/`no-cache`
      (and `no-remote-exec` unless `dump_exec_properties` is set), plus `dump_tags`, and it
      fails at run time when `TEST_TOTAL_SHARDS > 1` (`--test_sharding_strategy=forced=k`
      overrides the attribute).
    - `<name>.regen`: `bazel run` it to run the dump (and those of every other test sharing
      the cache file) and write the union of their results to the cache in the source tree,
      printing the entries added, removed and changed.

    If the cache file does not exist yet the targets still build: load mode then runs without a
    load flag (with `require_complete` the first lookup fails and prints the regen hint).

    Args:
      name: name of the load-mode test; also the prefix of `<name>.dump` and `<name>.regen`.
      srcs: Python sources, as for py_test. `main` must be among them; by default it is the
        one whose path ends in `<name>.py` (e.g. `tests/<name>.py`), as for py_test.
      deps: py_test deps. Add `@rules_autotune//:autotune_cache` for the Triton backend.
      data: py_test data (a list or a select()); the cache file is appended.
      env: py_test env. An `AUTOTUNE_FLAGS` / `XLA_FLAGS` value given here is kept and the
        macro's flags are appended, together in RULES_AUTOTUNE_MACRO_FLAGS /
        RULES_AUTOTUNE_MACRO_XLA_FLAGS (see `<name>`); setting a flag the macro owns (load,
        dump, require complete, per-fusion dir) is an error. A select() is accepted, as by
        py_test: it stays the target's env unchanged (its AUTOTUNE_FLAGS / XLA_FLAGS are then
        read as the user's flags at run time, and a macro-owned flag in them is only caught
        when it conflicts), and the macro's own variables reach the test through leading
        `args` that the test wrapper removes (env_channel.bzl).
      cache: the committed results file: a file name relative to this package, or a label
        (string or `Label`) of a source file in the test's own repository; every spelling of
        that repository is accepted (`//`, `@//`, `@@//`, `@<its name>//`). Default
        `<name>.autotune.textproto`. Several tests may share one file: `.regen` writes the
        union of their entries. A file in another package must exist (an empty file is fine,
        and `.regen` creates a missing one) and, under
        `--incompatible_no_implicit_file_export`, be listed in that package's `exports_files`.
      backend: "triton" sets `AUTOTUNE_FLAGS` (our library); "xla" sets `XLA_FLAGS` (XLA's
        own flags, for JAX tests).
      runner: "main" (default) runs the main as `__main__`, as py_test does (`unittest.main()`,
        `absltest.main()` or a script). "pytest" runs it with pytest (a pytest-style file
        with no `__main__` block): the autotune_cache pytest plugin gets the macro's flags
        (a strict miss fails the one test item that missed), `args` are passed to pytest,
        pytest writes `XML_OUTPUT_FILE`, and with `shard_count > 1` each shard runs every
        N-th item by sorted node id. pytest comes from the `@rules_autotune//:pytest` label
        flag (default: the ruleset's hub). A main run as "main" that defines `test*`
        functions or `Test*` classes and runs none of them (no `__name__` check, no call) fails
        with a message that names this attribute.
      require_complete: in load mode a missing result is an error naming the regen command,
        instead of a silent re-tune. Never applied to `.dump`.
      all_kernels: backend "triton" only: route every `triton.autotune` in the test process
        through the cache (third-party kernels too), in both modes. Adds
        `--autotune_all_kernels` to the macro's flags; with `runner = "main"` the test wrapper
        switches the routing on before the main is imported, with `runner = "pytest"` the
        plugin does (its `--autotune-all-kernels`).
      xla_per_fusion_cache_dir: backend "xla" only: passed as
        `--xla_gpu_per_fusion_autotune_cache_dir` in both modes. XLA does not guarantee this
        per-fusion cache works together with the results file; leave it None unless needed.
      shard_test_cases: with `shard_count > 1`, let the wrapper split the `unittest` test
        cases over the shards (default). Set False when the main splits its work itself by
        TEST_SHARD_INDEX / TEST_TOTAL_SHARDS and touches TEST_SHARD_STATUS_FILE; splitting
        both ways would skip most of the work (the shard then fails and says so).
      dump_size: `size` of `<name>.dump` (tuning takes far longer than loading).
      dump_timeout: `timeout` of `<name>.dump`; "eternal" (60 min) by default.
      dump_exec_properties: `exec_properties` of `<name>.dump` only, e.g.
        `{"Pool": "gpu-h100"}` for a remote-execution GPU pool. When set, the dump may run
        remotely (`bazel run //tools:regen_cache -- --bazel_flag=--remote_executor=...`).
      dump_tags: extra tags of `<name>.dump` only (e.g. a pool or `requires-gpu` tag).
      **kwargs: anything else py_test takes (shard_count, size, timeout, tags, args, main,
        visibility, ...). `.dump` gets the same except shard_count, flaky, size and timeout.
        `args` may be a select(), as for py_test.
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
    if all_kernels and backend != "triton":
        fail(("autotuned_py_test(name = \"{}\"): all_kernels = True routes Triton's " +
              "autotuner, and backend = \"{}\" tunes with XLA; drop all_kernels or use " +
              "backend = \"triton\".").format(name, backend))
    if runner not in _RUNNERS:
        fail("autotuned_py_test(name = \"{}\"): runner = \"{}\" is not one of {}.".format(
            name,
            runner,
            ", ".join(_RUNNERS),
        ))

    # A select() env stays the target's env as it is; the macro's variables then go through
    # `args` (env_channel.bzl), so nothing of the user's can be lost and nothing is checked.
    select_env = env if is_select(env) else None
    if select_env != None:
        env = {}
    for reserved in _RESERVED_ENV:
        if reserved in env:
            fail(("autotuned_py_test(name = \"{}\"): env[\"{}\"] is set by the macro; " +
                  "remove it from env.").format(name, reserved))

    location = cache_location(name, cache)
    label_prefix = "{}//{}".format(repository_prefix(location.repository), native.package_name())
    regen_hint = "bazel run {}:{}{}".format(label_prefix, name, REGEN_TARGET_SUFFIX)
    tags = kwargs.pop("tags", [])
    main = kwargs.pop("main", None)
    args = kwargs.pop("args", [])

    # Sharded load tests and every `.dump` run the user's main through the wrapper: it gives
    # unittest mains Bazel's sharding protocol, and refuses sharded dumps. py_test's default
    # main (`<name>.py`) would be `<name>.dump.py` for the dump, so main is always explicit.
    user_main = main if main != None else _default_main(name, srcs)
    wrapper = Label("//rules/private:rules_autotune_test_wrapper.py")
    deps = deps + [Label("//rules/private:test_checks")]
    if runner == "pytest":
        deps = deps + [Label("//rules/private:pytest_runner")]
        env = dict(env)
        env[RUNNER_ENV] = runner

    load_env = _env_with_flags(
        name,
        backend,
        env,
        location.flag_path,
        dump = False,
        require_complete = require_complete,
        xla_per_fusion_cache_dir = xla_per_fusion_cache_dir,
        all_kernels = all_kernels,
    )
    autotuned_load_test(
        name = name,
        srcs = srcs,
        deps = deps,
        data = data,
        env = load_env,
        select_env = select_env,
        args = args,
        location = location,
        regen_hint = regen_hint,
        user_main = user_main,
        wrapper = wrapper,
        # Every load test runs through the wrapper: it checks the committed cache (a broken
        # one fails naming the regen command, where XLA on CPU would ignore it) and fails a
        # main that defines tests and runs none (a pytest-style file left as runner "main").
        # It also sets XLA_FLAGS (backend "xla"), the macro's variables (a select() env) and
        # the routing (all_kernels) before the main runs.
        shard_test_cases = shard_test_cases,
        tags = tags,
        **kwargs
    )
    autotuned_dump_test(
        name = name,
        srcs = srcs,
        deps = deps,
        data = data,
        env = _env_with_flags(
            name,
            backend,
            env,
            location.flag_path,
            dump = True,
            require_complete = False,
            xla_per_fusion_cache_dir = xla_per_fusion_cache_dir,
            all_kernels = all_kernels,
        ),
        select_env = select_env,
        args = args,
        location = location,
        regen_hint = regen_hint,
        label_prefix = label_prefix,
        user_main = user_main,
        wrapper = wrapper,
        backend = backend,
        size = dump_size,
        timeout = dump_timeout,
        exec_properties = dump_exec_properties,
        extra_tags = dump_tags,
        tags = tags,
        **{k: v for k, v in kwargs.items() if k not in DUMP_DROPPED_KWARGS}
    )
