"""The label flags //:protobuf, //:filelock and //:pytest need no `scope = "universal"` on Bazel
8/9 (bazel#26909: Starlark flags reset to their defaults in the exec configuration) because no
rule of the ruleset builds anything in the exec configuration. This reads the ruleset's Starlark
and BUILD files and fails when that stops being true, so that docs/bazel.md ("Label flags in the
exec configuration") is looked at again."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# What would put a target that reads the label flags into the exec configuration.
EXEC_CONFIGURATION = re.compile(r'cfg\s*=\s*"(exec|host)"|\bexec_tools\s*=|\btools\s*=|\bgenrule\(')


def ruleset_files() -> list[Path]:
    """The Starlark and BUILD files a user's build loads from the ruleset."""
    files = [REPO / "BUILD.bazel", *sorted((REPO / "rules").rglob("*.bzl")),
             *sorted((REPO / "rules").rglob("BUILD.bazel")), REPO / "tools/BUILD.bazel"]
    return [f for f in files if f.is_file()]


def test_nothing_of_the_ruleset_is_built_in_the_exec_configuration() -> None:
    found = [f"{path.relative_to(REPO)}: {match.group(0)}"
             for path in ruleset_files()
             for match in EXEC_CONFIGURATION.finditer(path.read_text())]
    assert not found, (
        "the ruleset now builds something in the exec configuration; on Bazel 8/9 the label "
        "flags //:protobuf, //:filelock and //:pytest reset to their defaults there unless "
        "declared scope = \"universal\" (which Bazel 4-8 reject): revisit docs/bazel.md, "
        f"\"Label flags in the exec configuration\": {found}")


def test_the_label_flags_are_the_documented_ones() -> None:
    declared = re.findall(r'label_flag\(\s*name = "(\w+)"', (REPO / "BUILD.bazel").read_text())
    assert declared == ["protobuf", "filelock", "pytest"]
    assert "scope" not in (REPO / "BUILD.bazel").read_text()
