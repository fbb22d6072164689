"""When the package touches Triton: at the program's own first `import triton`, never before.

A user's program must behave exactly as without us, except that it tunes less. Triton reads
settings at its import (`TRITON_INTERPRET` decides how `tl.sum` and `tl.max` are built,
`TRITON_DEBUG` whether device-side asserts are kept), and programs set them in code: a
conftest.py's `os.environ.setdefault("TRITON_INTERPRET", "1")` on a machine with no GPU, an
example's environment module. So nothing here imports Triton. Whatever needs Triton is asked
for with foundation/import_hook.py's `when_triton_imported(action)`: now if Triton is imported,
else right after the program's own first `import triton`, before the module that imported it
goes on, so before any library can decorate or construct its tuners.

What is asked for, and by whom:

- `--autotune_all_kernels` (the switch that routes third-party kernels, triton/routing.py) and
  `--require_complete_autotune_results` (the watch on Triton's own Autotuner class,
  triton/classroute.py), from AUTOTUNE_FLAGS:
  - `at_startup()`: the installed `autotune_cache_all_kernels.pth`, at interpreter start-up, in
    every process whose AUTOTUNE_FLAGS mentions either flag. It imports this module and the
    package's `__init__` (both lazy: no protobuf, no Triton) and installs the finder;
  - `at_first_import()`: the first import of `autotune_cache`, in a process where the .pth did
    not run (`python -S`, or the package only on PYTHONPATH, whose .pth files Python never
    processes). When Triton was imported before, the switch comes late for the tuners built
    since: one warning names them, says why, and gives the fix.
- `compile_at_start(settings)`: a configuration that loads files, known before its first
  launch (the pytest plugin's before conftest.py files run; AUTOTUNE_FLAGS' at the import of
  `autotune_cache.triton`): triton/early.py, where it can help.
- `engage(settings)`: every cache the process configures (cache.py, through
  foundation/import_hook.py's `engage`, which the package's `__init__` points here): the class
  watch under the switch or strict mode, and the compile listener (plain-kernel warm-ups,
  triton/warmups.py) when the cache loads or dumps results. Without any of these, Triton is
  never written to (triton/hooks.py lists the writes).

Nothing here raises: start-up and imports must go on. A problem is one line (or one warning)
that names the flag.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from autotune_cache.foundation import env, import_hook, machine
from autotune_cache.foundation.import_hook import when_triton_imported

if TYPE_CHECKING:
    from autotune_cache.config.flags import Settings

ENV_VAR = "AUTOTUNE_FLAGS"
ALL_KERNELS = "--autotune_all_kernels"
REQUIRE_COMPLETE = "--require_complete_autotune_results"
PTH_MARK = "_autotune_cache_pth_ran"  # set on sys by the .pth before it calls at_startup

def engage(settings: Settings) -> None:
    """What a configured cache asks of Triton (cache.py calls this for every cache it installs):
    the watch on Triton's Autotuner class under the switch or strict mode, and the compile
    listener when it loads or dumps results; nothing otherwise."""
    watch = settings.all_kernels or settings.require_complete
    listen = settings.dump_to is not None or bool(settings.load_from)
    if (watch or listen) and import_hook.triton_installed():
        when_triton_imported(lambda: _engage(watch, listen))


def compile_at_start(settings: Settings) -> None:
    """The loaded files' winners and warm-ups compile from the program's own `import triton`
    on, as it defines their kernels (triton/early.py), where that can help: the files are
    loaded, --autotune_compile_at_start is on, a GPU device node exists and no remote compile
    cache serves the binaries. Asked for by the pytest plugin before conftest.py files run (a
    run that launches kernels) and by `autotune_cache.triton`'s import for AUTOTUNE_FLAGS, not
    by every configured cache: one made at a first launch would start it in the launch itself.
    Imports nothing now; never raises."""
    if not (settings.compile_at_start and settings.load_from) or settings.remote_compile_cache:
        return
    if not machine.gpu_node_present(machine.GPU_NODES) or not import_hook.triton_installed():
        return
    when_triton_imported(lambda: _compile_at_start(settings))


def _compile_at_start(settings: Settings) -> None:
    try:
        from autotune_cache.triton import early

        early.start(settings)
    except Exception as e:  # noqa: BLE001 - the program's imports must go on
        import logging

        logging.getLogger(__name__).debug("autotune_cache: no compile ahead at start: %s", e)


def _engage(watch: bool, listen: bool) -> None:
    if watch:
        from autotune_cache.triton import classroute

        classroute.patch()
    if listen:
        from autotune_cache.triton import warmups

        warmups.install()


def _mentioned() -> bool:
    flags = env.get(env.AUTOTUNE_FLAGS)
    return ALL_KERNELS[2:] in flags or REQUIRE_COMPLETE[2:] in flags


def _apply(late: bool) -> None:
    """Install the switch or the watch as AUTOTUNE_FLAGS says (Triton is imported); `late`:
    Triton was imported before the package, so tuners may have been built before the switch."""
    from autotune_cache.config.flags import settings_from_env

    settings = settings_from_env()
    if settings.require_complete or settings.all_kernels:
        _engage(watch=True, listen=False)
    if not settings.all_kernels:
        return
    from autotune_cache.triton import routing

    if not late:
        routing.install()
        return
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", routing.UnroutedKernelsWarning)
        left = routing.install()
    kernels = [u.describe() for u in left]
    if kernels:
        shown = "\n".join(f"  {k}" for k in kernels[:10])
        more = f"\n  and {len(kernels) - 10} more" if len(kernels) > 10 else ""
        warnings.warn(
            f"autotune_cache: {ENV_VAR} {ALL_KERNELS} took effect late: the start-up hook "
            "(autotune_cache_all_kernels.pth) did not run in this process (python -S, or "
            "autotune_cache only on PYTHONPATH) and Triton was imported before autotune_cache, "
            "so the switch was installed at the first import of autotune_cache, after these "
            f"were built; they stay on Triton's autotuner, uncached:\n{shown}{more}\nFix: "
            "import autotune_cache (or call autotune_cache.triton.install()) before the "
            "libraries that build them, or pip-install the package so that its start-up hook "
            "runs.", routing.UnroutedKernelsWarning, stacklevel=4)


def _apply_guarded(late: bool, where: str) -> None:
    try:
        _apply(late)
    except Exception as e:  # noqa: BLE001 - start-up and imports must go on
        first = (str(e).splitlines() or [""])[0]
        print(f"autotune_cache: {where}: {ENV_VAR} {ALL_KERNELS} / {REQUIRE_COMPLETE} is not "
              f"applied ({type(e).__name__}: {first}); Triton's own tuners are neither routed "
              "nor watched", file=sys.stderr)


def at_startup() -> None:
    """The .pth hook's entry point (interpreter start-up): the flags take effect when the
    program imports Triton. Imports nothing else."""
    if not import_hook.triton_installed():
        if ALL_KERNELS[2:] in env.get(env.AUTOTUNE_FLAGS):
            print(f"autotune_cache: {ENV_VAR} {ALL_KERNELS} has no effect: Triton is not "
                  "installed in this Python, so there are no Triton kernels to route",
                  file=sys.stderr)
        return
    _at_triton_import("autotune_cache_all_kernels.pth")


def at_first_import() -> None:
    """`autotune_cache/__init__.py`'s last step: do what the .pth would have done, when it did
    not run and the flags ask for it."""
    if _mentioned():
        at_runner_start("import autotune_cache")


def at_runner_start(where: str) -> None:
    """What the .pth does, once per process, for a runner that knows the flags ask for the
    switch or the watch (the Bazel test wrapper, before it runs the test's main; `where` names
    it in a problem's line): applied right after the program's own `import triton`, so that
    what the main sets first (TRITON_INTERPRET) holds."""
    if hasattr(sys, PTH_MARK):
        return  # the .pth, or an earlier call, asked already
    vars(sys)[PTH_MARK] = True
    _at_triton_import(where)


def _at_triton_import(where: str) -> None:
    if import_hook.triton_installed():
        late = import_hook.triton_imported()  # Triton came first: tuners may be built already
        when_triton_imported(lambda: _apply_guarded(late, where))
