"""Item 8 of issue 11: `prune DIR` touches only files it owns: entries named as it names them, its
own temp files and its own lock files. A committed results file, a README or another tool's file
that happens to sit in the directory is left alone."""

from __future__ import annotations

import os
import time

from autotune_cache.cli import main as cli_main
from autotune_cache.dirstore import DirectoryStore
from autotune_cache.formats import save_results
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
