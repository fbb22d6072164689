"""Seed recipe, dump step: tune, then dump every result to `TEST_UNDECLARED_OUTPUTS_DIR/`.

`shard_count = 1` in BUILD.bazel: one process must see every result. After the run the dump is
in bazel-testlogs/examples/seed/dump_autotune_results_to_test_outputs_test/test.outputs/; commit
it as seed_kernel.autotune.textproto (autotuned_py_test's `.regen` target automates this).
"""

from __future__ import annotations

import os
import unittest
from pathlib import Path

import seed_kernel

from autotune_cache import get_cache
from autotune_cache.formats import load_results


class DumpToTestOutputsTest(unittest.TestCase):
    def test_dump_holds_one_entry_per_size(self) -> None:
        dump = Path(os.environ["TEST_UNDECLARED_OUTPUTS_DIR"]) / "autotune_cache.textproto"
        self.assertEqual(get_cache().settings.dump_to, dump)
        seed_kernel.run_all_sizes()
        get_cache().finish_dump()  # the dump is written once, at the end of the run
        problems = sorted(e.key.problem for e in load_results(dump)
                          if e.key.kernel == "affine_kernel")
        self.assertEqual(len(problems), len(seed_kernel.SIZES), problems)


if __name__ == "__main__":
    unittest.main()
