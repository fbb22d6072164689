"""Where the project lives, named once for the package's code: its help text and messages link
to the docs there, since docs/ is not in the wheel. pyproject.toml's [project.urls] names the same
home (tests/packaging checks the wheel's Project-URLs against HOMEPAGE)."""

from __future__ import annotations

from autotune_cache.version import __version__

HOMEPAGE = "https://github.com/rules-autotune/rules_autotune"


def docs_url(page: str) -> str:
    """The docs page of the installed version, at its release tag: `docs_url("pytest.md")`.

    Versioned, not main's, so the page describes the flags and options this copy has; the
    version comes from autotune_cache/version.py, so a release bumps nothing here. The tag
    exists once tools/release.sh has made it and it is pushed."""
    return f"{HOMEPAGE}/blob/v{__version__}/docs/{page}"
