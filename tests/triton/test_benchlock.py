"""The device-wide benchmarking lock serialises tuners on one GPU and never hangs them."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from autotune_cache.triton.benchlock import device_bench_lock


def test_second_holder_waits_then_gives_up_with_a_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("AUTOTUNE_BENCH_LOCK_DIR", str(tmp_path))
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with device_bench_lock("GPU-1234") as locked:
            assert locked
            held.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(10)
    with device_bench_lock("GPU-1234", timeout=0.3) as locked:
        assert not locked  # timed out: benchmarks anyway
    with device_bench_lock("GPU-other", timeout=0.3) as locked:
        assert locked  # another device is not blocked
    release.set()
    thread.join()
    with device_bench_lock("GPU-1234", timeout=0.3) as locked:
        assert locked
    assert "still held" in caplog.text
    assert (tmp_path / "bench-GPU-1234.lock").exists()


def test_lock_directories_are_never_made_world_writable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    configured = tmp_path / "mine"
    configured.mkdir(mode=0o700)
    configured.chmod(0o700)
    monkeypatch.setenv("AUTOTUNE_BENCH_LOCK_DIR", str(configured))
    with device_bench_lock("GPU-1") as locked:
        assert locked
    assert configured.stat().st_mode & 0o7777 == 0o700  # the user's directory, left alone

    monkeypatch.delenv("AUTOTUNE_BENCH_LOCK_DIR")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with device_bench_lock("GPU-1") as locked:
        assert locked
    # Another account would not trust it anyway (docs/security.md): a lock directory shared by
    # every account is one root creates.
    assert not (tmp_path / "tmp" / "autotune_cache_bench_locks").stat().st_mode & 0o002
