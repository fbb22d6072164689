"""`<name>.binary_copy`: a build action that writes the binary copy of a committed results file.

Parsing a large committed text cache takes seconds to tens of seconds (10,000 entries x 8
candidates, 39 MB of text: about 30 s on a 2-core machine); reading its binary copy takes tens of
milliseconds (autotune_cache/binary_copy.py). Outside Bazel the library writes that copy into the
user's cache directory on the first load. Inside `bazel test` the test's HOME is its private
TEST_TMPDIR, so the copy would die with the test and every run would pay the parse again.

So the build makes the copy: one action per committed file, whose only inputs are the file and
the tool, and whose output is a directory holding `<sha256 of the file>-<text|binary>.binpb`
(the name depends on the content, which analysis cannot read: hence a directory). Bazel's
action cache, and a disk or remote cache for a fleet, run it once per content of the file. The
load-mode test gets the directory in its runfiles and `AUTOTUNE_BINARY_CACHE_DIR` pointing at it
(a `TEST_WORKSPACE/` path, which the library resolves under $TEST_SRCDIR like the load flag and
treats as read-only: it never writes, cleans or touches a copy there).

Decisions:
- The tool skips files under the library's MIN_BYTES (they parse in about 10 ms; the loader
  never looks for their copy) and files it cannot read or parse (it prints why), and the test
  parses the file itself and reports any problem the usual way (with the regen hint). A broken
  cache never breaks the build, and `.regen` still runs.
- The directory always holds a README.txt saying what it holds: Bazel 4.2.3 leaves an empty
  output directory out of the test's runfiles tree, and a variable naming a missing directory
  would puzzle whoever debugs the test.
- The copy is derived: `.dump` and `.regen` neither use nor build it.
"""

def _autotune_binary_copy_impl(ctx):
    out = ctx.actions.declare_directory(ctx.label.name)
    src = ctx.file.src
    ctx.actions.run(
        executable = ctx.executable._tool,
        arguments = [src.path, out.path],
        inputs = [src],
        outputs = [out],
        mnemonic = "AutotuneBinaryCopy",
        progress_message = "Writing the binary copy of {}".format(src.short_path),
    )
    return [DefaultInfo(
        files = depset([out]),
        runfiles = ctx.runfiles(files = [out]),
    )]

autotune_binary_copy = rule(
    implementation = _autotune_binary_copy_impl,
    doc = """The binary copy of one results file, in a directory (a tree artifact).

The directory holds `<sha256>-<text|binary>.binpb` as `autotune_cache.binary_copy.make_copy`
writes it (none when the file is under MIN_BYTES or cannot be read: the tool prints why), and
a README.txt saying which.
Point `AUTOTUNE_BINARY_CACHE_DIR` at it (`TEST_WORKSPACE/$(rootpath <this target>)`) in a test
that loads the same file; autotuned_py_test does this for its `cache`.""",
    attrs = {
        "src": attr.label(
            doc = "The committed results file (text or binary).",
            allow_single_file = True,
            mandatory = True,
        ),
        "_tool": attr.label(
            default = Label("//rules/private:make_binary_copy"),
            executable = True,
            cfg = "exec",
        ),
    },
)
