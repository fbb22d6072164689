"""--autotune_remote_compile_cache: Triton's own RemoteCacheManager, our backend, a real Redis.

Two "machines" are two TRITON_CACHE_DIRs: what one compiles (puts), the other finds on the
server and materialises in its own local cache, as Triton's compiler does on a fleet.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune_cache.config.flags import parse_flags
from autotune_cache.errors import FlagError
from autotune_cache.foundation import env
from autotune_cache.triton import process, remote_compile
from tests.core.test_tiers_redis import free_port, redis_server

pytest.importorskip("redis", reason="the redis client is not installed (extra 'redis')")
from triton.runtime.cache import RemoteCacheManager, get_cache_manager  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
KERNEL_HASH = "ab" * 32  # Triton's cache keys are hex hashes
FLEET_KEY = "fleet-secret-" + "k" * 40  # AUTOTUNE_REMOTE_COMPILE_KEY of the tests' fleet


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture
def triton_env(monkeypatch):
    """Triton's cache variables restored after the test (enable() writes them)."""
    for name in (remote_compile.TRITON_CACHE_MANAGER, remote_compile.TRITON_REMOTE_CACHE_BACKEND,
                 "TRITON_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(process, "_state", process.ProcessState())  # a new connection
    monkeypatch.setenv("AUTOTUNE_REMOTE_COMPILE_KEY", FLEET_KEY)
    return monkeypatch


def machine(monkeypatch, root):
    """Switch to another machine's local Triton cache; returns Triton's manager for the key."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(root))
    return get_cache_manager(KERNEL_HASH)


def test_the_flag_needs_the_results_server():
    assert parse_flags("--autotune_remote_cache=redis://h:1/0 --autotune_remote_compile_cache"
                       ).remote_compile_cache
    with pytest.raises(FlagError, match="--autotune_remote_compile_cache needs "
                                        "--autotune_remote_cache"):
        parse_flags("--autotune_remote_compile_cache")


def test_a_second_machine_gets_the_first_ones_binaries(server, triton_env, tmp_path):
    import redis

    assert remote_compile.enable(server)
    first = machine(triton_env, tmp_path / "a")
    assert isinstance(first, RemoteCacheManager)
    assert first.get_file("k.cubin") is None  # nothing compiled anywhere yet
    cubin = first.put(b"\x7fELF compiled kernel", "k.cubin")
    meta = first.put('{"name": "k"}', "k.json", binary=False)
    first.put_group("__grp__k.json", {"k.cubin": cubin, "k.json": meta})

    second = machine(triton_env, tmp_path / "b")
    group = second.get_group("__grp__k.json")
    assert sorted(group) == ["k.cubin", "k.json"]
    assert group["k.cubin"].startswith(str(tmp_path / "b"))
    with open(group["k.cubin"], "rb") as f:
        assert f.read() == b"\x7fELF compiled kernel"
    names = redis.Redis.from_url(server).keys("*")
    assert names and all(n.startswith(remote_compile.NAMESPACE.encode() + b":") for n in names)


def test_a_server_that_is_down_means_compiling_locally(triton_env, tmp_path, caplog):
    remote_compile.enable(f"redis://127.0.0.1:{free_port()}/0")
    manager = machine(triton_env, tmp_path / "a")
    with caplog.at_level(logging.WARNING, logger="autotune_cache"):
        assert manager.get_file("k.cubin") is None
        path = manager.put(b"local", "k.cubin")
        assert manager.get_file("k.cubin") is None  # no second connection attempt
    with open(path, "rb") as f:
        assert f.read() == b"local"
    assert caplog.text.count("remote compile cache") == 1


def test_oversized_values_are_neither_uploaded_nor_used(server, triton_env, tmp_path):
    remote_compile.enable(server)
    triton_env.setattr(remote_compile, "MAX_VALUE_BYTES", 8)
    manager = machine(triton_env, tmp_path / "a")
    manager.put(b"0123456789", "big.cubin")
    assert machine(triton_env, tmp_path / "b").get_file("big.cubin") is None


def test_a_value_over_the_limit_is_never_downloaded(server, triton_env, tmp_path):
    """Planted by another writer of the server: its length is asked first, its bytes never."""
    import redis

    client = redis.Redis.from_url(server)
    remote_compile.enable(server)
    name = f"{remote_compile.NAMESPACE}:{KERNEL_HASH}:huge.cubin"
    client.set(name, b"x" * (4 << 20))
    triton_env.setattr(remote_compile, "MAX_VALUE_BYTES", 1 << 20)
    backend = remote_compile.RedisCompileBackend(KERNEL_HASH)  # what Triton's manager calls
    sent_before = client.info("stats")["total_net_output_bytes"]
    assert backend.get(["huge.cubin"]) == {}
    sent = client.info("stats")["total_net_output_bytes"] - sent_before
    assert sent < 64 * 1024, f"the server sent {sent} bytes for a value it should not send"
    client.delete(name)


def test_the_users_own_cache_manager_wins(triton_env, caplog):
    triton_env.setenv(remote_compile.TRITON_CACHE_MANAGER, "mine:Manager")
    with caplog.at_level(logging.WARNING, logger="autotune_cache"):
        assert not remote_compile.enable("redis://127.0.0.1:1/0")
    assert "TRITON_CACHE_MANAGER=mine:Manager" in caplog.text
    assert env.get(remote_compile.TRITON_REMOTE_CACHE_BACKEND) == ""


def test_a_child_process_finds_the_server_in_its_flags(server, triton_env, tmp_path):
    """Triton's variables are inherited by children; the URL comes from AUTOTUNE_FLAGS there."""
    triton_env.setenv("AUTOTUNE_FLAGS",
                      f"--autotune_remote_cache={server} --autotune_remote_compile_cache")
    triton_env.setenv(remote_compile.TRITON_CACHE_MANAGER, remote_compile.REMOTE_MANAGER)
    triton_env.setenv(remote_compile.TRITON_REMOTE_CACHE_BACKEND, remote_compile.BACKEND)
    machine(triton_env, tmp_path / "a").put(b"child", "child.cubin")
    assert machine(triton_env, tmp_path / "b").get_file("child.cubin") is not None


def test_the_tuner_turns_it_on_before_its_first_compile(server, triton_env, use_cache, fake):
    from tests.triton import kernels

    use_cache(remote_cache=server, remote_compile_cache=True)
    fake({16: 4.0, 32: 2.0, 64: 1.5, 128: 3.0})
    assert env.get(remote_compile.TRITON_CACHE_MANAGER) == ""
    kernels.launch_add(kernels.tuned_add())
    assert env.get(remote_compile.TRITON_CACHE_MANAGER) == remote_compile.REMOTE_MANAGER
    assert env.get(remote_compile.TRITON_REMOTE_CACHE_BACKEND) == remote_compile.BACKEND


def test_reconfigured_without_the_flag_the_server_is_no_longer_used(server, triton_env,
                                                                     use_cache, fake):
    """A long-lived process (or a test session) that configures again without the flag stops
    sending its compiles to the server, and its children no longer inherit it."""
    from tests.triton import kernels

    use_cache(remote_cache=server, remote_compile_cache=True)
    fake({16: 4.0, 32: 2.0, 64: 1.5, 128: 3.0})
    kernels.launch_add(kernels.tuned_add())
    assert env.get(remote_compile.TRITON_CACHE_MANAGER) == remote_compile.REMOTE_MANAGER
    use_cache(remote_cache=server)
    fake({16: 4.0, 32: 2.0, 64: 1.5, 128: 3.0})
    kernels.launch_add(kernels.tuned_add(), n=96)
    assert env.get(remote_compile.TRITON_CACHE_MANAGER) == ""
    assert env.get(remote_compile.TRITON_REMOTE_CACHE_BACKEND) == ""
    assert remote_compile.server_url() is None


def test_disabling_keeps_the_users_own_cache_manager(triton_env):
    triton_env.setenv(remote_compile.TRITON_CACHE_MANAGER, "mine:Manager")
    remote_compile.disable()
    assert env.get(remote_compile.TRITON_CACHE_MANAGER) == "mine:Manager"


# A child process started by a parent that enabled the remote compile cache: it inherits
# Triton's two variables, and its own AUTOTUNE_FLAGS say whether it wants the server.
CHILD = r"""
import json, os, sys
from triton.runtime.cache import get_cache_manager
first = get_cache_manager(sys.argv[1])
first.put(b"child", sys.argv[2])
second = get_cache_manager(sys.argv[1])
print(json.dumps({"first": type(first).__name__, "second": type(second).__name__,
                  "found_again": second.get_file(sys.argv[2]) is not None,
                  "manager_left": os.environ.get("TRITON_CACHE_MANAGER", "")}))
"""


def _child(server_flags: str, filename: str, tmp_path) -> dict:
    """Run CHILD: it files `filename` under a kernel hash of its own TRITON_CACHE_DIR."""
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    environment.update(AUTOTUNE_FLAGS=server_flags, TRITON_CACHE_DIR=str(tmp_path / filename),
                       AUTOTUNE_REMOTE_COMPILE_KEY=FLEET_KEY,
                       PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                                os.environ.get("PYTHONPATH")])),
                       **{remote_compile.TRITON_CACHE_MANAGER: remote_compile.REMOTE_MANAGER,
                          remote_compile.TRITON_REMOTE_CACHE_BACKEND: remote_compile.BACKEND})
    proc = subprocess.run([sys.executable, "-c", CHILD, KERNEL_HASH, filename], env=environment,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _uploaded(server: str, filename: str) -> list[bytes]:
    import redis

    client = redis.Redis.from_url(server)
    return sorted(client.scan_iter(f"{remote_compile.NAMESPACE}:*:{filename}"))


@pytest.mark.parametrize("flags", ["results", "none"])
def test_a_child_whose_flags_drop_it_compiles_locally(server, triton_env, tmp_path, flags):
    """A child that inherited the variables but whose AUTOTUNE_FLAGS keep only the results
    server, or set nothing, neither uploads nor asks the server (it used to send its compiles
    there, or fail with a FlagError without --autotune_remote_cache), keeps what it compiled in
    its local cache, and removes the variables for its own children."""
    filename = f"child-{flags}.cubin"
    text = f"--autotune_remote_cache={server}" if flags == "results" else ""
    out = _child(text, filename, tmp_path)
    assert _uploaded(server, filename) == []
    assert out == {"first": "RemoteCacheManager", "second": "FileCacheManager",
                   "found_again": True, "manager_left": ""}


def test_a_child_whose_flags_keep_it_uploads(server, triton_env, tmp_path):
    filename = "child-compile.cubin"
    out = _child(f"--autotune_remote_cache={server} --autotune_remote_compile_cache",
                 filename, tmp_path)
    assert len(_uploaded(server, filename)) == 1
    assert out["first"] == out["second"] == "RemoteCacheManager" and out["found_again"]
    assert out["manager_left"] == remote_compile.REMOTE_MANAGER


# ----- the trust model (issue 36): authenticated values, read mode, the missing key -----------


def test_a_planted_or_forged_kernel_is_never_used(server, triton_env, tmp_path, caplog):
    """A second writer of the server plants a cubin for a kernel the fleet will compile: raw,
    and with a tag under another key. Neither is used: Triton compiles locally, and one warning
    says so, without the key."""
    import redis

    client = redis.Redis.from_url(server)
    remote_compile.enable(server)
    raw = f"{remote_compile.NAMESPACE}:{KERNEL_HASH}:planted.cubin"
    forged = f"{remote_compile.NAMESPACE}:{KERNEL_HASH}:forged.cubin"
    client.set(raw, b"\x7fELF evil")
    client.set(forged, remote_compile.seal(forged, b"\x7fELF evil", b"w" * 40))
    backend = remote_compile.RedisCompileBackend(KERNEL_HASH)
    with caplog.at_level(logging.WARNING, logger="autotune_cache"):
        assert backend.get(["planted.cubin", "forged.cubin"]) == {}
        assert backend.get(["planted.cubin"]) == {}
    warnings = [r.getMessage() for r in caplog.records if "does not verify" in r.getMessage()]
    assert len(warnings) == 1 and FLEET_KEY not in warnings[0]
    assert machine(triton_env, tmp_path / "a").get_file("planted.cubin") is None
    # What the fleet writes itself verifies.
    backend.put("good.cubin", b"\x7fELF good")
    assert backend.get(["good.cubin"]) == {"good.cubin": b"\x7fELF good"}
    client.delete(raw, forged)


def test_read_mode_reads_the_server_and_never_uploads(server, triton_env, tmp_path):
    assert remote_compile.enable(server)
    machine(triton_env, tmp_path / "a").put(b"\x7fELF shared", "shared.cubin")
    remote_compile.enable(server, read_only=True)
    reader = machine(triton_env, tmp_path / "b")
    assert reader.get_file("shared.cubin") is not None
    reader.put(b"\x7fELF mine", "readers-own.cubin")
    assert _uploaded(server, "readers-own.cubin") == []


def test_the_flag_refuses_to_start_without_the_fleets_key(server, triton_env):
    triton_env.delenv("AUTOTUNE_REMOTE_COMPILE_KEY")
    with pytest.raises(FlagError, match="AUTOTUNE_REMOTE_COMPILE_KEY is not set"):
        remote_compile.enable(server)
    triton_env.setenv("AUTOTUNE_REMOTE_COMPILE_KEY", "short")
    with pytest.raises(FlagError, match="shorter than 32 characters"):
        remote_compile.enable(server)
    # Issue 49: the length alone let a placeholder through.
    triton_env.setenv("AUTOTUNE_REMOTE_COMPILE_KEY", "x" * 40)
    with pytest.raises(FlagError, match="fewer than 8 distinct characters"):
        remote_compile.enable(server)
