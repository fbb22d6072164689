"""The package's version: one of its three places (docs/release.md; tests/packaging checks they
agree). Its own module, so the package's modules read it without importing the package itself
(which imports them: an import cycle)."""

__version__ = "0.1.0"
