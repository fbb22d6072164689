"""Offline shim of @rules_python//python:defs.bzl: re-exports Bazel 4's native Python rules.

rules_autotune loads py_test / py_binary / py_library from @rules_python (native Python rules
are gone in Bazel 9). Bazel 4.2.3 cannot download rules_python offline, so the integration
tests override the repository with this file.
"""

def py_binary(**kwargs):
    """Forwards to the native py_binary."""

    # buildifier: disable=native-py
    native.py_binary(**kwargs)

def py_library(**kwargs):
    """Forwards to the native py_library."""

    # buildifier: disable=native-py
    native.py_library(**kwargs)

def py_test(**kwargs):
    """Forwards to the native py_test."""

    # buildifier: disable=native-py
    native.py_test(**kwargs)

def py_runtime(**kwargs):
    """Forwards to the native py_runtime."""

    # buildifier: disable=native-py
    native.py_runtime(**kwargs)
