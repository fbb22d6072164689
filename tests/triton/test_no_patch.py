"""Importing the package writes nothing into Triton; the switch and strict mode write only what
they need, once Triton is imported (triton/hooks.py lists every write, startup.py says when).

Each case runs in a fresh interpreter with nothing exported but what it names, so that no other
test's configuration, and no start-up hook of this one, is in play.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Every Triton global the package may write, by name (hooks.py), read as identities.
SNAPSHOT = """
import json, sys
def ours():
    \"\"\"The Triton globals the package may write (hooks.py) that now hold something of ours.\"\"\"
    import triton, triton.compiler
    from triton import knobs
    from triton.runtime import autotuner
    cls = autotuner.Autotuner
    found = {"triton.autotune": triton.autotune, "autotuner.autotune": autotuner.autotune,
             "Autotuner.__init__": cls.__init__, "Autotuner.run": cls.run,
             "Autotuner._bench": cls._bench, "jit_cache_hook": knobs.runtime.jit_cache_hook,
             "triton.compiler.compile": triton.compiler.compile}
    return sorted(k for k, v in found.items()
                  if (getattr(v, "__module__", None) or "").startswith("autotune_cache"))
"""


def _run(code: str, flags: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOTUNE_", "PYTEST_"))}
    env["PYTHONPATH"] = str(ROOT)
    env["TRITON_INTERPRET"] = "1"
    if flags is not None:
        env["AUTOTUNE_FLAGS"] = flags
    proc = subprocess.run([sys.executable, "-c", SNAPSHOT + code], env=env, text=True,
                          capture_output=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_importing_the_package_patches_nothing():
    result = _run("""
import autotune_cache, autotune_cache.triton
from autotune_cache import Settings, configure
configure(Settings())  # a cache that neither loads, dumps, routes nor requires
print(json.dumps({"changed": ours()}))
""")
    assert result == {"changed": []}


@pytest.mark.parametrize("how", ["configure", "flags"])
def test_strict_mode_watches_the_class_and_routes_nothing(how, tmp_path):
    configure = ("from autotune_cache import Settings, configure\n"
                 "configure(Settings(require_complete=True))\n") if how == "configure" else ""
    result = _run(f"""
import autotune_cache.triton
{configure}
print(json.dumps({{"changed": ours()}}))
""", flags="--require_complete_autotune_results" if how == "flags" else None)
    assert result == {"changed": ["Autotuner.__init__", "Autotuner._bench", "Autotuner.run"]}


def test_the_switch_waits_for_the_programs_import_of_triton():
    """AUTOTUNE_FLAGS=--autotune_all_kernels: importing the package does not import Triton; what
    the program sets before its own `import triton` holds, and the switch is in place right
    after that import."""
    result = _run("""
import os
import autotune_cache
early = "triton" in sys.modules
os.environ["TRITON_DEBUG"] = "1"  # read by Triton at its import: must hold
import triton
from triton import knobs
from autotune_cache.triton import routing
print(json.dumps({"early": early, "debug": knobs.runtime.debug,
                  "routed": triton.autotune is routing.routed_autotune}))
""", flags="--autotune_all_kernels")
    assert result == {"early": False, "debug": True, "routed": True}
