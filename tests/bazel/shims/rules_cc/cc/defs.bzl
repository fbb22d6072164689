"""Offline shim of @rules_cc//cc:defs.bzl: re-exports Bazel 4's native C++ rules.

@bazel_tools loads this file; the real rules_cc would be downloaded, which the offline
integration tests cannot do.
"""

def _forward(rule_name):
    """Returns a macro that calls the native rule `rule_name` with the same arguments."""

    def _macro(**kwargs):
        getattr(native, rule_name)(**kwargs)

    return _macro

cc_binary = _forward("cc_binary")
cc_import = _forward("cc_import")
cc_library = _forward("cc_library")
cc_proto_library = _forward("cc_proto_library")
cc_test = _forward("cc_test")
cc_toolchain = _forward("cc_toolchain")
cc_toolchain_suite = _forward("cc_toolchain_suite")
fdo_prefetch_hints = _forward("fdo_prefetch_hints")
fdo_profile = _forward("fdo_profile")
objc_import = _forward("objc_import")
objc_library = _forward("objc_library")
