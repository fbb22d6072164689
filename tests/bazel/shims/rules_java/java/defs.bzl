"""Offline shim of @rules_java//java:defs.bzl: re-exports Bazel 4's native Java rules."""

def java_binary(**kwargs):
    """Forwards to the native java_binary."""

    # buildifier: disable=native-java-binary
    native.java_binary(**kwargs)

def java_import(**kwargs):
    """Forwards to the native java_import."""

    # buildifier: disable=native-java-import
    native.java_import(**kwargs)

def java_library(**kwargs):
    """Forwards to the native java_library."""

    # buildifier: disable=native-java-library
    native.java_library(**kwargs)

def java_lite_proto_library(**kwargs):
    """Forwards to the native java_lite_proto_library."""

    # buildifier: disable=native-java-lite-proto
    native.java_lite_proto_library(**kwargs)

def java_package_configuration(**kwargs):
    """Forwards to the native java_package_configuration."""

    # buildifier: disable=native-java-package-config
    native.java_package_configuration(**kwargs)

def java_plugin(**kwargs):
    """Forwards to the native java_plugin."""

    # buildifier: disable=native-java-plugin
    native.java_plugin(**kwargs)

def java_proto_library(**kwargs):
    """Forwards to the native java_proto_library."""

    # buildifier: disable=native-java-proto
    native.java_proto_library(**kwargs)

def java_runtime(**kwargs):
    """Forwards to the native java_runtime."""

    # buildifier: disable=native-java-runtime
    native.java_runtime(**kwargs)

def java_test(**kwargs):
    """Forwards to the native java_test."""

    # buildifier: disable=native-java-test
    native.java_test(**kwargs)

def java_toolchain(**kwargs):
    """Forwards to the native java_toolchain."""

    # buildifier: disable=native-java-toolchain
    native.java_toolchain(**kwargs)
