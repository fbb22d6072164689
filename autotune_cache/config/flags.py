"""AUTOTUNE_FLAGS parsing (in the style of XLA_FLAGS) and Bazel test path prefixes."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from autotune_cache.errors import FlagError, PathPrefixError
from autotune_cache.foundation import env as environment
from autotune_cache.foundation.redact import redact
from autotune_cache.foundation.urls import docs_url

ENV_VAR = environment.AUTOTUNE_FLAGS
MACRO_ENV_VAR = environment.RULES_AUTOTUNE_MACRO_FLAGS
REGEN_HINT_ENV = environment.AUTOTUNE_REGEN_HINT

OUTPUTS_PREFIX = "TEST_UNDECLARED_OUTPUTS_DIR/"
WORKSPACE_PREFIX = "TEST_WORKSPACE/"


@dataclass(frozen=True)
class Settings:
    """Resolved autotune configuration; build it from flags or directly from Python."""

    cache_dir: Path | None = None
    cache_mode: str = "update"
    load_from: tuple[Path, ...] = ()
    dump_to: Path | None = None
    dump_merge: bool = False
    require_complete: bool = False
    remote_cache: str | None = None
    remote_compile_cache: bool = False
    compile_workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    compile_in_processes: bool = True
    compile_helpers: int = 0
    compile_at_start: bool = False
    switch_interval_us: int = 200
    all_kernels: bool = False
    deferred_tuning: bool = True

    def __repr__(self) -> str:
        """The dataclass repr with any password in the Redis URL shown as `***`."""
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        return redact(f"Settings({shown})")

    def __post_init__(self) -> None:
        # The Python API accepts str paths, and one path where a list is expected.
        load_from = self.load_from
        if isinstance(load_from, (str, os.PathLike)):
            load_from = (load_from,)
        object.__setattr__(self, "load_from", tuple(Path(p) for p in load_from))
        for name in ("cache_dir", "dump_to"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, Path(value))
        if self.cache_mode not in ("update", "read"):
            raise FlagError(
                f"--autotune_cache_mode={self.cache_mode}: must be 'update' or 'read'.\n"
                + valid_flags_text()
            )
        if self.remote_cache:
            _redis_url("autotune_remote_cache", self.remote_cache)
        if self.remote_compile_cache and not self.remote_cache:
            raise FlagError(
                "--autotune_remote_compile_cache needs --autotune_remote_cache=redis://HOST:PORT"
                "[/DB]: the server that shares compiled kernels is the results server.\n"
                + valid_flags_text()
            )
        if self.compile_helpers < 0:
            raise FlagError(f"--autotune_compile_helpers={self.compile_helpers}: must be >= 0 "
                            "(0 starts none)")
        if self.compile_workers < 1:
            raise FlagError(f"--autotune_compile_workers={self.compile_workers}: must be >= 1")
        if not 0 <= self.switch_interval_us <= 1_000_000:
            raise FlagError(f"--autotune_switch_interval_us={self.switch_interval_us}: must be "
                            "between 0 (leave Python's own) and 1000000 microseconds")



def resolve_path(value: str, flag: str, env: Mapping[str, str], *, create_parent: bool) -> Path:
    """Resolve a flag's path, expanding the TEST_UNDECLARED_OUTPUTS_DIR/ and TEST_WORKSPACE/
    prefixes as XLA does; `create_parent` makes the outputs directory when it is missing."""
    if value.startswith(OUTPUTS_PREFIX):
        base = env.get("TEST_UNDECLARED_OUTPUTS_DIR")
        if not base:
            raise PathPrefixError(
                f"--{flag}={value}: the TEST_UNDECLARED_OUTPUTS_DIR/ prefix needs the "
                "TEST_UNDECLARED_OUTPUTS_DIR environment variable, which `bazel test` sets. "
                "Outside Bazel, give a plain path."
            )
        if create_parent:
            try:
                Path(base).mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise PathPrefixError(
                    f"--{flag}={value}: cannot create TEST_UNDECLARED_OUTPUTS_DIR={base} "
                    f"({e.strerror})"
                ) from e
        return Path(base) / value[len(OUTPUTS_PREFIX):]
    if value.startswith(WORKSPACE_PREFIX):
        srcdir, workspace = env.get("TEST_SRCDIR"), env.get("TEST_WORKSPACE")
        if not srcdir or not workspace:
            missing = " and ".join(
                n for n, v in (("TEST_SRCDIR", srcdir), ("TEST_WORKSPACE", workspace)) if not v
            )
            raise PathPrefixError(
                f"--{flag}={value}: the TEST_WORKSPACE/ prefix needs {missing}, which "
                "`bazel test` sets. Outside Bazel, give a plain path."
            )
        return Path(srcdir) / workspace / value[len(WORKSPACE_PREFIX):]
    if not value:
        raise FlagError(f"--{flag}= needs a path.\n" + valid_flags_text())
    return Path(value)


def _parse_bool(flag: str, value: str | None) -> bool:
    parsed = True if value is None else environment.parse_bool(value)
    if parsed is not None:
        return parsed
    raise FlagError(f"--{flag}={value}: expected true or false.\n" + valid_flags_text())


def _parse_int(flag: str, value: str | None) -> int:
    try:
        return int(value or "")
    except ValueError:
        raise FlagError(
            f"--{flag}={value}: expected a whole number.\n" + valid_flags_text()
        ) from None


_REDIS_SCHEMES = ("redis", "rediss", "unix")


def _redis_url(flag: str, value: str) -> str:
    """`value` when it is a Redis URL redis-py reads as meant; FlagError otherwise (redis-py
    would silently use database 0 for `redis://h:p/notadb`)."""
    from urllib.parse import urlsplit

    usage = ("use redis://HOST:PORT[/DB] (rediss:// for TLS, unix:///path/to/socket), or leave "
             "the flag out to run without the remote tier")
    if not value.strip():
        raise FlagError(f"--{flag}= is empty; {usage}.")
    try:
        url = urlsplit(value)
        _port = url.port  # a port that is not a number raises ValueError
    except ValueError as e:
        raise FlagError(redact(f"--{flag}={value}: not a Redis URL ({e}); {usage}.")) from None
    if url.scheme not in _REDIS_SCHEMES:
        raise FlagError(redact(f"--{flag}={value}: scheme {url.scheme or '(none)'!r} is not "
                               f"a Redis scheme; {usage}."))
    if url.scheme != "unix":
        if not url.hostname:
            raise FlagError(redact(f"--{flag}={value}: names no host; {usage}."))
        db = url.path.lstrip("/")
        if db and not db.isdigit():
            raise FlagError(redact(f"--{flag}={value}: database {db!r} is not a number; "
                                   f"{usage}."))
    return value


def _need(flag: str, value: str | None) -> str:
    if value is None:
        raise FlagError(f"--{flag} needs a value: --{flag}=VALUE.\n" + valid_flags_text())
    return value


@dataclass(frozen=True)
class _Flag:
    """One AUTOTUNE_FLAGS flag. `help` ("VALUE  short text") is listed in error messages; `doc`
    and `example` are its row in docs/reference.md, which tools/gen_reference.py generates from
    this table (links in `doc` are relative to docs/)."""

    name: str
    field: str
    help: str
    parse: Callable[[str, str | None, Mapping[str, str]], object]
    example: str
    doc: str

    @property
    def syntax(self) -> str:
        """`--name=VALUE`, or `--name[=true|false]` for a switch."""
        value = self.help.split("  ", 1)[0]
        return f"--{self.name}{value}" if value.startswith("[") else f"--{self.name}={value}"


FLAGS: tuple[_Flag, ...] = (
    _Flag("autotune_cache_dir", "cache_dir", "DIR  per-kernel cache directory",
          lambda f, v, env: resolve_path(_need(f, v), f, env, create_parent=True),
          "--autotune_cache_dir=$HOME/.cache/autotune",
          "per-kernel cache directory: one self-describing file per entry, shared safely by "
          "concurrent processes; created when missing ([cache.md](cache.md))"),
    _Flag("autotune_cache_mode", "cache_mode", "update|read  read never writes the directory",
          lambda f, v, env: _need(f, v),
          "--autotune_cache_mode=read",
          "`read` never writes the directory or the remote tier (default `update`)"),
    _Flag("load_autotune_results_from", "load_from", "PATH[,PATH...]  results files to load",
          lambda f, v, env: tuple(
              resolve_path(p, f, env, create_parent=False) for p in _need(f, v).split(",")),
          "--load_autotune_results_from=a.textproto,b.pb",
          "results files to load; on a key in several files the last file wins (the flag may "
          "be repeated: every file is loaded)"),
    _Flag("dump_autotune_results_to", "dump_to", "PATH  write every entry used or produced",
          lambda f, v, env: resolve_path(_need(f, v), f, env, create_parent=True),
          "--dump_autotune_results_to=TEST_UNDECLARED_OUTPUTS_DIR/autotune_cache.textproto",
          "write the entries this run (this process and the processes it starts) used or "
          "tuned, atomically, once, at the end of the run; an existing file keeps every entry "
          "the run could not have reproduced (other devices and toolchains; in a subset or "
          "failed run, everything it did not write) and the dump line says what it kept and "
          "dropped ([cache.md](cache.md#the-dump))"),
    _Flag("autotune_dump_merge", "dump_merge",
          "[=true|false]  the dump keeps every entry its file held before this run",
          lambda f, v, env: _parse_bool(f, v),
          "--autotune_dump_merge",
          "the dump keeps every entry its file held before the run, this device's unused ones "
          "too (a file built from several separate runs; the run's entry wins on a key)"),
    _Flag("require_complete_autotune_results", "require_complete",
          "[=true|false]  a miss is an error instead of a re-tune",
          lambda f, v, env: _parse_bool(f, v),
          "--require_complete_autotune_results",
          "a miss raises `MissingResultError` naming the key, the stale entries and the regen "
          "command, instead of tuning ([staleness.md](staleness.md))"),
    _Flag("autotune_remote_cache", "remote_cache",
          "redis://HOST:PORT[/DB]  shared remote tier on a Redis server",
          lambda f, v, env: _redis_url(f, _need(f, v)),
          "--autotune_remote_cache=redis://cache.ci:6379/2",
          "a shared tier on a Redis server, for fleets of CI machines (`rediss://` for TLS, "
          "`unix:///path` for a socket); any Redis error warns once and the process goes on "
          "without it"),
    _Flag("autotune_remote_compile_cache", "remote_compile_cache",
          "[=true|false]  share Triton's compiled kernels on the --autotune_remote_cache server",
          lambda f, v, env: _parse_bool(f, v),
          "--autotune_remote_compile_cache",
          "also share Triton's compiled kernels on the `--autotune_remote_cache` server, so a "
          "fleet compiles each winner once; needs `--autotune_remote_cache` "
          "([triton.md](triton.md))"),
    _Flag("autotune_compile_workers", "compile_workers",
          "N  parallel compile workers (default: CPU count)",
          lambda f, v, env: _parse_int(f, v),
          "--autotune_compile_workers=8",
          "threads compiling candidate configs in parallel (default: CPU count)"),
    _Flag("autotune_compile_in_processes", "compile_in_processes",
          "[=true|false]  run Triton's back end of the pool's compiles in processes (default "
          "true)",
          lambda f, v, env: _parse_bool(f, v),
          "--autotune_compile_in_processes=false",
          "each background compile (a winner compiled ahead, a tuning's candidate) runs its "
          "front end (Python AST to TTIR) on its thread and the rest (TTIR to cubin) in one of "
          "up to `--autotune_compile_workers` processes that import Triton alone, so the "
          "compiles no longer take turns on the GIL; the binaries are Triton's own, byte for "
          "byte ([triton.md](triton.md#compiling-in-processes))"),
    _Flag("autotune_compile_helpers", "compile_helpers",
          "N  helper processes compiling the loaded winners at a pytest run's start "
          "(default 0: none)",
          lambda f, v, env: _parse_int(f, v),
          "--autotune_compile_helpers=8",
          "under pytest on a GPU machine, N separate processes fill Triton's compile cache with "
          "the loaded files' winners while conftest.py files import, so that the first "
          "launches find them compiled; off (0): measured on an H100 they did not pay for "
          "themselves on Liger-Kernel's suite "
          "([pytest.md](pytest.md#compile-helpers))"),
    _Flag("autotune_compile_at_start", "compile_at_start",
          "[=true|false]  compile the loaded winners as kernels are defined (default false)",
          lambda f, v, env: _parse_bool(f, v),
          "--autotune_compile_at_start",
          "on a GPU machine, the loaded files' winners and warm-ups start compiling (into "
          "Triton's compile cache, for the GPU model the files name) as the program defines "
          "their kernels, before it first uses the GPU, instead of at the first launch, and "
          "their launchers from the program's `import triton`; off "
          "by default: its one GPU run measured it slower on Liger-Kernel's suite "
          "([triton.md](triton.md#compiling-ahead-at-start))"),
    _Flag("autotune_switch_interval_us", "switch_interval_us",
          "N  Python's thread switch interval while compiles run in the background (default 200)",
          lambda f, v, env: _parse_int(f, v),
          "--autotune_switch_interval_us=0",
          "while the compile pool works, Python's thread switch interval in microseconds "
          "(default 200; 0 leaves Python's 5000): a compile thread gives up the GIL in every "
          "file write and native call and waits up to an interval to get it back from a busy "
          "main thread ([triton.md](triton.md#compiling-ahead-at-start))"),
    _Flag("autotune_deferred_tuning", "deferred_tuning",
          "[=true|false]  a dump run on a GPU tunes its misses at its end (default true)",
          lambda f, v, env: _parse_bool(f, v),
          "--autotune_deferred_tuning=false",
          "in a dump run on a GPU, a miss launches a provisional candidate at once and is tuned "
          "at the end of the run, so every key's compiles overlap (default true; `false` tunes "
          "each miss at its launch) ([triton.md](triton.md#deferred-tuning-in-a-dump-run))"),
    _Flag("autotune_all_kernels", "all_kernels",
          "[=true|false]  route every triton.autotune through the cache",
          lambda f, v, env: _parse_bool(f, v),
          "--autotune_all_kernels",
          "route every `triton.autotune` (third-party libraries' kernels) through the cache, "
          "from interpreter start-up, via the installed `autotune_cache_all_kernels.pth` "
          "([triton.md](triton.md#third-party-kernels-install-and---autotune_all_kernels))"),
)
_BY_NAME = {f.name: f for f in FLAGS}
assert {f.field for f in FLAGS} == {f.name for f in fields(Settings)}


def valid_flags_text() -> str:
    """The list of valid flags, for error messages."""
    lines = [f"Valid {ENV_VAR} flags:"]
    lines += [f"  {f.syntax}  {f.help.split('  ', 1)[1]}" for f in FLAGS]
    lines.append(f"Docs: {docs_url('reference.md#flags')}")
    return "\n".join(lines)


def split_flags(text: str) -> list[tuple[str, str, str | None]]:
    """(token, name, value or None) of each flag of an AUTOTUNE_FLAGS string, in order; the one
    tokenizer for the variable (parse_flags, the pytest plugin). Raises FlagError for text that
    cannot be split or a token that is not a --flag."""
    try:
        tokens = shlex.split(text)
    except ValueError as e:
        raise FlagError(f"{ENV_VAR}={text!r}: cannot split into flags ({e})") from None
    out: list[tuple[str, str, str | None]] = []
    for token in tokens:
        if not token.startswith("--"):
            raise FlagError(
                f"{ENV_VAR}: {token!r} is not a flag; flags look like --name=value.\n"
                + valid_flags_text()
            )
        name, eq, value = token[2:].partition("=")
        out.append((token, name, value if eq else None))
    return out


def parse_flags(text: str, env: Mapping[str, str] | None = None) -> Settings:
    """Settings from an AUTOTUNE_FLAGS string; bad flags raise FlagError listing valid ones."""
    env = environment.environ() if env is None else env
    values: dict[str, object] = {}
    given: dict[str, str] = {}
    for token, name, value in split_flags(text):
        flag = _BY_NAME.get(name)
        if flag is None:
            raise FlagError(f"{ENV_VAR}: unknown flag --{name}.\n" + valid_flags_text())
        parsed = flag.parse(name, value, env)
        if flag.field == "load_from":
            # Repeating the load flag loads every file, in order (the last wins on a key).
            values[flag.field] = (*values.get(flag.field, ()), *parsed)  # type: ignore[misc]
            continue
        if flag.field in values and values[flag.field] != parsed:
            raise FlagError(redact(
                f"{ENV_VAR}: --{name} is given twice, as {given[flag.field]!r} and {token!r}; "
                "give it once."))
        given[flag.field] = token
        values[flag.field] = parsed
    return Settings(**values)  # type: ignore[arg-type]


# A flag two sources both set with different values: (its name, the first's token, the
# second's) -> the error to raise, worded for where the two sources come from.
Clash = Callable[[str, str, str], Exception]


def _same_value(a: object, b: object) -> bool:
    """Equal settings values; paths compare by where they point, not how they are spelt."""
    if isinstance(a, Path) and isinstance(b, Path):
        return a == b or a.resolve() == b.resolve()
    return a == b


def combine_flags(first: str, second: str, env: Mapping[str, str], clash: Clash) -> str:
    """Two sources of flags as one AUTOTUNE_FLAGS text, `first` then `second`: the one way the
    package combines configuration sources (the user's variable with the Bazel macro's, or with
    the pytest plugin's options). The files to load add up (a file both name is loaded once,
    where `first` names it); any other flag both set must mean the same value (then `first`'s
    token stands), or `clash(name, first's token, second's token)` is raised. Each source must
    parse on its own (FlagError otherwise)."""
    if not second.strip():
        return first
    if not first.strip():
        return second
    theirs = {name: token for token, name, _ in split_flags(first)}
    loaded = set(parse_flags(first, env).load_from)
    kept: list[str] = []
    for token, name, _ in split_flags(second):
        flag = _BY_NAME.get(name)
        if flag is not None and flag.field == "load_from":
            new = [p for p in dict.fromkeys(parse_flags(token, env).load_from)
                   if p not in loaded]
            if new:
                kept.append(f"--{name}=" + ",".join(str(p) for p in new))
            continue
        if flag is not None and name in theirs:
            field_name = flag.field
            mine = getattr(parse_flags(token, env), field_name)
            if not _same_value(getattr(parse_flags(theirs[name], env), field_name), mine):
                raise clash(name, theirs[name], token)
            continue  # the same value, maybe spelt otherwise: given once
        kept.append(token)
    return " ".join([first.strip(), *map(shlex.quote, kept)]).strip()


def flags_text(env: Mapping[str, str] | None = None) -> str:
    """The flags that apply: the user's AUTOTUNE_FLAGS, then the flags the autotuned_py_test
    macro set in RULES_AUTOTUNE_MACRO_FLAGS (so the committed cache loads last and wins a key),
    combined by combine_flags.

    They live in two variables so that `bazel test --test_env=AUTOTUNE_FLAGS=...` adds flags
    instead of replacing the macro's (which would silently switch the committed cache off). A
    flag both set differently is a FlagError naming both values: the files to load are the one
    flag that adds up.
    """
    env = environment.environ() if env is None else env

    def clash(name: str, token: str, theirs: str) -> Exception:
        return FlagError(redact(
            f"--{name} is set twice, differently: {ENV_VAR} has {token!r} (from the "
            f"environment, e.g. bazel test --test_env={ENV_VAR}=...) and the "
            f"autotuned_py_test target has {theirs!r} ({MACRO_ENV_VAR}, from its cache, "
            "require_complete and env attributes, or its .dump mode). Both would have to "
            f"apply: drop --{name} from {ENV_VAR}, or change the target's attributes."))

    return combine_flags(env.get(ENV_VAR, ""), env.get(MACRO_ENV_VAR, ""), env, clash)


def settings_from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Settings from AUTOTUNE_FLAGS and the macro's RULES_AUTOTUNE_MACRO_FLAGS (flags_text);
    empty when neither is set."""
    env = environment.environ() if env is None else env
    return parse_flags(flags_text(env), env)


def regen_hint(env: Mapping[str, str] | None = None) -> str:
    """The command that regenerates the cache, as the Bazel macro sets it."""
    env = environment.environ() if env is None else env
    return env.get(REGEN_HINT_ENV, "").strip()
