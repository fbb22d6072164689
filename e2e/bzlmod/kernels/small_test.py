"""One of two tests that share kernels.autotune.textproto."""

import unittest

from kernels import affine


class SmallTest(unittest.TestCase):
    def test_small(self) -> None:
        affine.check(100)


if __name__ == "__main__":
    unittest.main()
