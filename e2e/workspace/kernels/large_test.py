"""The other test that shares kernels.autotune.textproto."""

import unittest

from kernels import affine


class LargeTest(unittest.TestCase):
    def test_large(self) -> None:
        affine.check(1000)


if __name__ == "__main__":
    unittest.main()
