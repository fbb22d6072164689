"""The docs name only repository paths that exist: README.md, docs/**/*.md and the docstrings of
autotune_cache/ (a renamed or deleted file otherwise lives on in prose for years)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The repository's top-level folders: a path in prose that starts with one of them is ours.
TOP = [d for d in ("autotune_cache", "bench", "docs", "e2e", "examples", "rules", "tests", "tools")
       if (ROOT / d).is_dir()]
# Paths that are named on purpose although they are not in the repository, and why.
NOT_HERE = {
    "tests/t.py": "docs/bazel.md: the main of a user's target `t`",
}
PATH = re.compile(r"(?<![\w./@$-])((?:" + "|".join(TOP) + r")/[\w./-]*)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# Words that stand for a part of a path the reader fills in.
PLACEHOLDER = re.compile(r"[<>*…{}$]|\.\.\.|/x$|/x\.")

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SOURCES = sorted((ROOT / "autotune_cache").rglob("*.py"))


def docstrings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of the module's, its classes' and its functions' docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append((node.body[0].lineno, doc))
    return out


def named_paths(text: str) -> set[str]:
    """Repository paths named in `text`: those starting with a top-level folder."""
    found = set()
    for match in PATH.finditer(text):
        path = re.sub(r"(\.\w+)-[a-z]+$", r"\1", match.group(1).rstrip(".,;:"))  # x.py-style
        tail = text[match.end():match.end() + 1]
        if PLACEHOLDER.search(path) or tail in "<…*{$":
            continue
        found.add(path)
    return found


def missing(paths: set[str], base: Path = ROOT) -> list[str]:
    return sorted(p for p in paths if not (base / p).exists() and p not in NOT_HERE)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_doc_names_only_existing_paths(doc: Path):
    text = doc.read_text(encoding="utf-8")
    gone = missing(named_paths(text))
    links = {target.split("#", 1)[0] for target in LINK.findall(text)
             if re.fullmatch(r"[\w./-]+(#.*)?", target)}
    gone += [f"link {t}" for t in missing({t for t in links if t}, doc.parent)]
    assert not gone, (f"{doc.relative_to(ROOT)} names paths that do not exist: "
                      f"{', '.join(gone)}; fix or remove them")


def test_docstrings_name_only_existing_paths():
    gone = [f"{src.relative_to(ROOT)}:{line}: {p}"
            for src in SOURCES for line, doc in docstrings(src)
            for p in missing(named_paths(doc))]
    assert not gone, "docstrings name paths that do not exist:\n" + "\n".join(gone)


def test_the_paths_named_on_purpose_are_absent_and_still_named():
    text = "\n".join(d.read_text(encoding="utf-8") for d in DOCS)
    for path, why in NOT_HERE.items():
        assert not (ROOT / path).exists(), f"{path} exists now; drop it from NOT_HERE ({why})"
        assert path in named_paths(text), f"no doc names {path} any more; drop it from NOT_HERE"


def test_the_scan_finds_paths_and_skips_placeholders():
    text = ("see rules/private/test_main.py, tests/unit/ and docs/reference.md. Also "
            "tests/<name>.py, `tests/core/test_cache.py::test_x`, //tools:regen_cache and "
            "TEST_WORKSPACE/examples/seed/…")
    assert named_paths(text) == {"rules/private/test_main.py", "tests/unit/",
                                 "docs/reference.md", "tests/core/test_cache.py"}
    assert missing(named_paths(text)) == ["rules/private/test_main.py", "tests/unit/"]


# Every web address the package, its metadata and its docs name, by where it points. The
# project has no web address of its own (issue 52: an invented home and tag sent users nowhere):
# an address must be a third party's, or a placeholder the reader fills in.
ADDRESSED = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "pyproject.toml",
             ROOT / "setup.py", ROOT / "MANIFEST.in", *DOCS[1:], *SOURCES,
             *sorted((ROOT / ".bcr").glob("*"))]
THIRD_PARTY = {
    "download.pytorch.org": "PyTorch's CPU wheel index",
    "github.com/bazel-contrib/rules_python/": "rules_python's release archives",
    "keepachangelog.com": "the changelog's format",
    "semver.org": "the versioning scheme",
    "www.w3.org/2000/svg": "the SVG namespace of the report's charts",
    "example.com/": "a placeholder for where the reader hosts a copy",
    "github.com/{OWNER}/{REPO}": "the Bazel Central Registry's template, filled in on publishing",
}
# Web addresses (a `redis://HOST` or `grpc://` one names the reader's own server).
ADDRESS = re.compile(r"(?:git\+)?https?://[^\s)\"'>`\]]*")


def test_every_address_named_is_a_third_partys_or_a_placeholder():
    found = [f"{path.relative_to(ROOT)}: {url}" for path in ADDRESSED if path.is_file()
             for url in ADDRESS.findall(path.read_text(encoding="utf-8"))
             if not any(url.split("://", 1)[1].startswith(host) for host in THIRD_PARTY)]
    assert not found, ("addresses the project does not have (name a path in the checkout or the "
                       "package's own docs instead, or add a third party's host to "
                       "THIRD_PARTY with why):\n" + "\n".join(found))
