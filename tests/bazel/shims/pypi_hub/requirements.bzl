"""Offline shim hub: the packages come from the test interpreter (see BUILD.bazel)."""

def install_deps(**kwargs):  # buildifier: disable=unused-variable
    """Nothing to install offline.

    Args:
      **kwargs: ignored.
    """
    pass
