"""Seed recipe, load step with the `TEST_WORKSPACE/` prefix instead of `$(execpath ...)`.

`--load_autotune_results_from=TEST_WORKSPACE/examples/seed/...` resolves under
`$TEST_SRCDIR/$TEST_WORKSPACE/`, as XLA resolves the same prefix.
"""

from __future__ import annotations

import os
import unittest
from pathlib import Path

import seed_kernel

from autotune_cache import get_cache


class LoadFromTestWorkspaceTest(unittest.TestCase):
    def test_prefix_resolves_and_every_lookup_hits(self) -> None:
        expected = (Path(os.environ["TEST_SRCDIR"]) / os.environ["TEST_WORKSPACE"]
                    / "examples/seed/seed_kernel.autotune.textproto")
        self.assertEqual(get_cache().settings.load_from, (expected,))
        seed_kernel.run_all_sizes()
        stats = get_cache().stats
        self.assertEqual((stats.misses, stats.benchmarks), (0, 0), stats.summary_line())
        self.assertEqual(stats.hits, len(seed_kernel.SIZES), stats.summary_line())


if __name__ == "__main__":
    unittest.main()
