"""Offline shim of @rules_java//java:defs.bzl: re-exports Bazel 4's native Java rules."""

def _forward(rule_name):
    """Returns a macro that calls the native rule `rule_name` with the same arguments."""

    def _macro(**kwargs):
        getattr(native, rule_name)(**kwargs)

    return _macro

java_binary = _forward("java_binary")
java_import = _forward("java_import")
java_library = _forward("java_library")
java_lite_proto_library = _forward("java_lite_proto_library")
java_package_configuration = _forward("java_package_configuration")
java_plugin = _forward("java_plugin")
java_proto_library = _forward("java_proto_library")
java_runtime = _forward("java_runtime")
java_test = _forward("java_test")
java_toolchain = _forward("java_toolchain")
