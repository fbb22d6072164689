"""Checks on an entry read from a shared tier, before anything uses it.

An entry is usable only when
- its key is the key looked up (when one is given): the name or Redis key it was found under says
  nothing;
- its winning config is well-formed: every parameter has a name that is a Python identifier, a
  value, and appears once; the launch options are in the ranges Triton accepts (num_warps a power
  of two up to 64, num_stages 0..32, num_ctas 1..16, maxnreg 0..255); the timing is a finite,
  non-negative number;
- its winner is one of its own recorded candidates (when it records any), and is not a failure;
- its winner is one of the kernel's candidates, when the caller passes them
  (Cache.lookup(key, candidates=...)). Matching is on meta-parameters and launch options, the part
  of a config a results file records.
Otherwise the entry is damaged: the tier warns naming where it came from, it is a miss, the key is
re-tuned and the entry overwritten. `autotune-cache verify` runs the same checks (without the
kernel's candidates, which only the tuner knows). (docs/decisions/0004-untrusted-entries.md)
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterable

from autotune_cache.foundation.key import CacheKey
from autotune_cache.proto import autotune_results_pb2 as pb

log = logging.getLogger("autotune_cache")

MAX_PARAM_NAME = 128
MAX_STRING_VALUE = 1024
_RANGES = {"num_stages": (0, 32), "num_ctas": (1, 16), "maxnreg": (0, 255)}


def config_identity(config: pb.Config) -> bytes:
    """What makes two recorded configs the same config: parameters by name, launch options."""
    norm = pb.Config()
    norm.CopyFrom(config)
    norm.ClearField("params")
    norm.params.extend(sorted(config.params, key=lambda p: p.name))
    return norm.SerializeToString(deterministic=True)


def config_problem(config: pb.Config) -> str | None:
    """Why `config` cannot be launched as recorded, or None when it is well-formed."""
    names = set()
    for param in config.params:
        name = param.name
        if not name or len(name) > MAX_PARAM_NAME or not name.isidentifier():
            return f"parameter name {name[:40]!r} is not an identifier"
        if name in names:
            return f"parameter {name} appears twice"
        names.add(name)
        kind = param.WhichOneof("value")
        if kind is None:
            return f"parameter {name} has no value"
        if kind == "float_value" and not math.isfinite(param.float_value):
            return f"parameter {name} is {param.float_value}"
        if kind == "string_value" and len(param.string_value) > MAX_STRING_VALUE:
            return f"parameter {name} has a {len(param.string_value):,}-character value"
    if config.HasField("num_warps"):
        warps = config.num_warps
        if not 1 <= warps <= 64 or warps & (warps - 1):
            return f"num_warps={warps} is not a power of two from 1 to 64"
    for option, (low, high) in _RANGES.items():
        if config.HasField(option) and not low <= getattr(config, option) <= high:
            return f"{option}={getattr(config, option)} is outside {low}..{high}"
    return None


def entry_problem(entry: pb.Entry, key: CacheKey | None = None,
                  candidates: Iterable[pb.Config] | None = None) -> str | None:
    """Why `entry` must not be used (for `key`, among `candidates`), or None when it may."""
    if not entry.key.kernel:
        return "the entry has no key"
    if key is not None and CacheKey.from_proto(entry.key) != key:
        return "it holds the entry of another key"
    result = entry.result
    problem = config_problem(result.config)
    if problem is not None:
        return f"its winning config is malformed: {problem}"
    if not math.isfinite(result.time_ms) or result.time_ms < 0:
        return f"its winning time {result.time_ms} ms is not a time"
    winner = config_identity(result.config)
    if result.candidates:
        same = [t for t in result.candidates if config_identity(t.config) == winner]
        if not same:
            return "its winning config is not among its own recorded candidates"
        if all(t.failure for t in same):
            return "its winning config is recorded as a failure"
    if candidates is not None:
        allowed = {config_identity(c) for c in candidates}
        if winner not in allowed:
            return "its winning config is not one of the kernel's candidate configs"
    return None


_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def warn_damaged(origin: str, problem: str, *, kind: str = "cache") -> None:
    """Warn once per process that the entry at `origin` (a file, a Redis key) is damaged and
    will be re-tuned; a lookup and the re-read after waiting for a peer see the same entry."""
    with _warned_lock:
        if (origin, problem) in _warned:
            return
        _warned.add((origin, problem))
    log.warning("autotune_cache: ignoring a damaged %s entry %s: %s; it will be re-tuned and "
                "overwritten", kind, origin, problem)
