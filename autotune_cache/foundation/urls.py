"""Where the package's help text and messages send a reader for docs: a page the user has.

The project has no web address and no release tag yet, so no page is named by URL. The docs ship
with the code instead: the wheel carries docs/ inside the package (setup.py copies it next to
this package's modules), and a checkout (an editable install, or PYTHONPATH pointing at it) has
its own docs/. docs_url() names the first of the two that this copy of the package has, as an
absolute path, so the page it names is the one describing this copy's flags and options.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent
# The wheel's copy (setup.py's build_py), then the checkout's own docs/ beside the package.
DOCS_DIRS = (_PACKAGE / "docs", _PACKAGE.parent / "docs")
# What a reader is told when this copy has neither (a build that left the docs out).
CHECKOUT_NOTE = "in the rules_autotune checkout"


def docs_dir() -> Path | None:
    """The docs folder this copy of the package has, or None."""
    return next((d for d in DOCS_DIRS if (d / "quickstart-pytest.md").is_file()), None)


def docs_url(page: str) -> str:
    """Where to read docs page `page` ("pytest.md", "reference.md#flags"): its absolute path in
    the installed package or in the checkout this copy runs from, anchor kept; failing both,
    `docs/<page> in the rules_autotune checkout`. The name is kept from when it was a URL."""
    found = docs_dir()
    if found is None:
        return f"docs/{page} {CHECKOUT_NOTE}"
    return str(found / page)
