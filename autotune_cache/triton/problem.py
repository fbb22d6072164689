"""The problem part of a cache key: tuned arguments' values and tensor dtypes, as Triton keys them.

`triton.autotune` re-tunes whenever the values of the `key=` arguments or the dtype of any tensor
argument change; we build the same set, as a name -> value mapping, so it can be written into the
results file and read by people.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def dtype_name(dtype: Any) -> str:
    """'float16' for torch.float16 / tl.float16 / numpy float16."""
    text = str(dtype)
    for prefix in ("torch.", "triton.language.", "tl."):
        if text.startswith(prefix):
            text = text[len(prefix):]
    return text


def _value(value: Any) -> Any:
    """A key argument's value in a form the canonical problem text can hold."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return "None" if value is None else value
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        shape = "x".join(str(int(s)) for s in value.shape)
        return f"{dtype_name(value.dtype)}[{shape}]"
    if isinstance(value, (tuple, list)):
        return tuple(_value(v) for v in value)
    return str(value)


def problem_key(arg_names: Sequence[str], keys: Sequence[str],
                all_args: Mapping[str, Any]) -> dict[str, Any]:
    """{key arg: value} plus {tensor arg: dtype} for the kernel's own arguments.

    Mirrors `triton.runtime.autotuner.Autotuner.run`: key names missing from the call are
    skipped; a tensor that is itself a key argument is keyed by dtype and shape under its name and
    its dtype is not repeated.
    """
    args = {k: v for k, v in all_args.items() if k in arg_names}
    problem: dict[str, Any] = {}
    for name in keys:
        if name in args:
            problem[name] = _value(args[name])
    for name, value in args.items():
        if name not in problem and hasattr(value, "dtype"):
            problem[name] = dtype_name(value.dtype)
    return problem


def triton_style_key(arg_names: Sequence[str], keys: Sequence[str],
                     all_args: Mapping[str, Any]) -> tuple:
    """The in-process memo key, computed as cheaply as Triton computes its own."""
    args = {k: v for k, v in all_args.items() if k in arg_names}
    key: list[Any] = [args[k] for k in keys if k in args]
    key += [str(v.dtype) for v in args.values() if hasattr(v, "dtype")]
    return tuple(key)
