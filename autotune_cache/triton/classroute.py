"""Tuners built from Triton's `Autotuner` class itself: routed while the switch is on, watched
always, and forbidden to tune under require-complete.

Some libraries never call `triton.autotune`: they construct `triton.runtime.autotuner.Autotuner`
or a subclass of it directly (flash-linear-attention's `CachedAutotuner`, whose `run()` looks up
the library's own config files and then calls `super().run()`). Patching the decorator cannot
reach them, so this module patches the class, once, at the import of `autotune_cache.triton`:

- `__init__`: while install() is in effect (`set_capturing`), a tuner that is not ours records
  the arguments it was constructed with. Its first launch builds, from those same arguments, one
  of our tuners (the *shadow*) keyed by the kernel's module-qualified name, as routed decorators
  are; the library's own hooks (`pre_hook`, `post_hook`) are taken from the instance as its
  constructor left them. docs/decisions/0026-class-level-routing.md says why this is safe where
  adopting tuners built earlier is not (0018).
- `run`: a routed tuner's launches go to its shadow, unless the library supplied the config
  itself first, which is its choice: a config it put in Triton's memo (`self.cache[key]`), or a
  candidate list it cut to one config. Those are counted (`Stats.library_configs`), never
  re-tuned. Any other tuner of Triton's is launched by Triton as before, and noted in the stats
  as having run on Triton's autotuner (`kernels_ran_on_triton`).
- `_bench`: Triton's autotuner is about to benchmark, i.e. tune. Noted in the stats; under
  require-complete it raises UnroutedTuningError instead, naming the kernel, its class and
  module, why it is not routed, and the fix. So strict mode is total: nothing tunes unseen.

A subclass that overrides a method on Triton's tuning path (RUN_PATH) is not routed: our tuner
would not run the library's code. It stays on Triton's autotuner, watched as above, and the
strict failure names the methods.

`census()` lists every Triton tuner alive in the process: its class, whose it is, and whether it
ran (bench/suite_perf.py reports it for third-party suites).
"""

from __future__ import annotations

import gc
import inspect
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from triton.runtime import autotuner as _triton_autotuner

from autotune_cache.cache import get_cache
from autotune_cache.errors import UnroutedTuningError
from autotune_cache.triton import hooks, preload, seeding
from autotune_cache.triton.autotuner import Autotuner
from autotune_cache.triton.fingerprint import qualified_name
from autotune_cache.triton.problem import triton_style_key

TritonAutotuner = _triton_autotuner.Autotuner

# Methods of Triton's Autotuner that its run() reaches while tuning. A subclass overriding one of
# them is not routed: the shadow would not run its code.
RUN_PATH = ("prune_configs", "_bench", "do_bench", "check_disk_cache")

# Attributes this module keeps in a Triton tuner's __dict__.
ROUTE_ATTR = "_autotune_cache_route"
RAN_ATTR = "_autotune_cache_ran"
SHADOW_ATTR = "_autotune_cache_shadow_of"

ALL_KERNELS_FIX = (
    "route it through the cache: pytest --autotune-all-kernels, AUTOTUNE_FLAGS="
    "--autotune_all_kernels (installed at interpreter start-up), autotuned_py_test(all_kernels "
    "= True) in Bazel, or autotune_cache.triton.install() before importing {module}")

_lock = threading.Lock()
_originals: dict[str, Any] = {}
_capturing = False


def set_capturing(on: bool) -> None:
    """Whether tuners constructed from now on are routed (routing.install / uninstall)."""
    global _capturing
    _capturing = on


def blocking_methods(kind: type) -> list[str]:
    """The RUN_PATH methods that `kind` (a subclass of Triton's Autotuner) overrides."""
    found = []
    for name in RUN_PATH:
        for klass in kind.__mro__:
            if klass is TritonAutotuner:
                break
            if name in vars(klass):
                found.append(name)
                break
    return found


