"""Subprocess body for test_compile_helper.py: one scenario of the compile helper, with real
compiles for sm_90 (Triton's bundled ptxas, no GPU) in a process that imported Triton for a GPU
(the test process runs the interpreter). `python -m tests.triton.compile_helper_worker SCENARIO
DIR`: DIR holds the compile cache and the user's module; an assertion failing exits non-zero.

Run with -m, this module is `__main__`: `main_add` below is a script's kernel."""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import time
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

import autotune_cache.triton  # noqa: E402, F401 - installs the compile patch
from autotune_cache.triton import compile_helper, compile_server  # noqa: E402
from autotune_cache.triton.compile_helper import CompileHelper  # noqa: E402

KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def add(x, y, out, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < n
    tl.store(out + i, tl.load(x + i, mask=mask) + tl.load(y + i, mask=mask) * {scale}, mask=mask)
'''
TARGET = GPUTarget("cuda", 90, 32)
OPTIONS = {"num_warps": 4, "num_stages": 2}
OTHER = {"num_warps": 8, "num_stages": 2}
SIGNATURE = {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32", "BLOCK": "constexpr"}


@triton.jit
def main_add(x, y, out, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < n
    tl.store(out + i, tl.load(x + i, mask=mask) - tl.load(y + i, mask=mask), mask=mask)


def source(kernel: object) -> ASTSource:
    return ASTSource(kernel, SIGNATURE, {(4,): 128},
                     {(i,): [["tt.divisibility", 16]] for i in range(4)})


def user_module(root: Path, scale: int = 1, name: str = "user_kernels") -> object:
    (root / f"{name}.py").write_text(KERNEL.format(scale=scale))
    return importlib.import_module(name)


def files(root: Path) -> set[Path]:
    return {p for p in (root / "cache").rglob("*") if p.is_file()}


def cubins(root: Path) -> int:
    return sum(p.suffix == ".cubin" for p in files(root))


def wait_ended(pid: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            return
        time.sleep(0.02)
    raise AssertionError(f"the compile server {pid} did not end")


def fills(root: Path, helper: CompileHelper) -> None:
    src = source(user_module(root).add)
    assert helper.start()
    assert helper.prefill(src, TARGET, OPTIONS, None) is None
    filled = files(root)
    assert cubins(root) == 1, filled
    kernel = triton.compile(src, target=TARGET, options=OPTIONS)
    assert files(root) == filled  # a hit: Triton wrote nothing more
    assert kernel.metadata.name == "add" and helper.prefilled == 1
    # Cached now: the helper is not asked again (a child would only cost its fork).
    assert helper.prefill(src, TARGET, OPTIONS, None) == "in the compile cache already"
    assert helper.prefill(src, TARGET, OTHER, None) is None
    assert helper.prefilled == 2 and helper.next_id == 2 and cubins(root) == 2


def main_kernel(root: Path, helper: CompileHelper) -> None:
    assert main_add.fn.__module__ == "__main__"
    assert helper.start()
    assert helper.prefill(source(main_add), TARGET, OPTIONS, None) is None
    filled = files(root)
    triton.compile(source(main_add), target=TARGET, options=OPTIONS)
    assert cubins(root) == 1 and files(root) == filled


def no_exit_hooks(root: Path, helper: CompileHelper) -> None:
    probe = root / "exit-hooks"
    atexit.register(lambda: probe.open("a").write(f"{os.getpid()}\n"))
    src = source(user_module(root).add)
    assert helper.start()
    assert helper.prefill(src, TARGET, OPTIONS, None) is None
    pid = helper.pid
    assert pid is not None
    helper.close()  # the server leaves once its request pipe closes
    wait_ended(pid)
    assert not probe.exists(), probe.read_text()
    print("this process's own exit hook runs at its exit:", os.getpid())


def imported_after(root: Path, helper: CompileHelper) -> None:
    assert helper.start()
    why = helper.prefill(source(user_module(root).add), TARGET, OPTIONS, None)
    assert why == "the kernel's module was imported after the compile helper started", why
    assert files(root) == set() and helper.next_id == 0


def source_changed(root: Path, helper: CompileHelper) -> None:
    module = user_module(root, scale=1)
    assert helper.start()
    (root / "user_kernels.py").write_text(KERNEL.format(scale=2))
    importlib.reload(module)  # this process now has another source than the server
    why = helper.prefill(source(module.add), TARGET, OPTIONS, None)
    assert why is not None and why.startswith("differs") and "another source here" in why, why
    assert cubins(root) == 0
    # Every other compile of that kernel is compiled here without asking again.
    assert helper.prefill(source(module.add), TARGET, OTHER, None) == why
    assert helper.next_id == 1


def variables_of_now(root: Path, helper: CompileHelper) -> None:
    src = source(user_module(root).add)
    assert helper.start()
    os.environ["TRITON_DISABLE_LINE_INFO"] = "1"  # cache-invalidating, set after the fork
    assert helper.prefill(src, TARGET, OPTIONS, None) is None
    filled = files(root)
    triton.compile(src, target=TARGET, options=OPTIONS)
    assert files(root) == filled and cubins(root) == 1


def died(root: Path, helper: CompileHelper) -> None:
    src = source(user_module(root).add)
    assert helper.start()
    assert helper.prefill(src, TARGET, OPTIONS, None) is None
    pid = helper.pid
    assert pid is not None
    os.kill(pid, 9)
    wait_ended(pid)
    why = helper.prefill(src, TARGET, OTHER, None)  # not cached: it must be sent
    assert why is not None and ("exited" in why or "closed" in why), why
    assert helper.prefill(src, TARGET, OTHER, None) == why
    assert helper.start() is False  # never started again


def timed_out(root: Path, helper: CompileHelper) -> None:
    """A child that does not answer in time (stuck, or a machine that slow): the thread
    compiles itself, nothing is sent again, and the server is told to leave."""
    src = source(user_module(root).add)
    assert helper.start()
    pid = helper.pid
    assert pid is not None
    compile_helper.COMPILE_TIMEOUT_S = 0.001
    why = helper.prefill(src, TARGET, OPTIONS, None)
    assert why is not None and "no answer from the compile helper" in why, why
    again = helper.prefill(src, TARGET, OTHER, None)
    assert again is not None and "no answer from the compile helper" in again, again
    assert helper.next_id == 1
    wait_ended(pid)  # its request pipe was closed


def warm_up(root: Path, helper: CompileHelper) -> None:
    """The server's warm-up compile (what it runs once its first burst of children is forked):
    a real compile, into a directory of its own that it then removes, never the user's cache."""
    compiled: list[str] = []
    original = compile_helper._original

    def counting(src, *args, **kwargs):
        kernel = original(src, *args, **kwargs)  # raising, it would not be counted
        compiled.append(triton.knobs.cache.dir)
        return kernel

    before = triton.knobs.cache.dir
    compile_server._warm_up(("cuda", 90, 32), counting)
    assert len(compiled) == 1 and compiled[0] != before, compiled
    assert triton.knobs.cache.dir == before and not Path(compiled[0]).exists()
    assert files(root) == set()


SCENARIOS = {f.__name__: f for f in (fills, main_kernel, no_exit_hooks, imported_after,
                                     source_changed, variables_of_now, died, timed_out,
                                     warm_up)}


def main() -> int:
    name, root = sys.argv[1], Path(sys.argv[2])
    os.environ["TRITON_CACHE_DIR"] = str(root / "cache")
    sys.path.insert(0, str(root))
    helper = CompileHelper()
    try:
        SCENARIOS[name](root, helper)
    finally:
        helper.close()
    print("ok", name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
