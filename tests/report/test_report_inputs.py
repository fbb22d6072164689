"""`autotune-cache report` on hostile or mismatched inputs (issue 22, items 7 and 9): names that
matplotlib could read as math text, file names that are not UTF-8, XLA files nesting
google.protobuf.Any, and baselines of another format. Each gives a page or a named error, never
a traceback; the CLI runs in a fresh process, as a user's shell would run it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from google.protobuf import any_pb2

from autotune_cache.formats import save_results
from autotune_cache.xla.proto import xla_autotuning_pb2 as legacy_pb
from tests.cachetools import fake_tune, make_key
from tests.reliability.conftest import ROOT, run_cli

pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")

XLA = ROOT / "tests" / "fixtures" / "xla_h200_jax0.11.2"


def test_dollar_signs_in_names_are_drawn_as_text(tmp_path):
    path = tmp_path / "math.textproto"
    save_results(path, [fake_tune(make_key(kernel="k$x^$", problem={"M": "$\\frac{a$"}))])
    res = run_cli("report", str(path), "-o", str(tmp_path / "r.html"), "--png",
                  str(tmp_path / "png"))
    res.assert_no_traceback()
    assert res.rc == 0, res.text
    page = (tmp_path / "r.html").read_text()
    assert "k$x^$" in page and "$\\frac{a$" in page  # shown as written, not as math
    assert len(list((tmp_path / "png").glob("*.png"))) == 1


def test_a_file_name_that_is_not_utf8(tmp_path):
    path = Path(os.fsdecode(bytes(tmp_path) + b"/bad\xff.textproto"))
    out = Path(os.fsdecode(bytes(tmp_path) + b"/page\xfe.html"))
    save_results(path, [fake_tune(make_key())])
    res = run_cli("report", str(path), "--baseline", str(path), "-o", str(out),
                  env={"LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8"})
    res.assert_no_traceback()
    assert res.rc == 0, res.text
    assert "page\\xfe.html" in res.out
    assert "bad\\xff.textproto" in out.read_text(encoding="utf-8")


def nested_any_legacy_file(path: Path, depth: int = 3000) -> Path:
    results = legacy_pb.AutotuneResults(version=3)
    entry = results.results.add(device="CUDA: 9.0", hlo="{ ROOT x = f32[] add() }")
    inner = any_pb2.Any(type_url="type.googleapis.com/xla.gpu.BackendConfig")
    for _ in range(depth):
        outer = any_pb2.Any()
        outer.Pack(inner)
        inner = outer
    entry.result.other.name = "x"
    entry.result.other.config.CopyFrom(inner)
    path.write_bytes(results.SerializeToString())
    return path


def test_nested_any_is_a_named_error_not_a_recursion_error(tmp_path):
    binary = nested_any_legacy_file(tmp_path / "nested.pb")
    text = tmp_path / "nested.textproto"
    text.write_text('version: 3\nresults {\n  device: "d"\n  hlo: "h"\n  result { other { '
                    'name: "x" config { ' + "[type.googleapis.com/google.protobuf.Any] { " * 3000
                    + "}" * 3000 + " } } }\n}\n")
    runs = {
        "report binary": run_cli("report", str(binary), "-o", str(tmp_path / "b.html")),
        "convert binary to text": run_cli("convert", str(binary), str(tmp_path / "o.textproto")),
        "inspect text": run_cli("inspect", str(text)),
        "verify text": run_cli("verify", str(text)),
        "report text": run_cli("report", str(text), "-o", str(tmp_path / "t.html")),
    }
    for what, res in runs.items():
        res.assert_no_traceback()
        if what == "report binary":
            assert res.rc == 0, res.text  # the summary unpacks one level only
            continue
        assert res.rc in (1, 2), (what, res.text)
        assert "nest" in res.text and "too deeply" in res.text, (what, res.text)
        assert "RecursionError" not in res.text


def test_a_baseline_of_another_format_is_refused(tmp_path):
    ours = tmp_path / "ours.textproto"
    save_results(ours, [fake_tune(make_key())])
    for new, old in ((ours, XLA / "legacy.textproto"), (XLA / "res.textproto", ours)):
        res = run_cli("report", str(new), "--baseline", str(old), "-o", str(tmp_path / "r.html"))
        res.assert_no_traceback()
        assert res.rc == 2, res.text
        assert "--baseline" in res.err and "format" in res.err, res.err
        assert str(new) in res.err and str(old) in res.err, res.err
    assert not (tmp_path / "r.html").exists()
    same = run_cli("report", str(ours), "--baseline", str(ours), "-o", str(tmp_path / "r.html"))
    assert same.rc == 0, same.text
