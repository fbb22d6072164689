"""A real, throwaway `redis-server` for the benchmarks' shared-tier scenarios (gpu_perf's A2,
suite_perf's S-fill / S-shared).

The GPU machine has no network, so the binary is carried: `--redis-server PATH` (a `lib/`
folder beside it holds the libraries it links, as Debian's `redis-server` needs off its own
system), else `redis-server` on PATH, else a `.whl/redis/redis-server`, else the binary inside a
carried PyPI `redis_server` wheel in `.whl/`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import stat
import subprocess
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def find_binary(given: str | None, work: Path) -> str | None:
    """The redis-server to run (see the module docstring), or None when there is none."""
    if given:
        return given
    found = shutil.which("redis-server")
    if found:
        return found
    carried = ROOT / ".whl" / "redis" / "redis-server"
    if carried.is_file():
        return str(carried)
    wheels = sorted((ROOT / ".whl").glob("redis_server-*.whl"))
    if not wheels:
        return None
    with zipfile.ZipFile(wheels[-1]) as z:
        z.extract("redis_server/bin/redis-server", work)
    binary = work / "redis_server" / "bin" / "redis-server"
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    return str(binary)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def redis_server(binary: str, work: Path) -> Iterator[str]:
    """A real redis-server on a free port, no persistence, for the duration; yields its URL."""
    port = _free_port()
    env = dict(os.environ)
    libs = Path(binary).resolve().parent / "lib"
    if libs.is_dir():  # a carried binary with the libraries it needs beside it
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(libs),
                                                                env.get("LD_LIBRARY_PATH")]))
    proc = subprocess.Popen([binary, "--port", str(port), "--save", "", "--appendonly", "no",
                             "--dir", str(work)], stdout=subprocess.DEVNULL, env=env)
    try:
        for _ in range(200):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.1):
                break
            if proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {proc.returncode}")
            time.sleep(0.05)
        else:
            raise RuntimeError(f"redis-server did not listen on port {port} within 10 s")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
