"""Resolves the `cache` attribute of autotuned_py_test: which file, in which repository.

Every spelling of a file in the test's own repository is accepted: a file name relative to the
package (`"x.textproto"`, `":x.textproto"`), a label string (`"//pkg:x.textproto"`,
`"@//pkg:x.textproto"`, `"@@//pkg:x.textproto"`, `"@<root module or workspace
name>//pkg:x.textproto"`) and a `Label` object. The workspace's own name is resolved through
Bazel's repository mapping (Label() on Bazel < 6.3, package_relative_label after). A file in another repository is refused: its
`.regen` would have to write into a source tree that Bazel does not let the test's repository
write.
"""

load(":constants.bzl", "WORKSPACE_PREFIX")

def _check_extension(name, file_name):
    """Fails when the cache file name has no extension, which selects neither format clearly.

    Args:
      name: the macro's `name`.
      file_name: the cache file's name within its package.
    """
    basename = file_name.split("/")[-1]
    if "." not in basename.lstrip("."):
        fail(("autotuned_py_test(name = \"{name}\"): cache = \"{path}\" has no file " +
              "extension. Name it \"{path}.textproto\" (text, reviewable diffs) or " +
              "\"{path}.pb\" (binary).").format(name = name, path = file_name))

def current_repository():
    """The repository of the BUILD file being evaluated, without "@" ("" for the main one)."""
    return native.repository_name().lstrip("@")

def repository_prefix(repository):
    """The label prefix a user types for a repository: "" (main), "@name" or "@@canonical".

    Args:
      repository: a repository name without "@" ("" for the main repository).

    Returns:
      The prefix to put in front of "//pkg:name".
    """
    if not repository:
        return ""

    # Canonical names of bzlmod repositories (`name+`, `name~`) are only reachable as `@@`.
    if "+" in repository or "~" in repository:
        return "@@" + repository
    return "@" + repository

def _other_repository(name, cache, repository):
    """Fails for a cache in a repository other than the test's.

    Args:
      name: the macro's `name`.
      cache: the `cache` attribute as written.
      repository: the repository the cache label names.
    """
    fail(("autotuned_py_test(name = \"{name}\"): cache = \"{cache}\" is in repository " +
          "@{repo}, not in the test's own repository, and .regen can only write caches that " +
          "live next to the test. Copy the file into this repository and point `cache` at " +
          "it.").format(name = name, cache = cache, repo = repository))

def _parts_from_label(name, cache, label):
    """(package, file name) of a Label in the test's repository; fails for another repository.

    Args:
      name: the macro's `name`.
      cache: the `cache` attribute as written (for messages).
      label: the Label it resolves to.

    Returns:
      A (package, file name) tuple.
    """
    if label.workspace_name != current_repository():
        _other_repository(name, cache, label.workspace_name)
    return label.package, label.name

def _parts_from_string(name, cache, package):
    """(package, file name) of a string `cache`, on Bazels without package_relative_label.

    Args:
      name: the macro's `name`.
      cache: the `cache` attribute, a string.
      package: the package of the BUILD file being evaluated.

    Returns:
      A (package, file name) tuple.
    """
    if cache.startswith("@"):
        repository, separator, rest = cache.lstrip("@").partition("//")
        if not separator:
            fail(("autotuned_py_test(name = \"{}\"): cache = \"{}\" is not a label: write " +
                  "\"//pkg:file\" or a file name of this package.").format(name, cache))
        if repository and repository != current_repository():
            # Label() applies the repository mapping, which maps the main workspace's own name
            # (`workspace(name = "myws")`, so `@myws//pkg:file`) to the main repository
            # (checked on Bazel 4.2.3). Any other name is another repository.
            return _parts_from_label(name, cache, Label(cache))
        cache = "//" + rest
    if cache.startswith("//"):
        cache_package, _, file_name = cache[2:].partition(":")
        if not file_name:
            file_name = cache_package.split("/")[-1]
        return cache_package, file_name
    return package, (cache[1:] if cache.startswith(":") else cache)

def cache_location(name, cache):
    """Resolves the `cache` attribute.

    Args:
      name: the macro's `name`.
      cache: the `cache` attribute: None, a file name relative to this package, a label string
        or a Label.

    Returns:
      struct(label, source_path, flag_path, exists, repository):
        label: the repository-relative label to put in `data` ("//pkg:file");
        source_path: the file's path relative to its repository's root (where `.regen` writes);
        flag_path: the path to put in AUTOTUNE_FLAGS / XLA_FLAGS, or None when the file does
          not exist yet: "TEST_WORKSPACE/" + its runfiles path, which both our library and XLA
          resolve to an absolute path under $TEST_SRCDIR (safe after a chdir);
        exists: whether it exists now (a file in another package is trusted to exist:
          `.regen` creates it when it does not);
        repository: the test's repository, without "@" ("" for the main one).
    """
    package = native.package_name()
    if cache == None:
        cache = name + ".autotune.textproto"
    if type(cache) == "Label":
        cache_package, file_name = _parts_from_label(name, str(cache), cache)
    elif type(cache) != "string":
        fail("autotuned_py_test(name = \"{}\"): cache must be a string or a Label, got {}.".format(
            name,
            type(cache),
        ))
    elif hasattr(native, "package_relative_label") and (cache.startswith("@") or cache.startswith("//")):
        # Bazel 6.3+: resolves apparent repository names (the root module's own name included)
        # exactly as the BUILD file would.
        cache_package, file_name = _parts_from_label(name, cache, native.package_relative_label(cache))
    else:
        cache_package, file_name = _parts_from_string(name, cache, package)
    _check_extension(name, file_name)
    label = "//{}:{}".format(cache_package, file_name)
    if cache_package == package:
        # glob() instead of a plain label, so that a test whose cache has not been generated yet
        # still builds (and, with require_complete, fails with the regen hint).
        exists = len(native.glob([file_name], allow_empty = True)) > 0
    else:
        exists = True
    return struct(
        label = label,
        source_path = cache_package + "/" + file_name if cache_package else file_name,
        flag_path = "{}$(rootpath {})".format(WORKSPACE_PREFIX, label) if exists else None,
        exists = exists,
        repository = current_repository(),
    )
