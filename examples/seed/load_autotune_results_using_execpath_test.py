"""Seed recipe, load step: the committed cache in `data`, its path from `$(execpath ...)`.

BUILD.bazel sets `env = {"AUTOTUNE_FLAGS": "--load_autotune_results_from=$(execpath ...)"}`,
exactly as XLA's seed shows for XLA_FLAGS. Every kernel lookup must hit: nothing is tuned.
"""

from __future__ import annotations

import os
import unittest

import seed_kernel

from autotune_cache import get_cache


class LoadUsingExecpathTest(unittest.TestCase):
    def test_every_lookup_hits_the_committed_cache(self) -> None:
        self.assertIn("--load_autotune_results_from=examples/seed/", os.environ["AUTOTUNE_FLAGS"])
        seed_kernel.run_all_sizes()
        stats = get_cache().stats
        self.assertEqual((stats.misses, stats.benchmarks), (0, 0), stats.summary_line())
        self.assertEqual(stats.hits, len(seed_kernel.SIZES), stats.summary_line())


if __name__ == "__main__":
    unittest.main()
