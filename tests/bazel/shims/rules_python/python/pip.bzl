"""Offline shim of @rules_python//python:pip.bzl for the Bazel 4.2.3 integration tests.

rules_python's pip_parse resolves a requirements lock into a hub repository by downloading
wheels; these tests run offline with every package already in the test interpreter's venv, so
this pip_parse writes a hub of empty py_library targets (one per package of the lock) and a
requirements.bzl whose install_deps() has nothing left to do. Test-only, never user-facing.
"""

def _hub_impl(ctx):
    packages = []
    for line in ctx.read(ctx.attr.requirements_lock).splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line.startswith("-") or "==" not in line:
            continue
        packages.append(line.split("==")[0].strip().lower().replace("-", "_").replace(".", "_"))
    ctx.file("WORKSPACE", "workspace(name = \"{}\")\n".format(ctx.name))
    ctx.file("BUILD.bazel", "")
    ctx.file("requirements.bzl", "def install_deps(**kwargs):\n    pass\n")
    for package in packages:
        ctx.file(package + "/BUILD.bazel", "\n".join([
            "py_library(",
            "    name = \"{}\",".format(package),
            "    visibility = [\"//visibility:public\"],",
            ")",
            "",
        ]))

_hub = repository_rule(
    implementation = _hub_impl,
    attrs = {"requirements_lock": attr.label(allow_single_file = True)},
)

def pip_parse(name, requirements_lock, **kwargs):  # buildifier: disable=unused-variable
    """Declares a hub `name` with one empty py_library per package of `requirements_lock`.

    Args:
      name: the hub's name.
      requirements_lock: the lock file.
      **kwargs: rules_python's other pip_parse arguments, ignored offline.
    """
    _hub(name = name, requirements_lock = requirements_lock)
