"""e2e/workspace on Bazel 4.2.3: a user's WORKSPACE-mode workspace, consuming the ruleset through
local_repository exactly as committed (no file added to either), through the whole cycle:

a first `bazel test` fails with the regen hint (no cache yet); `regen_cache` writes the shared
cache and the one in another package; the tests pass with 0 benchmarks; a stale kernel edit
fails with the hint; `regen_cache --check` sees it, and is clean again once the edit is undone.
One of the Triton tests is a pytest-style file (`runner = "pytest"`, pytest from the user's hub).
The JAX test passes on CPU (XLA ignores its GPU autotune flags there).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from autotune_cache.formats import load_results
from tests.bazel.harness import Workspace, bazel_or_skip

TRITON_TESTS = ["//kernels:small_test", "//kernels:large_test", "//kernels:other_package_test",
                "//kernels:pytest_style_test"]
# Hits per test once regenerated: one size each, the pytest file two (parametrized).
HITS = {"//kernels:pytest_style_test": 2}
REGEN = ["run", "@rules_autotune//tools:regen_cache", "--"]


@pytest.fixture(scope="module")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    """A scratch copy of the ruleset with e2e/workspace inside it, as in the repository."""
    bazel = bazel_or_skip()
    base = tmp_path_factory.mktemp("bazel_e2e")
    ws = Workspace.create_e2e(base, base / "output_user_root", bazel)
    try:
        yield ws
    finally:
        ws.release()


@pytest.mark.bazel
def test_e2e_workspace_cycle(e2e: Workspace) -> None:
    ws = e2e
    shared = ws.root / "kernels/kernels.autotune.textproto"
    other = ws.root / "caches/other_package.autotune.textproto"
    own = ws.root / "kernels/pytest_style_test.autotune.textproto"
    assert not shared.exists() and not other.exists() and not own.exists()

    first = ws.run("test", "//kernels:small_test", "//kernels:large_test", check=False)
    assert first.returncode == 3, first.output
    assert "bazel run //kernels:small_test.regen" in ws.test_log("//kernels:small_test")

    regen = ws.run(*REGEN, "//kernels/...")
    assert "kernels/kernels.autotune.textproto: ok: created" in regen.output, regen.output
    assert "(shared by 2 tests)" in regen.output, regen.output
    assert "caches/other_package.autotune.textproto: ok: created" in regen.output, regen.output
    assert "kernels/pytest_style_test.autotune.textproto: ok: created" in regen.output
    assert len(load_results(shared)) == 2 and len(load_results(other)) == 1
    assert len(load_results(own)) == 2

    ws.run("test", *TRITON_TESTS, "//jax_tests:matmul_test")
    for label in TRITON_TESTS:
        log = ws.test_log(label)
        hits = HITS.get(label, 1)
        # The library's exit line; under runner = "pytest", the plugin's summary replaces it.
        assert re.search(rf"^(autotune_cache: {hits} hits, 0 misses, 0 stale|{hits} hits, "
                         rf"0 misses \(0 stale\)), 0 benchmarks", log, re.M), log
    assert "2 passed" in ws.test_log("//kernels:pytest_style_test")

    kernel = ws.root / "kernels/affine.py"
    original = kernel.read_text()
    kernel.write_text(original.replace("x * alpha + beta", "beta + x * alpha"))
    try:
        stale = ws.run("test", "//kernels:small_test", check=False)
        assert stale.returncode == 3, stale.output
        assert "bazel run //kernels:small_test.regen" in ws.test_log("//kernels:small_test")
        check = ws.run(*REGEN, "--check", "//kernels/...", check=False)
        assert check.returncode == 1 and "would change" in check.output, check.output
    finally:
        kernel.write_text(original)
    assert ws.run(*REGEN, "--check", "//kernels/...").returncode == 0
