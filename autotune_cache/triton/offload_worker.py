"""One compile process of offload.py: Triton's back end, from a kernel's TTIR to its binary.

Run by path (`python -S -E offload_worker.py`), never imported by the package and importing
nothing of it: the user's start-up hooks, sitecustomize and AUTOTUNE_FLAGS do not run here. Its
first message is the parent's `sys.path`; each later one is a request, answered in order:

    {"ttir": str, "target": GPUTarget, "options": dict, "metadata": dict, "language": Language}
    -> ("ok", [(ext, text or bytes), ...], metadata)  |  ("error", reason)

It runs the stages Triton's `compile` runs after "ttir" (3.6 and 3.9 NVIDIA: ttgir, llir, ptx,
cubin), with the same backend, options and metadata the parent's compile started, in the
environment it was started with: the parent's when it asked (Triton reads its knobs from the
environment, and a knob set in code is written there too), which offload.py keeps equal. Each
stage's product is taken as text (or bytes) right after the stage, as Triton's cache manager
stores it: a later stage may rewrite the module in place. Messages are pickles, each behind its
8-byte length, on standard input and output; its first message is a greeting naming the Triton it
imported (the parent uses it only if it is the parent's own). The process ends when its input
does (the parent closed it, or died), quietly.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
import tempfile
from typing import Any, BinaryIO

_LENGTH = struct.Struct("<Q")


def read(stream: BinaryIO) -> Any:
    """The next message, or None at the end of the stream."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (size,) = _LENGTH.unpack(head)
    body = stream.read(size)
    if len(body) < size:
        return None
    return pickle.loads(body)  # noqa: S301 - from our own parent, over a private pipe


def write(stream: BinaryIO, message: Any) -> None:
    """Send one message."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(body)) + body)
    stream.flush()


def compile_back_end(request: dict[str, Any]) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
    """The products of every stage after TTIR, in order, and the metadata they filled in."""
    from triton._C.libtriton import ir
    from triton.compiler.compiler import make_backend

    target = request["target"]
    backend = make_backend(target)
    options = request["options"]  # the parent's parsed options, as its compile has them
    metadata = request["metadata"]
    stages: dict[str, Any] = {}
    backend.add_stages(stages, options, request["language"])
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    with tempfile.NamedTemporaryFile("w", suffix=".ttir", encoding="utf-8") as f:
        f.write(request["ttir"])
        f.flush()
        module = ir.parse_mlir_module(f.name, context)
    module.context = context
    products: list[tuple[str, Any]] = []
    for ext, stage in list(stages.items())[1:]:
        module = stage(module, metadata)
        products.append((ext, module if isinstance(module, (str, bytes)) else str(module)))
    return products, metadata


def main() -> None:
    # The replies go out on a copy of standard output; descriptor 1 itself becomes standard
    # error (offload.py discards it: the compile Triton runs on the program's thread prints
    # what a failing compile prints), so nothing the compiler writes can corrupt a reply.
    stdin = sys.stdin.buffer
    stdout = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    sys.path[:] = read(stdin) or sys.path
    # Imported while the parent runs the first front end (on the H100 a fresh process's first
    # compile took 1.4 s, a warm one's 0.2 s); the greeting says which Triton it is.
    try:
        import triton
        import triton.compiler.compiler  # noqa: F401

        greeting: Any = ["triton", triton.__file__, triton.__version__]
    except Exception as e:  # noqa: BLE001 - the parent then compiles on its threads
        greeting = ["no triton", f"{type(e).__name__}: {e}"]
    try:
        write(stdout, greeting)
        while (request := read(stdin)) is not None:
            try:
                products, metadata = compile_back_end(request)
            except Exception as e:  # noqa: BLE001 - the parent compiles it itself
                write(stdout, ("error", f"{type(e).__name__}: {e}"[:2000]))
            else:
                write(stdout, ("ok", products, metadata))
    except OSError:  # the parent is gone (it ended, or was killed): end quietly
        pass


if __name__ == "__main__":
    main()
