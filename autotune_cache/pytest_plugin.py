"""The pytest plugin: `--autotune-load/-dump/-cache-dir/-require-complete` for plain pytest runs.

Registered through the `pytest11` entry point `autotune_cache.pytest_plugin` (the module's own
name, so `-p autotune_cache.pytest_plugin` and the entry point are one plugin, never two). It is
inert unless one of its options is given: without them it registers nothing but the options, and
AUTOTUNE_FLAGS alone configures the library exactly as outside pytest.

- Each option is the twin of one AUTOTUNE_FLAGS flag (OPTIONS below), parsed by that flag's own
  parser; its messages are the flag's, prefixed with the option's name.
- Options and AUTOTUNE_FLAGS combine: files to load are the union (AUTOTUNE_FLAGS' files first);
  every other twin must agree with AUTOTUNE_FLAGS when both give it, else a usage error names
  both. AUTOTUNE_FLAGS flags without a twin apply unchanged.
- The process-wide cache is configured once at pytest_configure (a bad flag or a missing file is a
  usage error before any test runs); nothing is exported to os.environ.
- Misses are attributed to the running test by a listener on the configured Cache
  (`Cache.add_listener`). Under require-complete a miss raises MissingResultError from the kernel
  launch, failing that test only; a test that swallows the error is failed after its call with
  the same message.
- Under pytest-xdist every worker dumps to its own partial file and the controller merges them;
  without a cache directory the workers share a temporary one. A key two workers tuned
  differently keeps the faster winner, and a warning names each such key.
docs/pytest.md explains this to users; the reasons: docs/decisions/0008-pytest-plugin.md.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest

from autotune_cache.config.flags import (
    ENV_VAR,
    MACRO_ENV_VAR,
    Settings,
)
from autotune_cache.foundation import compile_helpers, import_hook
from autotune_cache.foundation import env as autotune_env
from autotune_cache.foundation.import_hook import triton_installed, when_triton_imported
from autotune_cache.foundation.urls import docs_url
from autotune_cache.pytest.options import (
    _HELPERS_KEY,
    OPTIONS,
    Option,
    args_from_flags,
    option_values,
    resolve_settings,
)
from autotune_cache.pytest.runner import RunnerPlugin
from autotune_cache.pytest.summary import Miss, MissRecorder, add_stats, summary_lines
from autotune_cache.pytest.xdist import XdistControllerPlugin, _xdist_controller, merge_partials

# The plugin's public names, wherever their role's module defines them.
__all__ = ["OPTIONS", "Miss", "MissRecorder", "Option", "RunnerPlugin", "XdistControllerPlugin",
           "active", "add_stats", "args_from_flags", "merge_partials", "option_values",
           "resolve_settings", "summary_lines"]

BLOCK_NAME = "autotune_cache"


def active(config: pytest.Config) -> bool:
    """Whether any of the plugin's options was given, or AUTOTUNE_FLAGS is set: then the
    process-wide cache is configured up front (a bad flag stops the run once, before any
    test) and the run gets the summary, short stale-cache failures and require-complete's
    session verdict.

    `-p no:autotune_cache` keeps the plugin out of the run (the library itself still reads
    AUTOTUNE_FLAGS when a kernel runs); an --autotune-* option given with it is a usage error,
    since it would silently do nothing."""
    if config.pluginmanager.is_blocked(BLOCK_NAME):
        # Ini settings are a project's defaults, which -p no: switches off; the command line is
        # this run's request.
        asked = [o.name for o in OPTIONS if config.getoption(o.dest) not in (None, False)]
        if asked:
            raise pytest.UsageError(
                f"the autotune_cache plugin is disabled with -p no:{BLOCK_NAME}, so {asked[0]} "
                "would do nothing; drop one of the two")
        return False
    return _asked(option_values(config))


def _asked(values: dict[str, object]) -> bool:
    """Whether any option has a value (`values`: option_values) or AUTOTUNE_FLAGS is set."""
    return any(v not in (None, False) for v in values.values()) \
        or any(autotune_env.get(name).strip() for name in (ENV_VAR, MACRO_ENV_VAR))



def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("autotune_cache",
                           f"autotune results cache (docs: {docs_url('pytest.md')})")
    for o in OPTIONS:
        if o.metavar is None:
            group.addoption(o.name, action="store_true", dest=o.dest, default=False, help=o.help)
        elif o.dest == "autotune_load":
            group.addoption(o.name, action="append", dest=o.dest, metavar=o.metavar,
                            default=None, help=o.help)
        else:
            group.addoption(o.name, action="store", dest=o.dest, metavar=o.metavar, default=None,
                            help=o.help)
        # The same setting in pyproject.toml [tool.pytest.ini_options] / pytest.ini; the
        # command line wins (a load option adds to the ini's files).
        parser.addini(o.dest, type="bool" if o.metavar is None else "string", default=None,
                      help=f"ini twin of {o.name}")



@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """--autotune-all-kernels (or its ini twin) switches the routing on before pytest imports
    the rootdir's conftest.py files, which often import the library whose kernels it routes.
    (Plugins given with -p are imported earlier still: AUTOTUNE_FLAGS=--autotune_all_kernels
    covers them, at interpreter start-up.)"""
    if early_config.pluginmanager.is_blocked(BLOCK_NAME):
        return
    option = getattr(early_config.known_args_namespace, "autotune_all_kernels", False)
    if option or early_config.getini("autotune_all_kernels"):
        _route_all_kernels()
    values = option_values(early_config, early=True)
    settings = None
    if _asked(values):
        with contextlib.suppress(pytest.UsageError):  # pytest_configure reports it
            settings, _ = resolve_settings(values)
    _start_compile_helpers(early_config, settings, early_config.known_args_namespace)
    if settings is not None and _runs_tests_early(early_config):
        # The loaded winners compile as conftest.py files import the libraries (triton/early.py).
        import_hook.compile_at_start(settings)


def _runs_tests_early(config: pytest.Config) -> bool:
    """Whether this process will launch kernels, as far as the command line says before
    pytest_configure: not an option that launches nothing, not pytest-xdist's controller (its
    workers compile ahead, each for itself)."""
    options = config.known_args_namespace
    if any(getattr(options, dest, False) for dest in _LAUNCHES_NOTHING):
        return False
    if hasattr(config, "workerinput") or autotune_env.xdist_worker() is not None:
        return True  # a worker (its workerinput comes after this hook; its variable before)
    return not getattr(options, "numprocesses", None) and \
        getattr(options, "dist", "no") in ("no", None)


# pytest options under which a run launches no kernel (their dests).
_LAUNCHES_NOTHING = ("help", "version", "collectonly", "markers", "showfixtures",
                     "show_fixtures_per_test", "setupplan")


def _start_compile_helpers(config: pytest.Config, settings: Settings | None,
                           options: object) -> None:
    """Start the compile helpers for the loaded files (foundation/compile_helpers.py: separate
    processes, started before the conftest.py files import the libraries, and started again at
    pytest_configure if a conftest.py changed what they compile); stop any when none apply
    (`settings` None: the plugin is inactive, or a flag is bad)."""
    files: tuple[Path, ...] = ()
    count = 0
    launches = not any(getattr(options, dest, False) for dest in _LAUNCHES_NOTHING)
    # With the remote compile cache the process reads binaries from the server, not from the
    # local cache the helpers fill.
    if settings is not None and launches and not settings.remote_compile_cache:
        files, count = settings.load_from, settings.compile_helpers
    shared = getattr(config, "workerinput", {}).get(_HELPERS_KEY)
    if shared is not None and count:  # an xdist worker: the controller's helpers
        compile_helpers.attach(shared, files, owner=config)
    else:
        compile_helpers.start(files, count, owner=config)


def _route_all_kernels() -> None:
    """The switch, installed when the run imports Triton (a conftest.py may set TRITON_INTERPRET
    or other settings first: startup.py), or now if it did."""
    if triton_installed():
        when_triton_imported(_install_routing)


def _install_routing() -> None:
    from autotune_cache.triton.routing import install

    install()


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    if not active(config):
        compile_helpers.stop(owner=config)
        return
    settings, combined = resolve_settings(option_values(config))
    _start_compile_helpers(config, settings, config.option)
    if settings.all_kernels:
        # Before the test modules import the libraries whose kernels it routes. The watch on
        # Triton's own tuners (strict mode) comes with the configured cache (startup.engage).
        _route_all_kernels()
    plugin: object
    if _xdist_controller(config):
        plugin = XdistControllerPlugin(config, settings, combined)
    else:
        plugin = RunnerPlugin(config, settings, combined)
    config.pluginmanager.register(plugin, "autotune_cache-session")


def pytest_collection_finish(session: pytest.Session) -> None:
    """The test modules are imported: before the first test, the compile-ahead from the start
    takes the plain kernels they defined (triton/early.py; nothing when it did not start)."""
    del session
    early = sys.modules.get("autotune_cache.triton.early")  # imported by the early start only
    if early is not None:
        early.scan()


def pytest_unconfigure(config: pytest.Config) -> None:
    """The compile helpers this run started and still running are stopped (their directory
    removed)."""
    compile_helpers.stop(owner=config)
