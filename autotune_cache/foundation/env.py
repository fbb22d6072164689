"""The one place the library reads its environment, in the spirit of Triton's `knobs`.

Every environment variable the library reacts to is listed in `VARIABLES` (from which
docs/reference.md's table is generated) and read here, by name, when it is needed, never copied at
import time: `monkeypatch.setenv` works, and `use(mapping)` swaps in a whole environment. No
other module of autotune_cache/ reads `os.environ` or `os.getenv`: `flags` and the JAX helper take
the mapping `environ()` returns (only the Bazel test wrapper, rules/private/, and the `.pth`
start-up hook, which run before the library is imported, read it themselves);
tests/core/test_structure.py checks it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from autotune_cache.errors import FlagError

AUTOTUNE_FLAGS = "AUTOTUNE_FLAGS"
RULES_AUTOTUNE_MACRO_FLAGS = "RULES_AUTOTUNE_MACRO_FLAGS"
AUTOTUNE_REGEN_HINT = "AUTOTUNE_REGEN_HINT"
AUTOTUNE_PROGRESS = "AUTOTUNE_PROGRESS"
AUTOTUNE_VERBOSE = "AUTOTUNE_VERBOSE"
AUTOTUNE_REMOTE_COMPILE_KEY = "AUTOTUNE_REMOTE_COMPILE_KEY"
AUTOTUNE_BENCH_LOCK_DIR = "AUTOTUNE_BENCH_LOCK_DIR"
AUTOTUNE_DUMP_RUN = "AUTOTUNE_DUMP_RUN"
TRITON_PRINT_AUTOTUNING = "TRITON_PRINT_AUTOTUNING"
TRITON_INTERPRET = "TRITON_INTERPRET"
TRITON_CACHE_DIR = "TRITON_CACHE_DIR"
TRITON_CACHE_MANAGER = "TRITON_CACHE_MANAGER"
TRITON_REMOTE_CACHE_BACKEND = "TRITON_REMOTE_CACHE_BACKEND"
TEST_TMPDIR = "TEST_TMPDIR"
TEST_TOTAL_SHARDS = "TEST_TOTAL_SHARDS"
TEST_UNDECLARED_OUTPUTS_DIR = "TEST_UNDECLARED_OUTPUTS_DIR"
TEST_SRCDIR = "TEST_SRCDIR"
TEST_WORKSPACE = "TEST_WORKSPACE"
PYTEST_XDIST_WORKER = "PYTEST_XDIST_WORKER"
PYTEST_XDIST_WORKER_COUNT = "PYTEST_XDIST_WORKER_COUNT"


@dataclass(frozen=True)
class Variable:
    """One environment variable: who sets it, which modules read it, what it means (markdown,
    links relative to docs/). tools/gen_reference.py writes docs/reference.md's table from these."""

    name: str
    set_by: str
    read_by: str
    meaning: str