class Route:
    """A routed Triton tuner's constructor arguments and, once it launched, its shadow."""

    def __init__(self, arguments: Mapping[str, Any], blocked_by: list[str]) -> None:
        self.arguments = dict(arguments)
        self.blocked_by = blocked_by
        self.shadow: Autotuner | None = None
        self._configs: Any = None  # the owner's candidate list the shadow was built from
        self._library_keys: set[tuple] = set()

    def tuner(self, owner: Any) -> Autotuner:
        """The shadow, built at the first launch (after the subclass's own __init__ finished),
        and again if the library replaced the candidate list since."""
        if self.shadow is None or owner.configs is not self._configs:
            arguments = {**self.arguments, "configs": owner.configs}
            shadow = Autotuner(**arguments, kernel_name=qualified_name(owner.fn))
            # The library's hooks as its constructor left them (fla replaces Triton's defaults).
            vars(shadow).update({name: vars(owner)[name] for name in (
                "pre_hook", "post_hook", "user_defined_pre_hook", "user_defined_post_hook")
                if name in vars(owner)})
            vars(shadow)[SHADOW_ATTR] = True
            preload.decorated(shadow)
            self.shadow, self._configs = shadow, owner.configs
        return self.shadow

    def run(self, owner: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        configs = owner.configs
        original_many = len(self.arguments.get("configs") or ()) > 1
        if len(configs) <= 1:
            if original_many:  # the library cut the list to its own pick
                self._library_choice(owner, ("configs",))
            return _originals["run"](owner, *args, **kwargs)
        if owner.cache:  # the library put configs in Triton's memo itself
            nargs = dict(zip(owner.arg_names, args, strict=False))
            memo = triton_style_key(owner.arg_names, owner.keys, {**nargs, **kwargs})
            if memo in owner.cache:
                self._library_choice(owner, memo)
                return _originals["run"](owner, *args, **kwargs)
        shadow = self.tuner(owner)
        try:
            return shadow.run(*args, **kwargs)
        finally:
            if "best_config" in vars(shadow):
                owner.best_config = shadow.best_config

    def _library_choice(self, owner: Any, memo: tuple) -> None:
        if memo not in self._library_keys:
            self._library_keys.add(memo)
            get_cache().stats.library_config()


def _route_of(tuner: Any) -> Route | None:
    return vars(tuner).get(ROUTE_ATTR)


def is_blocked(tuner: Any) -> bool:
    """Whether `tuner` was built under the switch but overrides Triton's tuning path."""
    route = _route_of(tuner)
    return route is not None and bool(route.blocked_by)


def is_routed(tuner: Any) -> bool:
    """Whether `tuner`, a Triton tuner that is not ours, is routed through the cache."""
    route = _route_of(tuner)
    return route is not None and not route.blocked_by


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    _originals["__init__"](self, *args, **kwargs)
    if not _capturing or isinstance(self, Autotuner):
        return
    try:
        bound = _originals["signature"].bind(self, *args, **kwargs)
    except TypeError:  # a call Triton's own constructor accepted some other way: leave it
        return
    arguments = dict(bound.arguments)
    arguments.pop("self", None)
    extra = arguments.pop(_originals["var_keyword"], None) if _originals["var_keyword"] else None
    if extra:
        arguments.update(extra)
    route = vars(self)[ROUTE_ATTR] = Route(arguments, blocking_methods(type(self)))
    if route.blocked_by or overrides_run(type(self)):
        seeding.attach(self, ", ".join(route.blocked_by or ["run"]), bool(route.blocked_by))


def overrides_run(kind: type) -> bool:
    """Whether `kind` replaces Triton's `run()` (which may or may not call it: seeding.py
    finds out at the first launch)."""
    return any("run" in vars(klass) for klass in kind.__mro__[:kind.__mro__.index(TritonAutotuner)])


def _run(self: Any, *args: Any, **kwargs: Any) -> Any:
    route = _route_of(self)
    if route is not None and not route.blocked_by:
        vars(self)[RAN_ATTR] = True
        seeded = seeding.of(self)
        if seeded is not None:
            seeded.routed()
        return route.run(self, args, kwargs)
    if seeding.of(self) is not None:  # launched through its memo: seeding.py
        vars(self)[RAN_ATTR] = True
    elif RAN_ATTR not in vars(self):
        vars(self)[RAN_ATTR] = True
        get_cache().stats.ran_on_triton(qualified_name(self.fn))
    return _originals["run"](self, *args, **kwargs)


def _bench(self: Any, *args: Any, config: Any, **meta: Any) -> Any:
    if isinstance(self, Autotuner):
        return _originals["_bench"](self, *args, config=config, **meta)
    tuning_on_triton(self)
    result = _originals["_bench"](self, *args, config=config, **meta)
    seeded = seeding.of(self)
    if seeded is not None:
        seeded.timed(config, result)
    return result


def _timer(self: Any) -> Any:
    """Triton's `Autotuner.do_bench` property, watched: the benchmarker of a tuner not ours
    notes (or, under require-complete, forbids) the tuning before it times anything. It catches
    a subclass that overrides `_bench`, or whose own `run()` times configs, as long as it times
    through Triton's benchmarker (`self.do_bench`)."""
    timer = _originals["timer"](self)
    if isinstance(self, Autotuner) or timer is None:
        return timer

    def watched(*args: Any, **kwargs: Any) -> Any:
        tuning_on_triton(self)
        return timer(*args, **kwargs)

    return watched


def why_unrouted(tuner: Any) -> str:
    """Why `tuner`, a Triton tuner that is not ours, stays on Triton's autotuner."""
    route = _route_of(tuner)
    kind = type(tuner)
    if route is not None and route.blocked_by:
        return (f"its class {kind.__module__}.{kind.__qualname__} overrides "
                f"{', '.join(route.blocked_by)} of Triton's Autotuner, which the cache's tuner "
                "would not run, so it is not routed")
    if seeding.of(tuner) is not None:
        return (f"its class {kind.__module__}.{kind.__qualname__} replaces run() of Triton's "
                "Autotuner and never calls it, so it is not routed")
    if _capturing:
        return ("it was built before autotune_cache.triton.install() switched the routing on "
                "(its library was imported first)")
    return "the switch that routes third-party kernels through the cache is off"


def tuning_on_triton(tuner: Any) -> None:
    """Triton's own autotuner is about to tune `tuner`'s kernel: note it, or under
    require-complete raise UnroutedTuningError naming the kernel and the fix."""
    seeded = seeding.of(tuner)
    if seeded is not None and seeded.mode == "routed":
        seeded = None  # its launches go to its shadow; this tuning is Triton's, as for any
    why_not_seeded = seeded.tuning(tuner) if seeded is not None else None
    if seeded is not None and why_not_seeded is None:
        return  # a seeded tuner tuning a key the cache lacks, recorded at the launch's end
    kernel = qualified_name(tuner.fn)
    cache = get_cache()
    first = cache.stats.tuned_on_triton(kernel)
    if not cache.settings.require_complete:
        return
    module = kernel.rpartition(".")[0]
    kind = type(tuner)
    loaded = cache.loaded_cost(kernel)[0]
    lines = [
        f"autotune_cache: Triton's own autotuner is tuning {kernel} (a "
        f"{kind.__module__}.{kind.__qualname__}, module {module}), and {cache.require_flag} "
        "forbids tuning here.",
        f"It is not served by the cache: {why_unrouted(tuner)}.",
    ]
    if why_not_seeded is not None:
        lines.append(f"Nor can the cache seed it: {why_not_seeded}.")
    if loaded:
        lines.append(f"The loaded results hold {loaded} entries of it, unused.")
    if seeded is not None:
        lines.append("Fix: run this kernel's tests without require-complete, or give the "
                     "library's tuner a memo it asks before benchmarking (self.cache, as "
                     "Triton's has); docs/third-party-kernels.md says what seeding needs.")
    else:
        lines.append("Fix: " + ALL_KERNELS_FIX.format(module=module) + "; then dump the cache "
                     "again.")
    if not first:
        lines.append("(named before in this process)")
    message = "\n".join(lines)
    cache.strict_violation(kernel, message)  # the run fails even if the error is caught
    raise UnroutedTuningError(message)


def patch() -> None:
    """Wrap Triton's Autotuner.__init__, run and _bench (once; thread-safe). Tuners of ours
    override run and never reach the wrappers' Triton paths."""
    with _lock:
        if _originals:
            return
        init = TritonAutotuner.__init__
        signature = inspect.signature(init)
        var_keyword = next((p.name for p in signature.parameters.values()
                            if p.kind is inspect.Parameter.VAR_KEYWORD), "")
        # Triton 3.6-3.9: a functools.cached_property (a property in some releases).
        timer = vars(TritonAutotuner).get("do_bench")
        timer_fn = getattr(timer, "func", None) or getattr(timer, "fget", None)
        _originals.update({"__init__": init, "run": TritonAutotuner.run,
                           "_bench": TritonAutotuner._bench, "signature": signature,
                           "var_keyword": var_keyword, "timer": timer_fn})
        wrappers: dict[str, Any] = {"__init__": _init, "run": _run, "_bench": _bench}
        if timer_fn is not None:
            wrappers["do_bench"] = type(timer)(_timer)
        hooks.wrap_methods(TritonAutotuner, wrappers)


@dataclass(frozen=True)
class Tuner:
    """One autotuner alive in the process (census)."""

    kind: str  # its class, module-qualified
    kernel: str  # the kernel's module-qualified name
    owner: str  # "autotune_cache" (our decorator), "routed" (built by a library, routed),
    #             "seeded" (a library's own tuner, given the cache's picks through its memo:
    #             seeding.py), "undecided" (one of those two, not launched yet) or "triton"
    #             (left on Triton's autotuner)
    ran: bool
    why: str = field(default="", compare=False)  # why it is seeded or left on Triton


def describe(tuner: Any) -> Tuner:
    """The census row of one Triton autotuner (ours, routed, seeded, or left on Triton)."""
    kind = type(tuner)
    kernel = qualified_name(tuner.fn)
    why = ""
    if isinstance(tuner, Autotuner):
        owner, ran = "autotune_cache", "best_config" in vars(tuner)
    else:
        # One that timed through Triton's benchmarker tuned on Triton, whatever its route says
        # (a subclass whose own run() never reaches the routed path).
        tuned_there = kernel in get_cache().stats.kernels_tuned_on_triton
        seeded = seeding.of(tuner)
        ran = RAN_ATTR in vars(tuner) or tuned_there or (seeded is not None and seeded.launched)
        if tuned_there:
            owner, why = "triton", why_unrouted(tuner)
        elif seeded is not None and seeded.mode == "seeded":
            owner, why = "seeded", seeded.why
        elif seeded is not None and seeded.mode is None:
            owner, why = "undecided", seeding.UNDECIDED
        elif is_routed(tuner):
            owner = "routed"
        else:
            owner, why = "triton", why_unrouted(tuner)
    return Tuner(f"{kind.__module__}.{kind.__qualname__}", kernel, owner, ran, why)


def census() -> list[Tuner]:
    """Every Triton autotuner alive in the process (our decorator's, libraries' routed ones and
    those left on Triton), sorted by owner and kernel. Reads the garbage collector's objects:
    for end-of-run reports, not hot paths."""
    rows = []
    for obj in gc.get_objects():
        try:
            if not issubclass(type(obj), TritonAutotuner) or SHADOW_ATTR in vars(obj):
                continue
            rows.append(describe(obj))
        except Exception:  # noqa: BLE001 - a half-built object must not break the census
            continue
    return sorted(rows, key=lambda t: (t.owner, t.kernel, t.kind))
