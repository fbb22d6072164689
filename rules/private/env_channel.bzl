"""How the macro's variables reach a test whose `env` is a select().

py_test accepts `env = select({...})`, but the macro must add its own variables (the flags, the
regen hint, the main) to every configuration. Bazel 4 cannot concatenate a dict select with a
dict ("type 'dict(string, string)' doesn't support select concatenation"), and Starlark cannot
look inside a select. So when `env` is a select, the user's select stays the target's `env`
unchanged, and the macro's variables go in front of `args` as `--rules_autotune_env=NAME=VALUE`
(shell-quoted: Bazel tokenizes `args` like a Bourne shell, and expands `$(rootpath ...)` in them
as in `env`). The test wrapper (rules_autotune_test_wrapper.py), which such targets always run
through, sets them and removes those arguments before the main sees its own.
"""

load(":constants.bzl", "ENV_ARG_PREFIX")

def is_select(value):
    """Whether an attribute value is a select() (or a concatenation with one).

    Args:
      value: the attribute value as the macro received it.

    Returns:
      True for a select.
    """
    return type(value) == "select"

def _shell_quote(text):
    """Quotes `text` as one Bourne shell word (what Bazel's `args` tokenizer reads back).

    Args:
      text: any string.

    Returns:
      The string in single quotes, with embedded single quotes escaped.
    """
    return "'" + text.replace("'", "'\\''") + "'"

def env_and_args(macro_env, select_env, args):
    """The `env` and `args` attributes of a generated py_test.

    Args:
      macro_env: the variables the macro sets (a dict; with a plain user `env`, the user's
        variables are already in it).
      select_env: the user's `env` when it is a select(), else None.
      args: the user's `args` (a list or a select()).

    Returns:
      (env, args): `macro_env` and `args` unchanged when `select_env` is None; else the user's
      select as `env` and the macro's variables as leading `args`.
    """
    if select_env == None:
        return macro_env, args
    prefix = [
        ENV_ARG_PREFIX + _shell_quote("{}={}".format(key, macro_env[key]))
        for key in sorted(macro_env.keys())
    ]
    return select_env, prefix + args
