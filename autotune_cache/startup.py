"""What AUTOTUNE_FLAGS asks of a process before its first kernel launch, wherever it can be done.

Two flags need work before any library builds its kernels:
- `--autotune_all_kernels`: the switch that routes third-party kernels (triton/routing.py,
  triton/classroute.py) must be on before a library decorates or constructs its tuners;
- `--require_complete_autotune_results`: Triton's own Autotuner class must be watched
  (classroute.patch), so that a tuning on Triton's autotuner fails instead of passing unseen.

Two entry points do it:
- `at_startup()`: the installed `autotune_cache_all_kernels.pth`, at interpreter start-up, in
  every process whose AUTOTUNE_FLAGS mentions either flag;
- `at_first_import()`: the first import of `autotune_cache`, in a process where the .pth did not
  run (`python -S` / `-I`, or the package only on PYTHONPATH, whose .pth files Python never
  processes). Installing there is in time when no library built tuners yet; those built before
  are named in one warning that says why the flag came late and what to do.

Neither raises: start-up and imports must go on. A problem is one line (or one warning) that
names the flag.
"""

from __future__ import annotations

import importlib.util
import sys
import warnings

from autotune_cache.config.flags import ENV_VAR, settings_from_env
from autotune_cache.foundation import env

ALL_KERNELS = "--autotune_all_kernels"
REQUIRE_COMPLETE = "--require_complete_autotune_results"
PTH_MARK = "_autotune_cache_pth_ran"  # set on sys by the .pth before it calls at_startup


def _mentioned() -> bool:
    flags = env.get(env.AUTOTUNE_FLAGS)
    return ALL_KERNELS[2:] in flags or REQUIRE_COMPLETE[2:] in flags


def _triton_installed() -> bool:
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        return False


def _apply(late: bool) -> None:
    """Install the switch or the watch as the flags say; `late`: at the first import of the
    package, not at start-up."""
    settings = settings_from_env()
    if not (settings.all_kernels or settings.require_complete):
        return
    if not _triton_installed():
        if settings.all_kernels:
            print(f"autotune_cache: {ENV_VAR} {ALL_KERNELS} has no effect: Triton is not "
                  "installed in this Python, so there are no Triton kernels to route",
                  file=sys.stderr)
        return
    import autotune_cache.triton  # noqa: F401 - patches Triton's Autotuner class at import
    from autotune_cache.triton import routing

    if not settings.all_kernels:
        return
    if not late:
        routing.install()
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", routing.UnroutedKernelsWarning)
        left = routing.install()
    kernels = [u.describe() for u in left]
    if kernels:
        shown = "\n".join(f"  {k}" for k in kernels[:10])
        more = f"\n  and {len(kernels) - 10} more" if len(kernels) > 10 else ""
        warnings.warn(
            f"autotune_cache: {ENV_VAR} {ALL_KERNELS} took effect late: the start-up hook "
            "(autotune_cache_all_kernels.pth) did not run in this process (python -S or -I, or "
            "autotune_cache only on PYTHONPATH), so the switch was installed at the first import "
            "of autotune_cache, after these were built; they stay on Triton's autotuner, "
            f"uncached:\n{shown}{more}\nFix: import autotune_cache (or call "
            "autotune_cache.triton.install()) before the libraries that build them, or "
            "pip-install the package so that its start-up hook runs.",
            routing.UnroutedKernelsWarning, stacklevel=3)


def at_startup() -> None:
    """The .pth hook's entry point (interpreter start-up)."""
    try:
        _apply(late=False)
    except Exception as e:  # noqa: BLE001 - start-up of every Python process depends on this
        first = (str(e).splitlines() or [""])[0]
        print(f"autotune_cache: autotune_cache_all_kernels.pth: {ENV_VAR} is not applied at "
              f"start-up ({type(e).__name__}: {first}); Triton's own tuners are neither routed "
              "nor watched", file=sys.stderr)


def at_first_import() -> None:
    """`autotune_cache/__init__.py`'s last step: do what the .pth would have done, when it did
    not run and the flags ask for it."""
    if hasattr(sys, PTH_MARK) or not _mentioned():
        return
    setattr(sys, PTH_MARK, True)  # once per process
    try:
        _apply(late=True)
    except Exception as e:  # noqa: BLE001 - importing the package must not fail on this
        first = (str(e).splitlines() or [""])[0]
        print(f"autotune_cache: {ENV_VAR} {ALL_KERNELS} / {REQUIRE_COMPLETE} is not applied "
              f"({type(e).__name__}: {first}); Triton's own tuners are neither routed nor "
              "watched", file=sys.stderr)
