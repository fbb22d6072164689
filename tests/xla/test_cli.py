"""The autotune-cache verbs on XLA's own files (fixtures written by JAX 0.11.2 on an H200)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from autotune_cache.cli import main
from autotune_cache.resultsets.registry import load_any

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "xla_h200_jax0.11.2"
RES, LEGACY, FUSION, FUSION_LEGACY = (FIX / "res.textproto", FIX / "legacy.textproto",
                                      FIX / "fusion", FIX / "fusion_legacy")
DEVICE_FP = "ed0e56ab8b2a0ecb"


@pytest.mark.parametrize(("path", "fmt", "n"), [
    (RES, "xla", 10), (LEGACY, "xla-legacy", 10), (FUSION, "xla", 16),
    (FUSION_LEGACY, "xla-legacy", 10)], ids=lambda v: getattr(v, "name", str(v)))
def test_inspect_json_every_fixture(path, fmt, n, capsys):
    assert main(["inspect", "--json", str(path)]) == 0
    (report,) = json.loads(capsys.readouterr().out)["files"]
    assert report["format"] == fmt and len(report["entries"]) == n and report["problems"] == []


def test_inspect_table_shows_configs(capsys):
    assert main(["inspect", str(RES), str(LEGACY)]) == 0
    out = capsys.readouterr().out
    assert "res.textproto (xla): 10 entries" in out
    assert "TRITON block_m=128 block_n=256" in out and "CUBLASLT_FISSION" in out
    assert "legacy.textproto (xla-legacy): 10 entries" in out
    assert "gemm algorithm=3" in out and "10  version=52" in out


def test_verify_ok_and_damaged(tmp_path, capsys):
    assert main(["verify", str(RES), str(LEGACY), str(FUSION)]) == 0
    shutil.copytree(FUSION, tmp_path / "f")
    victim = sorted((tmp_path / "f" / DEVICE_FP).glob("*.pb"))[0]
    victim.write_bytes(b"\xff garbage")
    bad = tmp_path / "bad.textproto"
    bad.write_text(RES.read_text()[:-20])
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "f"), str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"FAIL {victim}" in out and f"FAIL {bad}" in out


@pytest.mark.parametrize(("src", "chain"), [
    (RES, ["a.pb", "dir/", "b.binpb", "c.textproto"]),
    # Legacy per-fusion files do not record device and HLO, so a directory is a one-way step.
    (LEGACY, ["a.pb", "b.textproto"]),
], ids=["new", "legacy"])
def test_convert_text_binary_dir_and_back(tmp_path, src, chain):
    cur = src
    for name in chain:
        dst = tmp_path / name
        assert main(["convert", str(cur), str(dst)]) == 0
        cur = dst
    assert main(["diff", str(src), str(cur)]) == 0
    assert cur.read_bytes() == src.read_bytes()


def test_diff_reports_retuned_fusions(capsys):
    assert main(["diff", str(RES), str(FUSION)]) == 1
    out = capsys.readouterr().out
    assert "1 winners changed, 0 re-timed, 6 new, 0 removed, 9 unchanged" in out
    assert "~ fce9c74f1d1a635db2e4a3181e0c1551" in out and "block_n=256" in out


def test_diff_legacy_file_against_its_directory(capsys):
    assert load_any(FUSION_LEGACY).format_name == "xla-legacy"
    assert main(["diff", str(LEGACY), str(FUSION_LEGACY)]) == 1
    assert "2 winners changed, 0 re-timed, 0 new, 0 removed, 8 unchanged" in \
        capsys.readouterr().out


def test_merge_file_and_directory(tmp_path, capsys):
    out = tmp_path / "m.textproto"
    assert main(["merge", str(RES), str(FUSION), "-o", str(out)]) == 1  # one conflict
    assert "fce9c74f1d1a635db2e4a3181e0c1551" in capsys.readouterr().err
    assert main(["merge", str(RES), str(FUSION), "-o", str(out), "--on-conflict=newest"]) == 0
    assert len(load_any(out).rows()) == 16


def test_merge_refuses_mixed_formats(tmp_path, capsys):
    assert main(["merge", str(RES), str(LEGACY), "-o", str(tmp_path / "x.textproto")]) == 2
    assert "different formats" in capsys.readouterr().err


def test_prune_keep_device_on_a_file(tmp_path, capsys):
    path = tmp_path / "two.textproto"
    text = RES.read_text()
    half = text.split("entries {")
    other = "entries {".join(
        [half[0]] + [p.replace(DEVICE_FP, "0123456789abcdef") if i % 2 else p
                     for i, p in enumerate(half[1:])])
    path.write_text(other)
    assert main(["prune", str(path), f"--keep-device={DEVICE_FP}"]) == 0
    rows = load_any(path).rows()
    assert len(rows) == 5 and {r.device for r in rows} == {DEVICE_FP}


def test_prune_keep_device_on_a_directory(tmp_path, capsys):
    shutil.copytree(FUSION, tmp_path / "f")
    # A dry run that would empty the directory gives the real run's refusal (issue 52).
    assert main(["prune", str(tmp_path / "f"), "--keep-device=0123456789abcdef",
                 "--dry-run"]) == 2
    assert len(load_any(tmp_path / "f").rows()) == 16
    assert main(["prune", str(tmp_path / "f"), f"--keep-device={DEVICE_FP}"]) == 0
    assert len(load_any(tmp_path / "f").rows()) == 16
    # Criteria that remove every entry are refused unless asked for (issue 39).
    assert main(["prune", str(tmp_path / "f"), "--keep-device=0123456789abcdef"]) == 2
    assert len(load_any(tmp_path / "f").rows()) == 16
    assert "would leave it empty" in capsys.readouterr().err
    assert main(["prune", str(tmp_path / "f"), "--keep-device=0123456789abcdef",
                 "--allow-empty"]) == 0
    assert not any((tmp_path / "f").rglob("*.pb"))
    assert load_any(tmp_path / "f").rows() == []  # still an (empty) XLA directory


def test_prune_keep_device_on_legacy_file(tmp_path):
    path = tmp_path / "l.pb"
    assert main(["convert", str(LEGACY), str(path)]) == 0
    assert main(["prune", str(path), "--keep-device=CUDA: 8.0", "--allow-empty"]) == 0
    assert load_any(path).rows() == []
    assert main(["convert", str(LEGACY), str(path)]) == 0
    assert main(["prune", str(path), "--keep-device=CUDA: 9.0"]) == 0
    assert len(load_any(path).rows()) == 10


def test_single_per_fusion_entry_file(tmp_path, capsys):
    shutil.copytree(FUSION, tmp_path / "f")
    one = tmp_path / "f" / DEVICE_FP / "fce9c74f1d1a635db2e4a3181e0c1551.pb"
    assert main(["inspect", str(one)]) == 0
    assert "1 entries" in capsys.readouterr().out
    assert main(["convert", str(one), str(tmp_path / "one.textproto")]) == 0
    assert "entries {" in (tmp_path / "one.textproto").read_text()
    assert main(["diff", str(one), str(tmp_path / "one.textproto")]) == 0
    original = one.read_bytes()
    assert main(["prune", str(one), f"--keep-device={DEVICE_FP}"]) == 0
    assert one.read_bytes() == original
    assert main(["prune", str(one), "--keep-device=0123456789abcdef", "--allow-empty"]) == 0
    assert not one.exists()  # the per-fusion entry was pruned: its file goes, as in a directory


def test_misplaced_entry_file_fails_verify(tmp_path, capsys):
    src = FUSION / DEVICE_FP / "fce9c74f1d1a635db2e4a3181e0c1551.pb"
    (tmp_path / "elsewhere").mkdir()
    moved = tmp_path / "elsewhere" / src.name
    shutil.copyfile(src, moved)
    assert main(["verify", str(moved)]) == 1
    assert "will never be read" in capsys.readouterr().out


def test_single_legacy_per_fusion_file(capsys):
    one = FUSION_LEGACY / "jQkD7PvI3H50S0vhoyUXzc56PZywET6hqSLMk_8bL7Q.textproto"
    assert main(["inspect", "--json", str(one)]) == 0
    (report,) = json.loads(capsys.readouterr().out)["files"]
    assert report["format"] == "xla-legacy"
    (entry,) = report["entries"]
    assert entry["id"] == one.stem and entry["config"].startswith("triton block_m=128")
