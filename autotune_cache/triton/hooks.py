"""Everything the package writes into Triton, and when: the one module that writes Triton globals.

Importing `autotune_cache.triton` writes nothing. Each write below happens only when something
asks for it, and only once Triton is imported (startup.py's post-import hook runs the requests
made before that):

- **`knobs.runtime.jit_cache_hook`**, Triton's own extension point for "a compile is about to
  start": one dispatcher, ours, chained in front of the hook that was set before it. It is
  installed when the process cache loads or dumps results (plain-kernel warm-ups, warmups.py),
  when a tuning records its candidates' specialization data (compile.py) or when a loaded winner
  compiled ahead splits its back end off (preload_job.py, offload.py). For each compile it
  calls the recorder of the calling thread, if any (`recording`), then the warm-up listener, if
  any (`set_compile_listener`), then the previous hook, whose answer (skip the compile or not)
  is returned. A hook the program sets after ours replaces it, as Triton's knob always does,
  until the next tuning or compile ahead chains ours in front of it again.
- **`Autotuner.__init__`, `run`, `_bench` and the `do_bench` property** of Triton's class:
  wrapped (classroute.py) when the switch (`--autotune_all_kernels`, routing.install) or strict
  mode (`--require_complete_autotune_results`) asks for it, never otherwise.
- **`autotune`** of `triton` and the modules that re-export it: replaced while routing.install
  is in effect, restored by routing.uninstall.

Why one module: five modules used to write Triton globals, two of them the same
`jit_cache_hook`, each chaining to whatever the other had left there. One dispatcher makes the
order fixed and the chain one link long; the layering test checks that no other module writes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

log = logging.getLogger(__name__)

CompileListener = Callable[[dict[str, Any]], None]

_lock = threading.Lock()
_previous: Any = None
_listener: CompileListener | None = None
_thread = threading.local()  # .recorder: this thread's recorder (recording)


def runtime_knobs() -> Any:
    """triton.knobs.runtime, or None on a Triton without a `jit_cache_hook`."""
    try:
        from triton import knobs
    except ImportError:
        return None
    runtime = getattr(knobs, "runtime", None)
    return runtime if runtime is not None and hasattr(runtime, "jit_cache_hook") else None


def install_jit_hook() -> bool:
    """Chain the dispatcher in front of Triton's `jit_cache_hook`, unless it is there already;
    whether it is (False on a Triton without the knob). A hook the program set after ours is
    chained behind ours again here, so it keeps running (and keeps its say)."""
    global _previous
    with _lock:
        knobs = runtime_knobs()
        if knobs is None:
            return False
        current = knobs.jit_cache_hook
        if current is not _dispatch:
            _previous = current
            knobs.jit_cache_hook = _dispatch
        return True


def set_compile_listener(listener: CompileListener) -> None:
    """The warm-up listener (warmups.py), called with the hook's keywords for every compile
    Triton starts; installs the dispatcher."""
    global _listener
    _listener = listener
    install_jit_hook()


@contextlib.contextmanager
def recording(recorder: CompileListener) -> Iterator[bool]:
    """Inside the block, `recorder` sees the hook's keywords of every compile the calling thread
    starts (Triton calls the hook synchronously in that thread); yields whether it can (False on
    a Triton without the knob)."""
    installed = install_jit_hook()
    outer = getattr(_thread, "recorder", None)
    _thread.recorder = recorder
    try:
        yield installed
    finally:
        _thread.recorder = outer


def _dispatch(*args: Any, **kw: Any) -> Any:
    recorder = getattr(_thread, "recorder", None)
    if recorder is not None:
        recorder(kw)
    listener = _listener
    if listener is not None:
        try:
            listener(kw)
        except Exception as e:  # noqa: BLE001 - never in the way of the user's launch
            log.debug("autotune_cache: compile listener: %s: %s", type(e).__name__, e)
    previous = _previous
    return previous(*args, **kw) if previous is not None else None


def wrap_methods(cls: type, wrappers: Mapping[str, Callable[..., Any]]) -> None:
    """Replace `cls`'s methods by `wrappers` (classroute.patch: Triton's Autotuner)."""
    for name, wrapper in wrappers.items():
        if isinstance(wrapper, (property, functools.cached_property)):
            if hasattr(wrapper, "__set_name__"):  # a cached_property is named by its class
                wrapper.__set_name__(cls, name)
        else:
            wrapper.__doc__ = getattr(cls, name).__doc__
        setattr(cls, name, wrapper)


def set_attribute(holder: Any, name: str, value: Any) -> None:
    """Set `holder.name` (routing: a module's `autotune`)."""
    setattr(holder, name, value)
