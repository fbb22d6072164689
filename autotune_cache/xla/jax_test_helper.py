"""Helpers for JAX tests that load or dump XLA autotune results through XLA_FLAGS.

Works without jax installed (it only reads XLA_FLAGS and error messages):

    from autotune_cache.xla import jax_test_helper

    jax_test_helper.prepare()              # before the first jit: makes dump dirs, checks loads

    with jax_test_helper.stale_cache_errors():
        jitted(x)                          # a require_complete miss becomes StaleXlaCacheError

`prepare()` fixes two sharp edges seen with JAX 0.11.2: XLA fails to dump to
`TEST_UNDECLARED_OUTPUTS_DIR/...` when that directory does not exist yet (`NOT_FOUND ... No such
file or directory`), and a missing load file surfaces only as XLA's FAILED_PRECONDITION at the
first compile. `stale_cache_errors()` turns XLA's `No cached config found for HLO instr` (and the
older `... are required, but no ... found for key`) into our stale-cache message, with the
command from AUTOTUNE_REGEN_HINT that regenerates the committed cache.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from autotune_cache.config.flags import OUTPUTS_PREFIX, WORKSPACE_PREFIX, regen_hint, resolve_path
from autotune_cache.errors import AutotuneCacheError, MissingResultError
from autotune_cache.foundation.env import environ, parse_bool

XLA_FLAGS_ENV = "XLA_FLAGS"
DUMP_FLAG = "xla_gpu_dump_autotune_results_to"
LOAD_FLAG = "xla_gpu_load_autotune_results_from"
REQUIRE_FLAG = "xla_gpu_require_complete_aot_autotune_results"
PER_FUSION_FLAG = "xla_gpu_per_fusion_autotune_cache_dir"
DEFAULT_DUMP = f"{OUTPUTS_PREFIX}autotune_cache.textproto"

# What XLA says when --xla_gpu_require_complete_aot_autotune_results meets an untuned fusion:
# the autotuner of JAX 0.11.x, and the older GEMM / fusion autotuners (legacy format).
_MISS_PATTERNS = (
    re.compile(r"No cached config found for HLO instr:\s*(?P<what>.*)", re.S),
    re.compile(r"autotuning results are required, but no (?:AOT|cache) result\s+"
               r"(?:was )?found for key:\s*(?P<what>.*)", re.S | re.I),
)
_MAX_QUOTE = 400

F = TypeVar("F", bound=Callable[..., object])


class StaleXlaCacheError(MissingResultError):
    """XLA found no loaded autotune result for a fusion, and require_complete forbids tuning."""


class MissingXlaCacheFileError(AutotuneCacheError, FileNotFoundError):
    """--xla_gpu_load_autotune_results_from names a file that does not exist."""


@dataclass(frozen=True)
class XlaAutotuneFlags:
    """The autotune-related flags of one XLA_FLAGS value (the last occurrence of each wins)."""

    dump_to: str | None = None
    load_from: str | None = None
    require_complete: bool = False
    per_fusion_dir: str | None = None


def parse_xla_flags(value: str) -> XlaAutotuneFlags:
    """Pick the autotune flags out of an XLA_FLAGS string; every other flag is ignored."""
    try:
        tokens = shlex.split(value)
    except ValueError:
        tokens = value.split()
    found: dict[str, str | None] = {}
    for token in tokens:
        name, sep, arg = token.lstrip("-").partition("=")
        if token.startswith("--") and name in (DUMP_FLAG, LOAD_FLAG, REQUIRE_FLAG, PER_FUSION_FLAG):
            found[name] = arg if sep else None
    require = found.get(REQUIRE_FLAG, "false")
    return XlaAutotuneFlags(
        dump_to=found.get(DUMP_FLAG) or None,
        load_from=found.get(LOAD_FLAG) or None,
        require_complete=REQUIRE_FLAG in found and (require is None
                                                    or parse_bool(require) is True),
        per_fusion_dir=found.get(PER_FUSION_FLAG) or None,
    )


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return environ() if env is None else env


def resolved(value: str, flag: str, env: Mapping[str, str], *, create_parent: bool) -> Path:
    """A flag's path with XLA's TEST_UNDECLARED_OUTPUTS_DIR/ and TEST_WORKSPACE/ prefixes expanded.

    TEST_WORKSPACE/x means $TEST_SRCDIR/$TEST_WORKSPACE/x, as XLA resolves it.
    """
    if value.startswith((OUTPUTS_PREFIX, WORKSPACE_PREFIX)):
        return resolve_path(value, flag, env, create_parent=create_parent)
    return Path(value)


def prepare(env: Mapping[str, str] | None = None) -> XlaAutotuneFlags:
    """Get the filesystem ready for the XLA_FLAGS of this process; call before the first jit.

    Creates the directory a dump goes to (TEST_UNDECLARED_OUTPUTS_DIR included) and a per-fusion
    cache directory, and checks that a file to load exists, with an error that says how to get
    it. Raises PathPrefixError when a TEST_* prefix is used outside `bazel test`.
    """
    env = _env(env)
    flags = parse_xla_flags(env.get(XLA_FLAGS_ENV, ""))
    if flags.dump_to:
        dump = resolved(flags.dump_to, DUMP_FLAG, env, create_parent=True)
        dump.parent.mkdir(parents=True, exist_ok=True)
    if flags.per_fusion_dir:
        resolved(flags.per_fusion_dir, PER_FUSION_FLAG, env, create_parent=True).mkdir(
            parents=True, exist_ok=True)
    if flags.load_from:
        load = resolved(flags.load_from, LOAD_FLAG, env, create_parent=False)
        if not load.is_file():
            raise MissingXlaCacheFileError(
                f"XLA_FLAGS --{LOAD_FLAG}={flags.load_from}: no such file ({load}). "
                "Add the committed cache to the test's data (the autotuned_py_test macro does), "
                f"or create it: {_regen_text(env)}"
            )
    return flags


def _regen_text(env: Mapping[str, str]) -> str:
    hint = regen_hint(env)
    if hint:
        return hint
    return (f"run the test once on this GPU type with XLA_FLAGS=--{DUMP_FLAG}={DEFAULT_DUMP} "
            "(and sharding disabled), then commit the dumped file")


def stale_cache_message(xla_message: str, env: Mapping[str, str] | None = None) -> str | None:
    """Our stale-cache message for an XLA require-complete miss; None for any other error."""
    for pattern in _MISS_PATTERNS:
        match = pattern.search(xla_message)
        if match:
            break
    else:
        return None
    env = _env(env)
    what = " ".join(match.group("what").split())
    if len(what) > _MAX_QUOTE:
        what = what[:_MAX_QUOTE] + " ..."
    flags = parse_xla_flags(env.get(XLA_FLAGS_ENV, ""))
    loaded = flags.load_from or f"nothing (no --{LOAD_FLAG} in XLA_FLAGS)"
    hint = regen_hint(env)
    lines = [
        "autotune_cache: XLA has no autotune result for a fusion of this test, and "
        f"--{REQUIRE_FLAG} forbids tuning it here.",
        f"  missing: {what}",
        f"  loaded:  {loaded}",
        "The committed cache is stale: the model, the GPU type, or the XLA/JAX version changed "
        "since it was dumped.",
    ]
    if hint:
        lines.append(f"Regenerate the cache with:\n  {hint}")
    else:
        lines.append(f"Regenerate the cache: {_regen_text(env)}.")
    return "\n".join(lines)


def translate(exc: BaseException, env: Mapping[str, str] | None = None
              ) -> StaleXlaCacheError | None:
    """A StaleXlaCacheError for an XLA require-complete miss (any exception type), else None."""
    message = stale_cache_message(str(exc), env)
    return StaleXlaCacheError(message) if message is not None else None


@contextmanager
def stale_cache_errors(env: Mapping[str, str] | None = None) -> Iterator[None]:
    """Re-raise XLA require-complete misses inside the block as StaleXlaCacheError."""
    try:
        yield
    except StaleXlaCacheError:
        raise
    except Exception as e:
        ours = translate(e, env)
        if ours is None:
            raise
        raise ours from e


def translating(fn: F) -> F:
    """Decorator form of stale_cache_errors(), e.g. for test methods."""

    @functools.wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> object:
        with stale_cache_errors():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
