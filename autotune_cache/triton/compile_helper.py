"""One compile helper process (foundation/compile_helpers.py says why helpers exist and how a
run uses them).

`python -m autotune_cache.triton.compile_helper DIR INDEX`: read DIR/job.json (the results files,
the helper count, the parent's sys.path and pid), take this helper's share of the files'
recorded winners and write its plan (DIR/plan-INDEX: their digests) before importing anything
heavy; then add its share of the candidates to compile (below), and compile each it can claim
(DIR/<digest>.claim: the test process claims what it compiles itself) into Triton's compile
cache through the kernel's own `JITFunction.preload`, building its launcher too, exactly as the
process's compile-ahead would (preload.py), then touch DIR/<digest> (empty: compiled; "-":
left to the process). Done, it waits for the test process to end (foundation/compile_helpers.py
says why).

The share: every helper lists the same specializations (each loaded entry's winner that records
Triton's specialization data, once each, in file order; then, for the entries recorded under
another toolchain than this machine's, every candidate: `candidates`) and takes its own run of each
list (`share`). A helper compiles only for the GPU it finds (the entry's device name and
architecture); the rest it marks "-".
Nothing here is reported to the user: a failure is written to the helper's log
(DIR/helper-INDEX.log, read by the process at debug level) and the process compiles as usual.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autotune_cache.foundation.atomic import write_atomic
from autotune_cache.foundation.compile_helpers import JOB_FILE, PLAN_PREFIX, claim, digest
from autotune_cache.foundation.key import CacheKey, Device

log = logging.getLogger(__name__)

Work = tuple[str, Device, str]  # (kernel name, device, specialization data)

# All helpers together compile at most this many (winners first): a monorepo's committed file
# may hold far more kernels than one test run launches, and what a run does not launch is
# wasted machine time.
MAX_WORK = 1024
# Entries read to list the work, every helper alike: protobuf parses a few thousand entries a
# second here, and the test process's compile-ahead waits for the plans (written after this).
MAX_SCAN = 1024
NICENESS = 10


def candidate_spec(winner: str, config: Any, defaults: dict[str, Any]) -> str | None:
    """The specialization data a candidate `config` (a results-file Config) compiles with,
    derived from the winner's (`winner`): its meta-parameters replace the winner's constexpr
    values, by argument position, and its num_warps / num_stages / num_ctas / maxnreg (Triton's
    `defaults` where unset) the winner's options. None when a meta-parameter is no constexpr
    argument of the kernel. What it cannot see (a @triton.heuristics value computed from a
    meta-parameter) makes a compile no launch uses: wasted helper time, never a wrong binary,
    since Triton files each binary under the hash of what it compiled."""
    try:
        data = json.loads(winner)
        names = list(data["signature"])
        keys = [tuple(k) for k in data["constant_keys"]]
        values = list(data["constant_vals"])
        for param in config.params:
            position = (names.index(param.name),) if param.name in names else None
            if position is None or position not in keys:
                return None
            values[keys.index(position)] = getattr(param, param.WhichOneof("value"))
        data["constant_vals"] = values
        for option in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
            data["options"][option] = (getattr(config, option) if config.HasField(option)
                                       else defaults.get(option))
        return json.dumps(data)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def triton_config_defaults() -> dict[str, Any]:
    import triton

    config = triton.Config({})
    return {o: getattr(config, o, None) for o in ("num_warps", "num_stages", "num_ctas",
                                                  "maxnreg")}


def recorded(files: list[str]) -> list[tuple[CacheKey, Any]]:
    """The (key, entry) pairs of the first MAX_SCAN entries of `files` that record Triton's
    specialization data, of kernels named `module.qualname` (routed kernels, plain kernels'
    warm-ups): a helper can import those. A kernel named by its function's name alone (the
    default of `autotune_cache.triton.autotune`) is left to the test process's own
    compile-ahead. A file that does not load is named in the log and skipped (the process's own
    load reports it)."""
    from autotune_cache.store.results_index import load_file

    found: list[tuple[CacheKey, Any]] = []
    scanned = 0
    for path in files:
        try:
            for key, entry in load_file(path).items():
                scanned += 1
                if scanned > MAX_SCAN:
                    log.info("compile helper: only the first %d entries are listed", MAX_SCAN)
                    return found
                if entry.result.triton_specialization and "." in key.kernel:
                    found.append((key, entry))
        except Exception as e:  # noqa: BLE001 - the process's own load reports a bad file
            log.warning("compile helper: %s: %s", path, e)
    return found


def winners(entries: list[tuple[CacheKey, Any]]) -> list[Work]:
    """Each entry's winner, once per specialization, in file order."""
    seen: set[str] = set()
    found: list[Work] = []
    for key, entry in entries:
        spec = entry.result.triton_specialization
        if spec not in seen:
            seen.add(spec)
            found.append((key.kernel, key.device, spec))
    return found


def candidates(entries: list[tuple[CacheKey, Any]], toolchain: Any, listed: list[Work]
               ) -> list[Work]:
    """Every candidate of each entry recorded under another toolchain than `toolchain` (this
    machine's, as keys record it: a Triton or CUDA upgrade), derived from its winner's
    specialization, once each and none already `listed`: those keys miss and are tuned again,
    and their tunings then find the candidates compiled."""
    seen = {spec for _, _, spec in listed}
    defaults = triton_config_defaults()
    found: list[Work] = []
    for key, entry in entries:
        if key.toolchain == toolchain:
            continue
        for timing in entry.result.candidates:
            derived = candidate_spec(entry.result.triton_specialization, timing.config, defaults)
            if derived is not None and derived not in seen:
                seen.add(derived)
                found.append((key.kernel, key.device, derived))
    return found


