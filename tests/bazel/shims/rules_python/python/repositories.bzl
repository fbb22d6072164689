"""Offline shim of @rules_python//python:repositories.bzl for the Bazel 4.2.3 integration tests.

The tests run every Python target with the interpreter that runs pytest (a toolchain the
harness registers), so there is nothing to download or register here. Test-only.
"""

def py_repositories():
    """rules_python's own dependencies: none offline."""
    pass

def python_register_toolchains(name, python_version, **kwargs):  # buildifier: disable=unused-variable
    """A hermetic interpreter: the harness registers the test interpreter instead.

    Args:
      name: the toolchain repository's name.
      python_version: the Python version.
      **kwargs: ignored offline.
    """
    pass
