"""The one place the library reads its environment, in the spirit of Triton's `knobs`.

Decision: every environment variable the library reacts to is read here, by name, when it is
needed (never copied at import time), so `monkeypatch.setenv` keeps working and nothing is fixed
before a test can set it. Tests that want a whole environment of their own use `use(mapping)`.
Besides this module only `flags` (AUTOTUNE_FLAGS and its path prefixes, given a mapping from
here) and the Bazel-facing entry points (rules/private/test_main.py,
autotune_cache/xla/jax_test_helper.py) touch the environment.

Variables (the table in docs/architecture.md):
- AUTOTUNE_FLAGS (flags): the flag string, as XLA_FLAGS. Outside the package's modules,
  autotune_cache_all_kernels.pth tests it for `autotune_all_kernels` at interpreter start-up, before
  anything is imported (then triton.routing.startup parses it through flags).
- RULES_AUTOTUNE_MACRO_FLAGS (flags): the flags autotuned_py_test gives its targets, kept apart
  from AUTOTUNE_FLAGS so that `bazel test --test_env=AUTOTUNE_FLAGS=...` adds to them instead of
  replacing them; both apply (flags.flags_text).
- AUTOTUNE_REGEN_HINT (cache messages): the regen command the Bazel macro sets.
- AUTOTUNE_PROGRESS (triton.progress): 1/true/yes/on always, 0/false/no/off never.
- AUTOTUNE_BENCH_LOCK_DIR (triton.benchlock): where the device benchmarking locks live.
- AUTOTUNE_DUMP_RUN (dumpfile): set by the process that starts a dump run, inherited by the
  processes it starts, so that they add to that run's dump instead of starting their own.
- TRITON_PRINT_AUTOTUNING (triton.progress): Triton's switch; 1 means progress always.
- TRITON_INTERPRET (triton.device): the CPU interpreter, for Triton releases without knobs.
- TRITON_CACHE_DIR, TEST_TMPDIR (triton.sandbox): Triton's compile cache inside Bazel tests.
- TEST_TOTAL_SHARDS (cache): a dump refuses to run sharded.
- TEST_UNDECLARED_OUTPUTS_DIR (stats, flags): autotune_report.json; the path prefix.
- TEST_SRCDIR, TEST_WORKSPACE (flags): the TEST_WORKSPACE/ path prefix.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, MutableMapping
from pathlib import Path

from autotune_cache.errors import FlagError

AUTOTUNE_FLAGS = "AUTOTUNE_FLAGS"
RULES_AUTOTUNE_MACRO_FLAGS = "RULES_AUTOTUNE_MACRO_FLAGS"
AUTOTUNE_REGEN_HINT = "AUTOTUNE_REGEN_HINT"
AUTOTUNE_PROGRESS = "AUTOTUNE_PROGRESS"
AUTOTUNE_BENCH_LOCK_DIR = "AUTOTUNE_BENCH_LOCK_DIR"
AUTOTUNE_DUMP_RUN = "AUTOTUNE_DUMP_RUN"
TRITON_PRINT_AUTOTUNING = "TRITON_PRINT_AUTOTUNING"
TRITON_INTERPRET = "TRITON_INTERPRET"
TRITON_CACHE_DIR = "TRITON_CACHE_DIR"
TEST_TMPDIR = "TEST_TMPDIR"
TEST_TOTAL_SHARDS = "TEST_TOTAL_SHARDS"
TEST_UNDECLARED_OUTPUTS_DIR = "TEST_UNDECLARED_OUTPUTS_DIR"

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})

_source: MutableMapping[str, str] | None = None


def environ() -> MutableMapping[str, str]:
    """The mapping read (and, for TRITON_CACHE_DIR, written): os.environ unless `use` swapped it."""
    return os.environ if _source is None else _source


@contextlib.contextmanager
def use(mapping: MutableMapping[str, str]) -> Iterator[MutableMapping[str, str]]:
    """Read `mapping` instead of os.environ inside the block (for tests)."""
    global _source
    previous, _source = _source, mapping
    try:
        yield mapping
    finally:
        _source = previous


def get(name: str, default: str = "") -> str:
    """The variable's value, or `default` when unset."""
    return environ().get(name, default)


def parse_bool(text: str | None) -> bool | None:
    """The one true/false parser: 1/true/yes/on, 0/false/no/off (any case), else None."""
    if text is None:
        return None
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    return None


def progress_mode() -> str:
    """'never', 'always' or 'auto' (quiet until a tuning runs long), from AUTOTUNE_PROGRESS."""
    value = parse_bool(get(AUTOTUNE_PROGRESS))
    if value is False:
        return "never"
    if value is True or get(TRITON_PRINT_AUTOTUNING) == "1":
        return "always"
    return "auto"


def bench_lock_dir() -> Path | None:
    """$AUTOTUNE_BENCH_LOCK_DIR, or None when unset or empty."""
    configured = get(AUTOTUNE_BENCH_LOCK_DIR)
    return Path(configured) if configured else None


def dump_run() -> str:
    """$AUTOTUNE_DUMP_RUN: the run directory of the dump run this process belongs to, or ''."""
    return get(AUTOTUNE_DUMP_RUN).strip()


def set_dump_run(value: str | None) -> None:
    """Set (or, with None, remove) $AUTOTUNE_DUMP_RUN for this process and its children."""
    if value is None:
        environ().pop(AUTOTUNE_DUMP_RUN, None)
    else:
        environ()[AUTOTUNE_DUMP_RUN] = value


def total_shards() -> int:
    """$TEST_TOTAL_SHARDS as Bazel sets it; 1 when unset or empty; FlagError when it is not a
    whole number."""
    value = get(TEST_TOTAL_SHARDS, "1").strip() or "1"
    try:
        return int(value)
    except ValueError:
        raise FlagError(
            f"{TEST_TOTAL_SHARDS}={value}: not a whole number. Bazel sets it to the test's shard "
            "count; unset it, or set it to a number.") from None


def undeclared_outputs_dir() -> Path | None:
    """$TEST_UNDECLARED_OUTPUTS_DIR (`bazel test`'s outputs), or None."""
    value = get(TEST_UNDECLARED_OUTPUTS_DIR)
    return Path(value) if value else None


def regen_hint() -> str:
    """$AUTOTUNE_REGEN_HINT: the command that regenerates the cache, as the macro sets it."""
    return get(AUTOTUNE_REGEN_HINT).strip()


def triton_interpret() -> bool:
    """$TRITON_INTERPRET as a boolean (only for Triton releases without `triton.knobs`)."""
    return bool(parse_bool(get(TRITON_INTERPRET, "0")))
