"""`bazel test --run_under` wrapper that records a real test target's autotune env, then runs it.

Lets the integration tests check the exact flags (RULES_AUTOTUNE_MACRO_FLAGS /
RULES_AUTOTUNE_MACRO_XLA_FLAGS, before the test wrapper merges them) that autotuned_py_test
generated for an example they do not own (e.g. the JAX example), without changing the example.
The values go to $TEST_UNDECLARED_OUTPUTS_DIR/recorded_env.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# AUTOTUNE_BINARY_CACHE_DIR is no longer set (issue 23); recorded so that exact assertions would
# catch its return.
RECORDED = ("AUTOTUNE_FLAGS", "XLA_FLAGS", "RULES_AUTOTUNE_MACRO_FLAGS",
            "RULES_AUTOTUNE_MACRO_XLA_FLAGS", "AUTOTUNE_REGEN_HINT", "AUTOTUNE_BINARY_CACHE_DIR")


def main(argv: list[str]) -> int:
    """Saves the recorded variables and runs `argv` (the test command); returns its exit code."""
    if not argv:
        print("env_recorder: no test command given", file=sys.stderr)
        return 2
    outputs = Path(os.environ["TEST_UNDECLARED_OUTPUTS_DIR"])
    outputs.mkdir(parents=True, exist_ok=True)
    values = {name: os.environ[name] for name in RECORDED if name in os.environ}
    (outputs / "recorded_env.json").write_text(json.dumps(values, sort_keys=True))
    return subprocess.run(argv, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
