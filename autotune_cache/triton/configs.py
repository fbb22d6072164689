"""triton.Config <-> results-file Config, canonical config text and the candidate-list hash."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store.tuning import LAUNCH_OPTIONS, canonical_text, config_text, param_value


def _config_options(config: Any) -> dict[str, Any]:
    return {k: getattr(config, k, None) for k in LAUNCH_OPTIONS}


def canonical_config(config: Any) -> str:
    """Stable one-line text of a triton.Config: sorted meta-parameters, then launch options, then
    `;ir_override=…;pre_hook=module.qualname` when the config has them.

    Used for the candidate-list fingerprint and to name a config in progress lines. It is *not*
    what matches a candidate with a recorded Config: the results file holds no hook or override,
    so use match_text() for that."""
    extra = []
    if getattr(config, "ir_override", None):
        extra.append(f"ir_override={config.ir_override}")
    if getattr(config, "pre_hook", None) is not None:
        hook = config.pre_hook
        name = getattr(hook, "__qualname__", repr(hook))
        extra.append(f"pre_hook={getattr(hook, '__module__', '')}.{name}")
    return canonical_text(config.kwargs, _config_options(config), ";".join(extra))


def canonical_proto_config(msg: pb.Config) -> str:
    """Canonical text of a recorded Config: meta-parameters and launch options only
    (tuning.config_text). Equals match_text() of the triton.Config it was recorded from (and
    canonical_config() when that config has no pre_hook or ir_override)."""
    return config_text(msg)


def match_text(config: Any) -> str:
    """The text that matches a triton.Config with a recorded Config: what the results file keeps
    of it (meta-parameters and launch options), without pre_hook or ir_override."""
    return canonical_proto_config(config_to_proto(config))


def has_extras(config: Any) -> bool:
    """Whether the config carries something the results file cannot record (a pre_hook or an
    ir_override), so that a timing recorded for its parameters may not be its own."""
    return (bool(getattr(config, "ir_override", None))
            or getattr(config, "pre_hook", None) is not None)


def configs_fingerprint(configs: Iterable[Any]) -> str:
    """Hex SHA-256 of the candidate list, independent of its order."""
    texts = sorted(canonical_config(c) for c in configs)
    return hashlib.sha256("\n".join(texts).encode()).hexdigest()


def _param_proto(name: str, value: Any) -> pb.Param:
    if isinstance(value, bool):
        return pb.Param(name=name, bool_value=value)
    if isinstance(value, int):
        return pb.Param(name=name, int_value=value)
    if isinstance(value, float):
        return pb.Param(name=name, float_value=value)
    return pb.Param(name=name, string_value=str(value))


def config_to_proto(config: Any) -> pb.Config:
    """The results-file form of a triton.Config (meta-parameters sorted by name)."""
    options = {o: int(v) for o, v in _config_options(config).items() if v is not None}
    return pb.Config(params=[_param_proto(k, config.kwargs[k]) for k in sorted(config.kwargs)],
                     **options)


def config_from_proto(msg: pb.Config) -> Any:
    """A triton.Config equal to the recorded one (string meta-parameters stay strings)."""
    import triton

    kwargs = {p.name: param_value(p) for p in msg.params}
    options = {k: getattr(msg, k) for k in LAUNCH_OPTIONS if msg.HasField(k)}
    return triton.Config(kwargs, **options)


def describe_config(config: Any) -> str:
    """Short human text of a triton.Config for progress lines and messages."""
    return canonical_config(config).replace(",", " ")


def match_candidates(entry: pb.Entry, configs: Sequence[Any]) -> list[tuple[Any, pb.Timing]]:
    """(candidate, its recorded Timing) pairs. A recorded Config holds only meta-parameters and
    launch options, so candidates are matched on those (match_text); each recorded timing goes to
    the first candidate with that text not matched yet, so candidates that differ only in their
    pre_hook or ir_override pair up with their timings in candidate order."""
    free: dict[str, list[Any]] = {}
    for config in configs:
        free.setdefault(match_text(config), []).append(config)
    pairs = []
    for timing in entry.result.candidates:
        waiting = free.get(config_text(timing.config))
        if waiting:
            pairs.append((waiting.pop(0), timing))
    return pairs


def winning_candidate(entry: pb.Entry, pairs: Sequence[tuple[Any, pb.Timing]]) -> Any:
    """The candidate object that won (so its pre_hook and ir_override run at launch).

    Among candidates with the winner's parameters it is the one whose recorded time is the
    winning time; a rebuilt config is only a fallback for an entry that matches no candidate
    (which a hit, keyed by the candidate list, never is)."""
    wanted = config_text(entry.result.config)
    same = [(c, t) for c, t in pairs if config_text(t.config) == wanted]
    for config, timing in same:
        if not timing.failure and timing.time_ms == entry.result.time_ms:
            return config
    if same:
        return same[0][0]
    return config_from_proto(entry.result.config)
