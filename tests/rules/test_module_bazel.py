"""MODULE.bazel, read statically (Bazel 7+ cannot run here): the documented layout holds."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]



def _module_calls(name: str) -> list[dict[str, object]]:
    tree = ast.parse((REPO / "MODULE.bazel").read_text())
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == name:
            calls.append({k.arg: ast.literal_eval(k.value) for k in node.keywords})
    return calls


def test_the_ruleset_pip_hub_covers_every_supported_python_version() -> None:
    text = (REPO / "pyproject.toml").read_text()
    minimum = re.search(r'requires-python = ">=3\.(\d+)"', text).group(1)
    supported = {f"3.{minor}" for minor in range(int(minimum), 14)}
    toolchains = {c["python_version"] for c in _module_calls("python.toolchain")}
    hub = [c for c in _module_calls("pip.parse") if c["hub_name"] == "rules_autotune_pypi"]
    assert supported <= toolchains, (supported, toolchains)
    assert {c["python_version"] for c in hub} == supported
    assert len(hub) == len(supported)
    assert all(c["requirements_lock"] == "//:requirements_lock.txt" for c in hub)
    assert [c["python_version"] for c in _module_calls("python.toolchain")
            if c.get("is_default")] == ["3.11"]


def test_every_module_file_and_doc_names_the_same_rules_python_floor() -> None:
    """rules_python 1.8.0 (docs/bazel.md, "Compatibility", says why): the e2e module and the
    docs must show the version MODULE.bazel depends on."""
    (floor,) = [c["version"] for c in _module_calls("bazel_dep") if c["name"] == "rules_python"]
    pattern = re.compile(r'bazel_dep\(name = "rules_python", version = "([^"]+)"\)')
    for path in ("e2e/bzlmod/MODULE.bazel", "docs/bazel.md", "docs/quickstart-bazel-bzlmod.md"):
        assert set(pattern.findall((REPO / path).read_text())) == {floor}, path
