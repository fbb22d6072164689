"""Helpers for the reliability suite: fresh processes, other users, a real Redis server.

Most scenarios run the library or the CLI in a fresh Python process, as a user's test or shell
would, with a wall-clock limit: a hang (a FIFO, a lock that never frees) then fails the test
instead of the suite. Scenarios between two accounts need root to create them (useradd); they are
skipped with that reason elsewhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Two accounts for the shared-directory scenarios: `other` plays the second user of a shared cache
# (or the attacker), `victim` a user whose files must never be touched.
OTHER_USER = "autotune-other"
VICTIM_USER = "autotune-victim"


@dataclass(frozen=True)
class Result:
    """What a finished child process printed and how it ended."""

    rc: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err

    def assert_no_traceback(self) -> None:
        assert "Traceback" not in self.text, self.text
        assert "Exception ignored" not in self.text, self.text


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child process: this worktree first on sys.path, no inherited flags."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("AUTOTUNE_FLAGS", "AUTOTUNE_DUMP_RUN", "TEST_TOTAL_SHARDS",
                        "PYTEST_ADDOPTS")}
    # This worktree first; entries the parent had (e.g. another filelock under test) after it.
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *inherited])
    env.update(extra or {})
    return env


# The interpreter and the virtualenv may live where other accounts cannot read them (under /root):
# a child that must act as another account imports what it needs first, then drops to that
# account for good (setresuid), so every file it opens afterwards is opened as that user.
_DROP_TO = """
import contextlib, glob, hashlib, json, logging, os, pwd, re, secrets, shutil, stat, sys, time
import importlib.metadata, threading
import filelock, google.protobuf.text_format
import autotune_cache, autotune_cache.cli, autotune_cache.triton.benchlock
import tests.cachetools
_pw = pwd.getpwnam({user!r})
os.setgroups([])
os.setresgid(_pw.pw_gid, _pw.pw_gid, _pw.pw_gid)
os.setresuid(_pw.pw_uid, _pw.pw_uid, _pw.pw_uid)
os.environ["HOME"] = "/nonexistent"
"""


def run_python(code: str, *, env: Mapping[str, str] | None = None, timeout: float = 60,
               user: str | None = None, cwd: Path | None = None) -> Result:
    """Run `code` in a fresh interpreter (as `user` when given); a hang fails the test."""
    code = textwrap.dedent(code)
    if user is not None:
        code = _DROP_TO.format(user=user) + code
    return _run([sys.executable, "-c", code], env=env, timeout=timeout, cwd=cwd)


def run_cli(*args: str, env: Mapping[str, str] | None = None, timeout: float = 60,
            user: str | None = None) -> Result:
    """`autotune-cache ARGS` in a fresh process (as `user` when given)."""
    if user is not None:
        return run_python(f"import sys\nfrom autotune_cache.cli import main\n"
                          f"sys.exit(main({list(args)!r}))", env=env, timeout=timeout, user=user)
    return _run([sys.executable, "-m", "autotune_cache", *args], env=env, timeout=timeout,
                cwd=None)


def _run(cmd: list[str], *, env: Mapping[str, str] | None, timeout: float,
         cwd: Path | None) -> Result:
    try:
        proc = subprocess.run(cmd, env=child_env(env), capture_output=True, text=True,
                              timeout=timeout, cwd=cwd or ROOT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"hung: still running after {timeout:.0f} s: {cmd[-1][:300]!r}\n"
                    f"{(e.stdout or b'')!r}\n{(e.stderr or b'')!r}")
    return Result(proc.returncode, proc.stdout, proc.stderr)


def _ensure_user(name: str) -> None:
    if subprocess.run(["id", "-u", name], capture_output=True).returncode == 0:
        return
    subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin",
                    name], check=True, capture_output=True)


@pytest.fixture(scope="session")
def users() -> tuple[str, str]:
    """(other, victim): two real accounts besides the one running the tests."""
    if os.geteuid() != 0:
        pytest.skip("two-user scenario: needs root to create a second and third account")
    if shutil.which("useradd") is None:
        pytest.skip("two-user scenario: `useradd` is not installed")
    try:
        _ensure_user(OTHER_USER)
        _ensure_user(VICTIM_USER)
    except subprocess.CalledProcessError as e:
        pytest.skip(f"two-user scenario: useradd failed ({e.stderr!r})")
    return OTHER_USER, VICTIM_USER


def chown(path: Path, user: str) -> None:
    shutil.chown(path, user, user)


@pytest.fixture
def world_dir() -> Iterator[Path]:
    """A scratch directory every account can enter (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="autotune-reliability-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def make_fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory) -> Iterator[str]:
    """A real redis-server for the module; skipped with a reason when it is not installed."""
    from tests.core.test_tiers_redis import redis_server

    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture
def redis_client(redis_url):
    import redis

    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    return client
