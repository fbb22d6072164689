"""A test whose cache lives in another package (//caches)."""

import unittest

from kernels import affine


class OtherPackageTest(unittest.TestCase):
    def test_medium(self) -> None:
        affine.check(300)


if __name__ == "__main__":
    unittest.main()