VARIABLES: tuple[Variable, ...] = (
    Variable(AUTOTUNE_FLAGS, "you", "config.flags; `autotune_cache_all_kernels.pth`",
             "space-separated flags, like `XLA_FLAGS` ([the table above](#flags)); the `.pth` "
             "start-up hook only tests it for `--autotune_all_kernels` and "
             "`--require_complete_autotune_results` before importing anything"),
    Variable(RULES_AUTOTUNE_MACRO_FLAGS, "the Bazel macro", "config.flags",
             "the macro's flags (committed cache, require-complete or dump, your `env` flags); "
             "they apply after `AUTOTUNE_FLAGS`, so `--test_env=AUTOTUNE_FLAGS=…` adds to them, "
             "and a flag both set differently is an error naming both "
             "([bazel.md](bazel.md#flags-exactly))"),
    Variable(AUTOTUNE_REGEN_HINT, "the Bazel macro", "cache",
             "the command a missing or stale result's message tells you to run "
             "(`bazel run //pkg:t.regen`)"),
    Variable(AUTOTUNE_VERBOSE, "you (the Bazel test wrapper sets `1`)", "store.stats",
             "`1`: print the one-line summary at exit (hits, misses, benchmarks, what bypassed "
             "the cache) even with no flags; `0`: never print it. Unset: printed only when "
             "the process was configured (flags, or `configure()`), as `triton.autotune` is "
             "silent unless `TRITON_PRINT_AUTOTUNING` asks ([cache.md](cache.md))"),
    Variable(AUTOTUNE_REMOTE_COMPILE_KEY, "you (your CI's secret store)",
             "triton.remote_compile",
             "the secret (at least 32 characters, the same on every machine of the fleet) that "
             "authenticates each compiled kernel on the `--autotune_remote_compile_cache` "
             "server: values are written with an HMAC-SHA256 tag under it, and a value whose "
             "tag does not verify is never used. Required by that flag; never logged "
             "([security.md](security.md#the-remote-compile-cache))"),
    Variable(AUTOTUNE_PROGRESS, "you", "triton.progress",
             "`1`/`true`/`yes`/`on` always show tuning progress lines (stderr; pytest's "
             "terminal under the plugin), `0`/`false`/`no`/`off` never (default: only for long "
             "tunings)"),
    Variable(AUTOTUNE_BENCH_LOCK_DIR, "you", "triton.benchlock",
             "where the per-GPU benchmarking locks live"),
    Variable(AUTOTUNE_DUMP_RUN, "autotune_cache (a dump run's first process)", "store.dumpfile",
             "the run directory that the processes a dumping process starts add their entries "
             "to, instead of starting dumps of their own"),
    Variable(TRITON_PRINT_AUTOTUNING, "you", "triton.progress",
             "Triton's own switch; `1` means progress always"),
    Variable(TRITON_INTERPRET, "you", "triton.device",
             "Triton's CPU interpreter (read here only for Triton releases without `knobs`); "
             "the device becomes `cpu-interpreter / interpreter`"),
    Variable(TRITON_CACHE_DIR, "you, or autotune_cache in Bazel tests", "triton.sandbox",
             "Triton's compile cache; set to `$TEST_TMPDIR/triton_cache` in Bazel tests when "
             "unset"),
    Variable(TRITON_CACHE_MANAGER, "you, or autotune_cache under "
             "`--autotune_remote_compile_cache`", "triton.remote_compile",
             "Triton's compile cache manager; a value of yours is kept (the flag then warns and "
             "stays off), ours is set while the flag is on and removed when it no longer is"),
    Variable(TRITON_REMOTE_CACHE_BACKEND, "autotune_cache under "
             "`--autotune_remote_compile_cache`", "triton.remote_compile",
             "see `TRITON_CACHE_MANAGER`"),
    Variable(TEST_TOTAL_SHARDS, "Bazel", "cache", "a dump refuses to run in more than one shard"),
    Variable(TEST_UNDECLARED_OUTPUTS_DIR, "Bazel", "store.stats, config.flags",
             "where `autotune_report.json` goes; the `TEST_UNDECLARED_OUTPUTS_DIR/` path prefix"),
    Variable(TEST_SRCDIR, "Bazel", "config.flags", "with `TEST_WORKSPACE`, the `TEST_WORKSPACE/` "
             "path prefix (`TEST_WORKSPACE/x` is `$TEST_SRCDIR/$TEST_WORKSPACE/x`)"),
    Variable(TEST_WORKSPACE, "Bazel", "config.flags", "see `TEST_SRCDIR`"),
    Variable(TEST_TMPDIR, "Bazel", "triton.sandbox", "where the sandboxed Triton cache goes"),
    Variable(PYTEST_XDIST_WORKER_COUNT, "pytest-xdist", "triton.preload",
             "with `PYTEST_XDIST_WORKER` (`gw0`, `gw1`, …): each worker compiles loaded winners "
             "ahead on its share of `--autotune_compile_workers`, starting at its own offset "
             "([triton.md](triton.md#compiling-loaded-winners-early))"),
    Variable(PYTEST_XDIST_WORKER, "pytest-xdist", "triton.preload",
             "see `PYTEST_XDIST_WORKER_COUNT`"),
)

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


def verbose() -> bool | None:
    """$AUTOTUNE_VERBOSE as a boolean, or None when unset or empty."""
    return parse_bool(get(AUTOTUNE_VERBOSE))


def remote_compile_key() -> bytes:
    """$AUTOTUNE_REMOTE_COMPILE_KEY's bytes (b'' when unset). A secret: never log it."""
    return get(AUTOTUNE_REMOTE_COMPILE_KEY).strip().encode()


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


def triton_cache_manager() -> tuple[str, str]:
    """($TRITON_CACHE_MANAGER, $TRITON_REMOTE_CACHE_BACKEND), each '' when unset."""
    return get(TRITON_CACHE_MANAGER), get(TRITON_REMOTE_CACHE_BACKEND)


def set_triton_cache_manager(manager: str | None, backend: str | None) -> None:
    """Set both (None: remove both) for this process and its children: Triton reads them at
    each compile (triton.remote_compile)."""
    mapping = environ()
    if manager is None or backend is None:
        mapping.pop(TRITON_CACHE_MANAGER, None)
        mapping.pop(TRITON_REMOTE_CACHE_BACKEND, None)
    else:
        mapping[TRITON_CACHE_MANAGER] = manager
        mapping[TRITON_REMOTE_CACHE_BACKEND] = backend


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


def triton_interpret() -> bool:
    """$TRITON_INTERPRET as a boolean (only for Triton releases without `triton.knobs`)."""
    return bool(parse_bool(get(TRITON_INTERPRET, "0")))


def xdist_worker() -> tuple[int, int] | None:
    """(this worker's index, the worker count) in a pytest-xdist worker (PYTEST_XDIST_WORKER
    `gw3`, PYTEST_XDIST_WORKER_COUNT `8`), else None; None too when either is malformed."""
    name, count = get(PYTEST_XDIST_WORKER).strip(), get(PYTEST_XDIST_WORKER_COUNT).strip()
    if not name.startswith("gw") or not name[2:].isdigit() or not count.isdigit():
        return None
    index, total = int(name[2:]), int(count)
    return (index, total) if 0 <= index < total else None


def xdist_share(total: int) -> int:
    """This pytest-xdist worker's share of `total` (at least 1): every worker of the run takes
    as much at once; `total` outside xdist."""
    worker = xdist_worker()
    return max(1, total // worker[1]) if worker is not None else total