def work(files: list[str], stale_toolchain: Any = None) -> list[Work]:
    """The winners of `recorded(files)`, then, with `stale_toolchain` (this machine's
    toolchain), the `candidates` of the entries recorded under another."""
    entries = recorded(files)
    found = winners(entries)
    if stale_toolchain is None:
        return found
    return found + candidates(entries, stale_toolchain, found)


def share(items: list[Work], index: int, count: int) -> list[Work]:
    """Helper `index`'s share of `items` of `count` helpers: the `index`-th of `count` runs of
    the list as even as can be, in file order. The file is sorted by kernel, so a run holds few
    modules (each helper imports only its own), and every helper compiles about as many: one
    library's kernels are often mostly in one module (21 of Liger's 23 recorded
    specializations), which a share by module would give to one helper alone."""
    start, end = len(items) * index // count, len(items) * (index + 1) // count
    return items[start:end]


def resolve(kernel: str) -> Any:
    """The JIT function named `module.qualname` (under any tuner / heuristics wrappers); the
    module part is the longest importable prefix."""
    from autotune_cache.triton.fingerprint import jit_function

    parts = kernel.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        found = jit_function(obj)
        if found is None:
            raise LookupError(f"{kernel} is no Triton JIT function")
        return found
    raise LookupError(f"no module of {kernel} imports")


def compile_all(directory: Path, index: int, mine: list[Work]
                ) -> Iterator[tuple[str, bool | None]]:
    """Compile each of `mine` for this process's GPU, claiming each first; yields (digest,
    compiled) as each ends, compiled None for one the test process claimed first (it compiles
    it itself: no marker)."""
    from autotune_cache.triton.device import current_device
    from autotune_cache.triton.preload_job import build_launcher
    from autotune_cache.triton.sandbox import ensure_triton_cache_dir

    ensure_triton_cache_dir()  # where the test process's compiles go (sandbox.py)
    try:
        device: Device | None = current_device()
    except Exception as e:  # noqa: BLE001 - no GPU or driver here: everything is left
        log.warning("compile helper: no GPU: %s: %s", type(e).__name__, e)
        device = None
    for kernel, recorded, spec in mine:
        name = digest(spec)
        if not claim(directory, name, str(index)):
            yield name, None
            continue
        compiled = False
        if device is not None and (recorded.name, recorded.arch) == (device.name, device.arch):
            try:
                build_launcher(resolve(kernel).preload(spec))
                compiled = True
            except Exception as e:  # noqa: BLE001 - the process compiles it and reports
                log.warning("compile helper: %s: %s: %s", kernel, type(e).__name__, e)
        log.info("compile helper: %s %s", "compiled" if compiled else "left", kernel)
        yield name, compiled


def _toolchain_now() -> Any:
    """This machine's toolchain as keys record it, or None without a GPU (then no candidate
    is listed: nothing here compiles)."""
    from autotune_cache.triton.device import current_device, toolchain

    try:
        return tuple(sorted(toolchain(current_device()).items()))
    except Exception as e:  # noqa: BLE001 - no GPU, no driver: compile_all says so
        log.info("compile helper: no toolchain: %s", e)
        return None


def _touch(path: Path, text: str) -> None:
    with contextlib.suppress(FileNotFoundError):  # the directory is gone: the run stopped us
        write_atomic(path, text.encode())


# What a helper becomes once its work is done (exec, same pid): a bare interpreter that waits
# for the test process to end, then removes the directory. A helper never exits on its own
# while the test process runs, so none is a zombie the user's os.wait() could collect.
_WAIT_FOR_PARENT = (
    "import os, shutil, sys, time\n"
    "while os.getppid() == int(sys.argv[1]):\n"
    "    time.sleep(1)\n"
    "shutil.rmtree(sys.argv[2], ignore_errors=True)\n")


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    # Stopped mid-compile (pytest_unconfigure): unwind, so that the compiler's temporary
    # files are removed and a running ptxas is killed by subprocess.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # Below the test process: on a busy machine its own work (a launch's compile, a
    # benchmark) comes first, and a helper only uses what is left.
    os.nice(NICENESS)
    directory, index = Path(argv[0]), int(argv[1])
    parent = run(directory, index)
    if parent is None:
        return 0
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-I", "-S", "-c", _WAIT_FOR_PARENT, str(parent),
                              str(directory)])
    return 0  # not reached


def run(directory: Path, index: int) -> int | None:
    """Helper `index`'s work (module doc); the test process's pid, or None when it is gone
    (then the directory is removed)."""
    job = json.loads((directory / JOB_FILE).read_text())
    parent, count = int(job["parent"]), int(job["of"])
    sys.path[:] = [*job["sys_path"], *(p for p in sys.path if p not in job["sys_path"])]
    # The plan first, before anything heavy is imported: the test process waits for it.
    entries = recorded(job["files"])
    listed = winners(entries)[:MAX_WORK]
    mine = share(listed, index, count)
    _touch(directory / f"{PLAN_PREFIX}{index}", json.dumps([digest(s) for _, _, s in mine]))
    toolchain = _toolchain_now()
    if toolchain is not None:
        more = candidates(entries, toolchain, listed)[:MAX_WORK - len(listed)]
        mine += share(more, index, count)
    log.info("compile helper %d: %d specializations", index, len(mine))
    for name, compiled in compile_all(directory, index, mine):
        if os.getppid() != parent:  # the test process is gone (killed): so are we
            log.info("compile helper %d: the test process exited", index)
            shutil.rmtree(directory, ignore_errors=True)
            return None
        if compiled is not None:
            _touch(directory / name, "" if compiled else "-")
    return parent

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
