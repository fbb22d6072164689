"""History lives in docs/decisions/, one file per decision; docstrings say what code promises."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DECISIONS = ROOT / "docs" / "decisions"
HISTORY = re.compile(r"\bDecisions?\b(?: \(|:)|\bissue \d+", re.IGNORECASE)


def test_the_index_lists_every_decision_once():
    index = (DECISIONS / "README.md").read_text(encoding="utf-8")
    files = sorted(p.name for p in DECISIONS.glob("[0-9][0-9][0-9][0-9]-*.md"))
    assert files, "docs/decisions/ holds no decision"
    listed = re.findall(r"^- \[\d{4}\]\((\d{4}-[\w-]+\.md)\)", index, re.MULTILINE)
    assert listed == files, "docs/decisions/README.md's index must list every file, in order"
    numbers = [name[:4] for name in files]
    assert len(set(numbers)) == len(numbers), f"two decisions share a number: {numbers}"
    for name in files:
        text = (DECISIONS / name).read_text(encoding="utf-8")
        assert text.startswith(f"# {name[:4]}: "), f"{name}: start with '# {name[:4]}: Title'"
        for section in ("## Context", "## Decision", "## Consequences"):
            assert section in text, f"{name}: no {section} section (docs/decisions/README.md)"


def test_sources_carry_no_history():
    found = []
    for src in sorted((ROOT / "autotune_cache").rglob("*.py")):
        name = str(src.relative_to(ROOT))
        if src.name.endswith("_pb2.py"):
            continue
        for number, line in enumerate(src.read_text(encoding="utf-8").splitlines(), 1):
            if HISTORY.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    assert not found, ("move the decision or issue reference into docs/decisions/ (one file, "
                       "see its README) and keep what the code promises:\n" + "\n".join(found))

