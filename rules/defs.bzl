"""Public API of rules_autotune.

Load the macro with:

    load("@rules_autotune//rules:defs.bzl", "autotuned_py_test")

This file only re-exports; the implementation lives in `//rules/private`, which is not a public
API and may change without notice.
"""

load("//rules/private:autotuned_py_test.bzl", _autotuned_py_test = "autotuned_py_test")

autotuned_py_test = _autotuned_py_test
