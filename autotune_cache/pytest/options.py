"""The plugin's options, their ini twins, and how they combine with AUTOTUNE_FLAGS into one
Settings (each option is the twin of one flag, parsed by that flag's own parser).

Also the keys of the dicts pytest-xdist passes between the controller and its workers."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from autotune_cache.config.flags import (
    ENV_VAR,
    FLAGS,
    Settings,
    combine_flags,
    flags_text,
    parse_flags,
    split_flags,
)
from autotune_cache.errors import AutotuneCacheError
from autotune_cache.foundation import env as autotune_env


@dataclass(frozen=True)
class Option:
    """One pytest option and its AUTOTUNE_FLAGS twin ('' for a pytest-only option)."""

    name: str
    twin: str
    dest: str
    metavar: str | None
    help: str


OPTIONS: tuple[Option, ...] = (
    Option("--autotune-load", "load_autotune_results_from", "autotune_load", "PATH[,PATH...]",
           "results files to load; may be repeated, every file is loaded (twin of "
           "AUTOTUNE_FLAGS --load_autotune_results_from)"),
    Option("--autotune-dump", "dump_autotune_results_to", "autotune_dump", "PATH",
           "write the entries this run used or tuned to PATH (merged across xdist workers "
           "and subprocesses) at the end of the run; an existing file keeps the entries the "
           "run could not reproduce (other devices and toolchains, tests not selected); a "
           "PATH that is also loaded and does not exist yet is created (twin of "
           "--dump_autotune_results_to)"),
    Option("--autotune-dump-merge", "autotune_dump_merge", "autotune_dump_merge", None,
           "keep every entry the dump file held that this run did not reproduce, as a run of "
           "a subset of the tests does, also in a full run (twin of --autotune_dump_merge)"),
    Option("--autotune-dump-json", "", "autotune_dump_json", "PATH",
           "also write what the dump did (written, kept by reason, dropped and their kernels) "
           "to PATH as JSON, for scripts (pytest only)"),
    Option("--autotune-all-kernels", "autotune_all_kernels", "autotune_all_kernels", None,
           "route every triton.autotune (third-party libraries' kernels too) through the cache; "
           "libraries imported before pytest configures are named in a warning (twin of "
           "--autotune_all_kernels)"),
    Option("--autotune-cache-dir", "autotune_cache_dir", "autotune_cache_dir", "DIR",
           "per-kernel cache directory (twin of --autotune_cache_dir)"),
    Option("--autotune-require-complete", "require_complete_autotune_results",
           "autotune_require_complete", None,
           "a miss fails the test that launched the kernel and the session, with the "
           "stale-cache message (twin of --require_complete_autotune_results)"),
)
_TWIN_FIELD = {f.name: f.field for f in FLAGS}
assert all(o.twin in _TWIN_FIELD for o in OPTIONS if o.twin)

# Keys of xdist's workerinput / workeroutput dicts.
_PARTIALS_KEY = "autotune_cache_partials"
_SHARED_DIR_KEY = "autotune_cache_shared_dir"
_HELPERS_KEY = "autotune_cache_compile_helpers"  # foundation/compile_helpers.shared()
_OUTPUT_KEY = "autotune_cache"


def option_values(config: pytest.Config, *, early: bool = False) -> dict[str, Any]:
    """Each option's value: the command line's, else the ini file's (None / False if neither);
    --autotune-load adds its files to the ini's. `early`: in pytest_load_initial_conftests,
    before the command line is parsed whole (its options as far as pytest knew them then)."""
    values: dict[str, Any] = {}
    for o in OPTIONS:
        given = (getattr(config.known_args_namespace, o.dest, None) if early
                 else config.getoption(o.dest))
        ini = config.getini(o.dest)
        if o.dest == "autotune_load":
            values[o.dest] = [*([ini] if ini else []), *(given or [])] or None
        elif given not in (None, False):
            values[o.dest] = given
        else:
            values[o.dest] = ini if ini not in ("", None) else (False if o.metavar is None
                                                                else None)
    return values


# ----- options <-> AUTOTUNE_FLAGS ----------------------------------------------------------------


def _flag_tokens(text: str) -> list[tuple[str, str | None]]:
    """(name, value) of each flag of an AUTOTUNE_FLAGS string already accepted by parse_flags."""
    return [(name, value) for _, name, value in split_flags(text)]


def args_from_flags(text: str, env: Mapping[str, str] | None = None) -> list[str]:
    """The plugin options equivalent to the twinned flags of an AUTOTUNE_FLAGS string.

    For a wrapper that runs pytest under Bazel (the autotuned_py_test macro passes its flags in
    AUTOTUNE_FLAGS): `pytest.main([*args_from_flags(<the value of AUTOTUNE_FLAGS>), ...])`
    turns the plugin on with the same settings. AUTOTUNE_FLAGS may stay set: options that repeat
    its values do not conflict. Flags without a twin are left to AUTOTUNE_FLAGS. A malformed
    string raises FlagError with parse_flags' message (paths are resolved against `env`).
    """
    parse_flags(text, env)
    by_twin = {o.twin: o for o in OPTIONS if o.twin}
    values: dict[str, str | None] = {}
    for name, value in _flag_tokens(text):
        if name not in by_twin:
            continue
        if by_twin[name].dest == "autotune_load" and values.get(name):
            # Every --load_autotune_results_from counts, in order, as in parse_flags.
            values[name] = f"{values[name]},{value}"
        else:
            values[name] = value  # parse_flags refused differing repeats of the other flags
    args = []
    for twin, value in values.items():
        option = by_twin[twin]
        if option.metavar is None:
            if value is None or autotune_env.parse_bool(value) is True:
                args.append(option.name)
        else:
            args.append(f"{option.name}={value}")
    return args


def _option_error(option: Option, value: object, error: Exception) -> pytest.UsageError:
    shown = option.name if value is True else f"{option.name}={value}"
    return pytest.UsageError(f"{shown} (the pytest twin of {ENV_VAR} --{option.twin}): {error}")


def resolve_settings(values: Mapping[str, Any], env: Mapping[str, str] | None = None
                     ) -> tuple[Settings, str]:
    """Settings from AUTOTUNE_FLAGS combined with the plugin options `values` (keyed by dest),
    and the combined flags as one AUTOTUNE_FLAGS string (for messages): the options are their
    twins' flags, after AUTOTUNE_FLAGS (config/flags.py combine_flags, the one way sources
    combine). Raises pytest.UsageError for a bad value or a conflict."""
    env = autotune_env.environ() if env is None else env
    try:
        # AUTOTUNE_FLAGS and, under Bazel, the macro's RULES_AUTOTUNE_MACRO_FLAGS.
        env_text = flags_text(env)
        parse_flags(env_text, env)
    except AutotuneCacheError as e:
        raise pytest.UsageError(str(e)) from None
    tokens: list[str] = []
    given: dict[str, tuple[Option, object]] = {}
    for option in OPTIONS:
        value = values.get(option.dest)
        if not option.twin:
            continue  # a pytest-only option: the plugin reads it itself
        if isinstance(value, (list, tuple)):
            value = ",".join(value)  # a repeated --autotune-load loads every file
        if value is None or value is False:
            continue
        token = f"--{option.twin}" if value is True else f"--{option.twin}={value}"
        try:
            parse_flags(token, env)
        except AutotuneCacheError as e:
            raise _option_error(option, value, e) from None
        tokens.append(shlex.quote(token))
        given[option.twin] = (option, value)

    def clash(name: str, theirs: str, token: str) -> Exception:
        option, value = given[name]
        shown = "true" if value is True else value
        return pytest.UsageError(
            f"{option.name}={shown} conflicts with {ENV_VAR} {theirs}: both set --{name}. "
            "Give it in one place only (or the same value in both).")

    combined_text = combine_flags(env_text, " ".join(tokens), env, clash)
    settings = parse_flags(combined_text, env)
    # Relative paths are resolved once, now: a test that chdirs must not move them.
    dump_to = settings.dump_to and settings.dump_to.absolute()
    return replace(settings, load_from=first_dump_loads(settings.load_from, dump_to),
                   cache_dir=settings.cache_dir and settings.cache_dir.absolute(),
                   dump_to=dump_to), combined_text


def first_dump_loads(load_from: tuple[Path, ...], dump_to: Path | None) -> tuple[Path, ...]:
    """The files to load, absolute, without the dump's own path while it does not exist yet:
    the first dump under a setup that loads the file (the ini file's `autotune_load` and
    `autotune_require_complete`) creates it, so `pytest --autotune-dump=FILE` just works."""
    loads = tuple(p.absolute() for p in load_from)
    if dump_to is None:
        return loads
    target = dump_to.resolve()
    return tuple(p for p in loads if p.exists() or p.resolve() != target)
