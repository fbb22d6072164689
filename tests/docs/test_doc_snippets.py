"""The docs' shell and Python snippets that are marked cheap run, in order, as a reader would.

Markers (an HTML comment on the line before a fenced block):
- `<!-- doc-test: cheap -->` runs the block: `sh` blocks with `bash -euo pipefail`, `python` blocks
  saved to a file and run with this interpreter; `<!-- doc-test: cheap exit=1 -->` expects
  that exit status;
- `<!-- doc-test: file=NAME -->` writes the block to NAME, for the blocks after it.
Unmarked blocks are not run (they need a GPU, Bazel, a network install, or are output).
Each doc runs in a fresh directory holding a link to the repository's examples/, with this
checkout's autotune_cache and its console scripts first on the paths.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^<!--\s*doc-test:\s*(?P<spec>[^>]*?)\s*-->[ \t]*\n```(?P<lang>[\w-]*)[ \t]*\n"
                   r"(?P<body>.*?)^```", re.S | re.M)
MARKER = re.compile(r"^<!--\s*doc-test:", re.M)


@dataclass(frozen=True)
class Snippet:
    doc: str
    line: int
    spec: str
    lang: str
    body: str


def snippets(doc: Path) -> list[Snippet]:
    text = doc.read_text()
    found = [Snippet(doc.name, text.count("\n", 0, m.start()) + 1, m.group("spec"),
                     m.group("lang"), m.group("body")) for m in BLOCK.finditer(text)]
    # A marker that is not right before a fenced block would silently run nothing.
    assert len(found) == len(MARKER.findall(text)), f"{doc}: a doc-test marker has no block"
    return found


MARKED = [d for d in DOCS if snippets(d)]


def plugin_env(python: str = sys.executable, checkout: bool = True) -> dict[str, str]:
    """The environment a reader's shell has: `python`'s scripts first on PATH and, with
    `checkout`, this checkout's autotune_cache first on the import path (without it, the
    package installed for `python` is what runs: tests/packaging)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AUTOTUNE_", "PYTEST_", "TRITON_INTERPRET", "PYTHONPATH"))}
    env["PATH"] = f"{Path(python).parent}{os.pathsep}{env.get('PATH', '')}"
    if not checkout:
        return env
    env["PYTHONPATH"] = str(ROOT)
    installed = {ep.name for ep in metadata.entry_points(group="pytest11")}
    if "autotune_cache.pytest_plugin" not in installed:
        # A checkout used without `pip install -e .` (this repo's tests may run that way).
        env["PYTEST_PLUGINS"] = "autotune_cache.pytest_plugin"
    return env


def run(snippet: Snippet, cwd: Path, env: dict[str, str], python: str = sys.executable) -> None:
    if snippet.spec.startswith("file="):
        (cwd / snippet.spec.removeprefix("file=")).write_text(snippet.body)
        return
    words = snippet.spec.split()
    assert words[0] == "cheap", f"{snippet.doc}:{snippet.line}: unknown marker {snippet.spec!r}"
    expect = int(words[1].removeprefix("exit=")) if len(words) > 1 else 0
    if snippet.lang in ("sh", "bash", "shell"):
        cmd = ["bash", "-euo", "pipefail", "-c", snippet.body]
    elif snippet.lang == "python":
        # From a file, as a reader would save it: Triton's interpreter reads kernels' source.
        script = cwd / f"snippet_{Path(snippet.doc).stem}_{snippet.line}.py"
        script.write_text(snippet.body)
        cmd = [python, script.name]
    else:
        raise AssertionError(f"{snippet.doc}:{snippet.line}: cannot run a {snippet.lang!r} block")
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == expect, (
        f"{snippet.doc}:{snippet.line} exited {proc.returncode} (expected {expect}):\n"
        f"{snippet.body}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}")


def test_docs_have_cheap_snippets():
    names = {d.name for d in MARKED}
    assert {"quickstart-pytest.md", "reference.md", "pytest.md", "staleness.md",
            "migrating.md"} <= names


@pytest.mark.parametrize("doc", MARKED, ids=lambda d: d.name)
def test_cheap_snippets_run(doc: Path, tmp_path: Path):
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = plugin_env()
    for snippet in snippets(doc):
        run(snippet, tmp_path, env)
