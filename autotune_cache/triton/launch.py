"""The keyword arguments a candidate config is launched (and compiled) with.

`launch_kwargs` is `triton.Config.all_kwargs()` without the launch options (`num_warps`,
`num_ctas`, `num_stages`, `maxnreg`) equal to the active backend's defaults (`parse_options({})`):
the backend fills them in again, so the compiled kernel is the same one, and a launch does not pay
for binding them (about 3 µs on the H200 host). Where the defaults cannot be read (the
interpreter, a Triton without these internals), nothing is left out. Every launch of a candidate
goes through it (the compile ahead of benchmarking, the benchmarks, the recorded specialization
and the hit path), so they all find one kernel in Triton's in-memory cache; hooks still receive
`all_kwargs()`, as in triton.autotune. (docs/decisions/0010-launch-options.md)
"""

from __future__ import annotations

from typing import Any

_OPTIONS = ("num_warps", "num_ctas", "num_stages", "maxnreg")
_MISSING = object()
_defaults: dict[Any, dict[str, Any]] = {}


def backend_defaults() -> dict[str, Any]:
    """{launch option: the active backend's default}, or {} where it cannot be read."""
    from autotune_cache.triton.device import interpreter_active

    if interpreter_active():
        return {}
    try:
        from triton.compiler.compiler import make_backend
        from triton.runtime import driver

        target = driver.active.get_current_target()
        if target not in _defaults:
            options = make_backend(target).parse_options({})
            _defaults[target] = {k: getattr(options, k) for k in _OPTIONS
                                 if getattr(options, k, _MISSING) is not _MISSING}
        return _defaults[target]
    except Exception:  # another Triton's internals: launch with every option spelled out
        return {}


def launch_kwargs(config: Any) -> dict[str, Any]:
    """`config.all_kwargs()` without the launch options that equal the backend's defaults."""
    kwargs = config.all_kwargs()
    defaults = backend_defaults()
    if not defaults:
        return kwargs
    return {k: v for k, v in kwargs.items()
            if k not in defaults or defaults[k] != v}
