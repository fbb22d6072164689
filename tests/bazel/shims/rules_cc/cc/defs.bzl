"""Offline shim of @rules_cc//cc:defs.bzl: re-exports Bazel 4's native C++ rules.

@bazel_tools loads this file; the real rules_cc would be downloaded, which the offline
integration tests cannot do.
"""

def cc_binary(**kwargs):
    """Forwards to the native cc_binary."""

    # buildifier: disable=native-cc-binary
    native.cc_binary(**kwargs)

def cc_import(**kwargs):
    """Forwards to the native cc_import."""

    # buildifier: disable=native-cc-import
    native.cc_import(**kwargs)

def cc_library(**kwargs):
    """Forwards to the native cc_library."""

    # buildifier: disable=native-cc-library
    native.cc_library(**kwargs)

def cc_proto_library(**kwargs):
    """Forwards to the native cc_proto_library."""

    # buildifier: disable=native-cc-proto
    native.cc_proto_library(**kwargs)

def cc_test(**kwargs):
    """Forwards to the native cc_test."""

    # buildifier: disable=native-cc-test
    native.cc_test(**kwargs)

def cc_toolchain(**kwargs):
    """Forwards to the native cc_toolchain."""

    # buildifier: disable=native-cc-toolchain
    native.cc_toolchain(**kwargs)

def cc_toolchain_suite(**kwargs):
    """Forwards to the native cc_toolchain_suite."""

    # buildifier: disable=native-cc-toolchain-suite
    native.cc_toolchain_suite(**kwargs)

def fdo_prefetch_hints(**kwargs):
    """Forwards to the native fdo_prefetch_hints."""

    # buildifier: disable=native-cc-fdo-prefetch-hints
    native.fdo_prefetch_hints(**kwargs)

def fdo_profile(**kwargs):
    """Forwards to the native fdo_profile."""

    # buildifier: disable=native-cc-fdo-profile
    native.fdo_profile(**kwargs)

def objc_import(**kwargs):
    """Forwards to the native objc_import."""

    # buildifier: disable=native-cc-objc-import
    native.objc_import(**kwargs)

def objc_library(**kwargs):
    """Forwards to the native objc_library."""

    # buildifier: disable=native-cc-objc-library
    native.objc_library(**kwargs)
