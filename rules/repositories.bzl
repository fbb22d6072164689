"""WORKSPACE-mode setup of rules_autotune (Bazel 4-8 without bzlmod).

In the user's WORKSPACE, after rules_python and a Python toolchain are set up:

    load("@rules_autotune//rules:repositories.bzl", "rules_autotune_dependencies")

    rules_autotune_dependencies()

    load("@rules_autotune_pypi//:requirements.bzl", rules_autotune_install_deps = "install_deps")

    rules_autotune_install_deps()

This declares `@rules_autotune_pypi`, the ruleset's pip hub for protobuf, filelock and pytest
(the default of the `@rules_autotune//:protobuf`, `:filelock` and `:pytest` label flags). A user
whose own hub already has them can skip it and point the flags at their hub instead
(docs/bazel.md).
"""

load("@rules_python//python:pip.bzl", "pip_parse")

def rules_autotune_dependencies(python_interpreter_target = None, **kwargs):
    """Declares the `@rules_autotune_pypi` pip hub from the ruleset's requirements lock.

    Args:
      python_interpreter_target: the interpreter pip_parse resolves the lock with (for example
        `@python_3_11_host//:python`); None uses rules_python's default.
      **kwargs: passed on to rules_python's pip_parse (e.g. `extra_pip_args`).
    """
    if python_interpreter_target != None:
        kwargs["python_interpreter_target"] = python_interpreter_target
    pip_parse(
        name = "rules_autotune_pypi",
        requirements_lock = Label("//:requirements_lock.txt"),
        **kwargs
    )
