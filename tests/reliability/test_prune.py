"""Item 8 of issue 11: `prune DIR` touches only files it owns: entries named as it names them, its
own temp files and its own lock files. A committed results file, a README or another tool's file
that happens to sit in the directory is left alone."""

from __future__ import annotations

import os
import time

from autotune_cache.cli import main as cli_main
from autotune_cache.formats import save_results
from autotune_cache.store.dirstore import DirectoryStore
from tests.cachetools import CPU, fake_tune, make_key


def test_prune_keeps_files_it_does_not_own(tmp_path):
    store = DirectoryStore(tmp_path)
    store.put(fake_tune(make_key()))
    stale = store.put(fake_tune(make_key(device=CPU)))
    committed = tmp_path / "results.textproto"
    save_results(committed, [fake_tune(make_key(problem={"i": i})) for i in range(3)])
    committed_bytes = committed.read_bytes()
    notes = tmp_path / "notes.textproto"
    notes.write_text("these are my notes\n")
    other_tool_temp = tmp_path / ".tmp-unrelated.txt"
    other_tool_temp.write_text("x")
    old = time.time() - 7 * 86400
    for p in (committed, notes, other_tool_temp):
        os.utime(p, (old, old))
    assert cli_main(["prune", str(tmp_path), "--keep-device", "H200"]) == 0
    assert not stale.exists(), "prune should still drop the entry it was asked to drop"
    for p in (committed, notes, other_tool_temp):
        assert p.exists(), f"prune deleted {p.name}, which it does not own"
    assert committed.read_bytes() == committed_bytes


def test_verify_does_not_call_foreign_files_damaged_entries(tmp_path, capsys):
    store = DirectoryStore(tmp_path)
    store.put(fake_tune(make_key()))
    save_results(tmp_path / "results.textproto", [fake_tune(make_key(problem={"i": 1}))])
    assert cli_main(["verify", str(tmp_path)]) == 0, capsys.readouterr().out


def test_prune_never_deletes_a_lock_that_a_long_tuning_holds(tmp_path):
    """Issue 22, item 8: a tuning that has held its lock for longer than prune's age threshold
    (its lock file untouched since it was taken) keeps it; an abandoned one is removed."""
    from autotune_cache import Cache, Settings
    from tests.reliability.conftest import run_python

    store = DirectoryStore(tmp_path)
    store.put(fake_tune(make_key(problem={"M": 3})))
    held_key, abandoned_key = make_key(), make_key(problem={"M": 2})
    abandoned = store.lock_path(abandoned_key)
    with Cache(Settings(cache_dir=tmp_path)).tune_lock(abandoned_key, timeout=1) as got:
        assert got
    assert abandoned.exists()
    tuner = run_python(f"""
        import os, sys, time
        from pathlib import Path
        from autotune_cache import Cache, Settings
        from autotune_cache.cli import main
        from tests.cachetools import make_key
        root = Path({str(tmp_path)!r})
        with Cache(Settings(cache_dir=root)).tune_lock(make_key(), timeout=1) as held:
            assert held
            old = time.time() - 86400  # a day-long tuning: both lock files look abandoned
            for lock in (root / ".locks").glob("*.lock"):
                os.utime(lock, (old, old))
            assert main(["prune", str(root)]) == 0  # another shell's prune, mid-tuning
            print("still held:", Cache(Settings(cache_dir=root)).tiers[1].store
                  .lock_path(make_key()).exists())
    """)
    tuner.assert_no_traceback()
    assert "still held: True" in tuner.out, tuner.text
    assert "kept lock file" in tuner.out and "a running process holds it" in tuner.out
    assert "removed 0 entries and 1 leftover files" in tuner.out, tuner.out
    assert not abandoned.exists()
    assert store.lock_path(held_key).exists()  # the tuner released it; prune did not remove it
