"""Observer for bench/regen_multi_gpu.py: records which GPU a dump job saw, from inside the job.

bench/regen_multi_gpu.py puts this directory first on the dump jobs' PYTHONPATH, so Python
imports this file at start-up of every job (and of the processes it starts) without any change
to the example tests. It wraps `unittest.TestProgram.runTests` (every example's main is
`unittest.main()`) so that, after the tests ran and before the process exits, it writes
`$TEST_UNDECLARED_OUTPUTS_DIR/gpu_seen.json` (next to the dump); an exit hook writes it for a
main that does not go through unittest. The file holds:

- `cuda_visible_devices`: the pin the scheduler gave the job;
- `torch_device_count` and `torch_uuids`: what `torch.cuda.device_count()` and each visible
  device's UUID say inside the job (torch is imported then if the job did not import it, e.g.
  the JAX example; `ended` is read before that, so the timeline excludes it). This must happen
  before interpreter shutdown: importing torch from an exit hook fails ("can't register atexit
  after shutdown"), hence the runTests wrapper;
- `jax_devices`: `jax.devices()` when the job imported JAX;
- `started` / `ended` (epoch seconds) and the pid, to show which jobs overlapped.

Only the process that ran the test's main writes (its `sys.argv[0]` is `AUTOTUNE_TEST_MAIN`,
which the `.dump` wrapper sets): not the pin wrapper around it (`regen_gpu_pin.py`, also a Python
process with the same environment) nor any process the test starts. Writing is atomic.
`AUTOTUNE_OBSERVER_TORCH=0` skips the torch part (the CPU smoke test's cheap mode).

After registering, the next `sitecustomize` on sys.path (Debian ships one in
/usr/lib/python3.X) is run too, so shadowing it changes nothing else.
"""

from __future__ import annotations

import atexit
import importlib.machinery
import json
import os
import sys
import time

OUTPUT_NAME = "gpu_seen.json"
_STARTED = time.time()
_HERE = os.path.dirname(os.path.abspath(__file__))
_written = False


def _record() -> None:
    """Writes gpu_seen.json into TEST_UNDECLARED_OUTPUTS_DIR (nothing when it is unset)."""
    global _written
    if _written:
        return
    main = os.environ.get("AUTOTUNE_TEST_MAIN")
    if not main or not sys.argv or os.path.abspath(sys.argv[0]) != os.path.abspath(main):
        return
    outputs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
    if not outputs or not os.path.isdir(outputs):
        return
    _written = True
    path = os.path.join(outputs, OUTPUT_NAME)
    info: dict[str, object] = {
        "pid": os.getpid(),
        "argv0": sys.argv[0] if sys.argv else "",
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "started": _STARTED,
        "ended": time.time(),
        "jax_imported": "jax" in sys.modules,
    }
    if "jax" in sys.modules:
        try:
            info["jax_devices"] = [str(d) for d in sys.modules["jax"].devices()]
        except Exception as e:  # noqa: BLE001 - an observer must never fail the job
            info["jax_error"] = f"{type(e).__name__}: {e}"
    if os.environ.get("AUTOTUNE_OBSERVER_TORCH") == "0":
        # The CPU smoke test's cheap mode: importing torch takes seconds on a small CI machine.
        info["torch_error"] = "skipped: AUTOTUNE_OBSERVER_TORCH=0"
    else:
        _record_torch(info)
    temp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temp, "w") as handle:
            json.dump(info, handle, indent=1)
        os.replace(temp, path)
    except OSError:
        pass


def _record_torch(info: dict[str, object]) -> None:
    """What torch sees: the visible device count, UUIDs and names."""
    try:
        import torch

        count = torch.cuda.device_count()
        info["torch_device_count"] = count
        info["torch_uuids"] = [str(torch.cuda.get_device_properties(i).uuid)
                               for i in range(count)]
        info["torch_names"] = [torch.cuda.get_device_name(i) for i in range(count)]
    except Exception as e:  # noqa: BLE001 - an observer must never fail the job
        info["torch_error"] = f"{type(e).__name__}: {e}"


def _chain_next_sitecustomize() -> None:
    """Runs the sitecustomize this file shadows, if any (searching sys.path after this dir)."""
    rest = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin is None:
        return
    if os.path.dirname(os.path.abspath(spec.origin)) == _HERE:
        return
    try:
        code = spec.loader.get_code("sitecustomize")  # type: ignore[attr-defined]
        if code is not None:
            exec(code, {"__name__": "sitecustomize", "__file__": spec.origin})
    except Exception:  # noqa: BLE001, S110 - as site.py does: a broken sitecustomize is ignored
        pass


def _wrap_run_tests() -> None:
    """Records right after unittest ran the tests (before its sys.exit)."""
    import unittest

    original = unittest.TestProgram.runTests

    def run_tests(self: unittest.TestProgram, *args: object, **kwargs: object) -> None:
        try:
            original(self, *args, **kwargs)  # type: ignore[arg-type]
        finally:
            _record()

    unittest.TestProgram.runTests = run_tests  # type: ignore[method-assign]


_wrap_run_tests()
atexit.register(_record)
_chain_next_sitecustomize()
