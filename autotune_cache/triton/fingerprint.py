"""Kernel source fingerprints: a hash of a Triton kernel's source and everything it calls.

This mirrors what Triton's `JITFunction.cache_key` covers (the function's source, the sources of
the @triton.jit functions it calls, and the global constexpr values it reads) with two differences
that matter for committed cache files:

* line numbers are left out, so adding an import above a kernel does not stale its results;
* it works the same under TRITON_INTERPRET=1 (where kernels are `InterpretedFunction`s that have no
  `cache_key`) and on a GPU, so the CPU and GPU entries of one kernel share a fingerprint.

What is hashed, for the kernel and, recursively, for every @triton.jit function it references:

* the source from the `def` line on: a JITFunction's `.src`, the text Triton captured when the
  decorator ran and compiles (editing the file afterwards changes neither); under the interpreter,
  which has no `.src` and reads the file itself at the first launch, `inspect.getsource`;
* the value of every name the body loads that resolves, in the function's closure or globals, to
  a bool / int / float / str / None or a `tl.constexpr` of one (`BLOCK`, `SCALE`);
* the value of every `name.attr` where `name` is a module (not triton's) or a class and the
  attribute is such a scalar (`cfg.BLOCK`, `Consts.EPS`), and the source of `name.attr` when it is
  a @triton.jit function (`helpers.fma`).

Not covered: values read through longer chains (`a.b.c`), attributes of other objects (instances,
dicts, SimpleNamespace), containers (`SIZES[0]`), non-scalar values (tensors, dtypes), default
argument values beyond their source text, and anything the kernel reaches only at run time (Python
functions called from `@triton.heuristics` / `prune_configs_by`, whose own sources are not
hashed: only the heuristics' lambdas are, see heuristics_fingerprint). Values are read at the
first launch; Triton itself refuses to run a kernel whose global constexprs changed after that.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import inspect
import re
import sys
import textwrap
import types
from collections.abc import Callable
from typing import Any

from autotune_cache.foundation.import_hook import still_importing
from autotune_cache.foundation.key import KEY_SCHEME

_IGNORED_MODULE_PREFIXES = ("triton.language", "triton.experimental")


def python_function(kernel: Any) -> Callable[..., Any]:
    """The plain Python function under a @triton.jit / interpreted / heuristics wrapper chain."""
    fn = kernel
    while not inspect.isfunction(fn):
        inner = getattr(fn, "fn", None)
        if inner is None:
            raise TypeError(f"cannot find the Python function under {kernel!r}")
        fn = inner
    return fn


def jit_function(kernel: Any) -> Any | None:
    """The JIT function (the one that can preload) under a tuner / heuristics wrapper chain,
    each keeping what it wraps as `.fn`; None when there is none."""
    fn = kernel
    while not hasattr(fn, "preload") and hasattr(fn, "fn"):
        fn = fn.fn
    return fn if hasattr(fn, "preload") else None


def module_importing(kernel: Any) -> bool:
    """Whether the module that defines `kernel`'s Python function is still being imported: its
    later definitions (a helper it calls, a global constexpr it reads) do not exist yet, so
    neither its fingerprint nor a compile of it is final (early.py waits for the module)."""
    fn = python_function(kernel)
    return still_importing(sys.modules.get(getattr(fn, "__module__", None) or ""))


def qualified_name(fn: Any) -> str:
    """`module.qualname` of the Python function under a @jit / @heuristics chain: the `kernel`
    name of a routed kernel's cache entries (routing.py, classroute.py)."""
    base = python_function(fn)
    return f"{base.__module__}.{base.__qualname__}"


def _is_jit_like(value: Any) -> bool:
    """Whether `value` is a Triton JIT function (compiled or interpreted) or constexpr function."""
    try:
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITCallable
    except ImportError:  # pragma: no cover - depends on the Triton version
        return False
    return isinstance(value, (JITCallable, InterpretedFunction))


def _function_source(fn: Callable[..., Any]) -> str:
    """The function's source from its `def` line on (decorators dropped), dedented: Triton's own
    recipe for `JITFunction.src`."""
    src = textwrap.dedent(inspect.getsource(fn))
    match = re.search(r"^def\s+\w+\s*\(", src, re.MULTILINE)
    return src[match.start():] if match else src


def _kernel_source(kernel: Any, fn: Callable[..., Any]) -> str:
    """The source Triton compiles for `kernel`: the `.src` of the first JIT function in its
    wrapper chain, read when the decorator ran, so an edit to the file after import is not
    hashed; without one (the interpreter, old Triton versions) the file's current text, which is
    what the interpreter itself reads when it first runs the kernel."""
    node = kernel
    while node is not None and node is not fn:
        src = getattr(type(node), "src", None) and getattr(node, "src", None)
        if isinstance(src, str):
            return src
        node = getattr(node, "fn", None)
    return _function_source(fn)


def _scalar_repr(value: Any) -> str | None:
    """A stable text for global values a kernel may read (constexprs, numbers, strings)."""
    try:
        from triton.language import constexpr
    except ImportError:  # pragma: no cover
        constexpr = ()  # type: ignore[assignment]
    if constexpr and isinstance(value, constexpr):
        value = value.value
    if isinstance(value, (bool, int, float, str)) or value is None:
        return f"{type(value).__name__}:{value!r}"
    return None


def _referenced_names(tree: ast.AST) -> list[tuple[str, str | None]]:
    """(name, attribute) pairs for every loaded global name and `name.attr` in the tree."""
    refs: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            refs.append((node.value.id, node.attr))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            refs.append((node.id, None))
    return sorted(set(refs), key=lambda r: (r[0], r[1] or ""))


def _scope(fn: Callable[..., Any]) -> dict[str, Any]:
    """The names the kernel body can read: globals, overridden by closure variables."""
    scope: dict[str, Any] = dict(fn.__globals__)
    with contextlib.suppress(TypeError, ValueError):  # exotic callables have no closure info
        scope.update(inspect.getclosurevars(fn).nonlocals)
    return scope


def _resolve(scope: dict[str, Any], name: str, attr: str | None) -> Any:
    """Look `name` (and then `.attr`) up the way the kernel would; None when not found, or when
    `name` is not a module or class (attributes of other objects are not followed)."""
    if name not in scope:
        return None
    value = scope[name]
    if attr is None:
        return value
    if isinstance(value, types.ModuleType):
        if value.__name__.startswith(_IGNORED_MODULE_PREFIXES) or value.__name__ == "triton":
            return None
        return getattr(value, attr, None)
    if isinstance(value, type):
        return inspect.getattr_static(value, attr, None)
    return None


def _fingerprint(kernel: Any, fn: Callable[..., Any], stack: tuple[int, ...]) -> str:
    # The recipe's version is the key scheme: a change to this recipe bumps key.KEY_SCHEME, so
    # old entries read as "written with key scheme N", not as an edited kernel.
    hasher = hashlib.sha256(f"v{KEY_SCHEME}\n".encode())
    src = _kernel_source(kernel, fn)
    hasher.update(src.encode())
    tree = ast.parse(src)
    local_args = {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    scope = _scope(fn)
    for name, attr in _referenced_names(tree):
        if name in local_args:
            continue
        value = _resolve(scope, name, attr)
        label = name if attr is None else f"{name}.{attr}"
        if value is None:
            continue
        if _is_jit_like(value):
            inner = python_function(value)
            if id(inner) in stack:
                hasher.update(f"\n{label}->recursive".encode())
                continue
            hasher.update(
                f"\n{label}->{_fingerprint(value, inner, stack + (id(inner),))}".encode())
            continue
        scalar = _scalar_repr(value)
        if scalar is not None:
            hasher.update(f"\n{label}={scalar}".encode())
    return hasher.hexdigest()


def source_fingerprint(kernel: Any) -> str:
    """Hex SHA-256 of the kernel's source, its @triton.jit dependencies and the constants they
    read (see the module docstring for exactly what is and is not covered)."""
    fn = python_function(kernel)
    return _fingerprint(kernel, fn, (id(fn),))


def heuristics_fingerprint(kernel: Any) -> str:
    """Hash of the `@triton.heuristics` lambdas between the autotuner and the jit function, so
    changing a heuristic invalidates results; empty when there are none."""
    parts: list[str] = []
    node = kernel
    while not inspect.isfunction(node):
        values = getattr(node, "values", None)
        if isinstance(values, dict):
            for name in sorted(values):
                code = getattr(values[name], "__code__", None)
                try:
                    body = inspect.getsource(values[name]).strip()
                except (OSError, TypeError):
                    body = code.co_code.hex() if code is not None else repr(values[name])
                parts.append(f"{name}:{body}")
        node = getattr(node, "fn", None)
        if node is None:
            break
    if not parts:
        return ""
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def tuned_fingerprint(kernel: Any, heuristics: str) -> str:
    """The key's source fingerprint of a tuned kernel: `source_fingerprint(kernel)`, combined
    with its `heuristics_fingerprint` (read when the tuner was built) when it has any."""
    fingerprint = source_fingerprint(kernel)
    if heuristics:
        fingerprint = hashlib.sha256(f"{fingerprint}+{heuristics}".encode()).hexdigest()
    return fingerprint
