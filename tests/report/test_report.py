"""`autotune-cache report` (autotune_cache/report/): the page renders for every committed example
cache (ours and XLA's), is self-contained, marks winners, lists failed configs with their reasons,
and with --baseline says which winners changed and by how much; --png writes one chart per
kernel."""

from __future__ import annotations

import json
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest

from autotune_cache import cli
from autotune_cache.formats import load_results, save_results
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.report.model import build_reports
from autotune_cache.report.page import render_html
from autotune_cache.resultsets.ours import config_summary
from autotune_cache.resultsets.registry import load_any
from tests.cachetools import fake_tune, make_key

pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLES = sorted(ROOT.glob("examples/*/*.autotune.textproto"))


class Page(HTMLParser):
    """The elements of a page, with their attributes and the stack of enclosing tags."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str], tuple[str, ...]]] = []
        self.stack: list[str] = []
        self.text: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, {k: v or "" for k, v in attrs}, tuple(self.stack)))
        if tag not in ("meta", "br", "path", "use", "rect", "line", "polyline"):
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, {k: v or "" for k, v in attrs}, tuple(self.stack)))

    def handle_endtag(self, tag):
        if tag in self.stack:
            while self.stack.pop() != tag:
                pass

    def handle_data(self, data):
        self.text.append(data)

    def find(self, tag: str, cls: str | None = None) -> list[dict[str, str]]:
        return [a for t, a, _ in self.elements
                if t == tag and (cls is None or cls in a.get("class", "").split())]


def assert_self_contained(html: str, page: Page) -> None:
    tags = Counter(t for t, _, _ in page.elements)
    assert tags["script"] == tags["link"] == tags["img"] == tags["iframe"] == 0
    for tag, attrs, _ in page.elements:
        for name in ("src", "href", "xlink:href", "srcset", "data"):
            if name in attrs:
                assert attrs[name].startswith(("#", "data:")), (tag, name, attrs[name])
    assert "@import" not in html
    assert re.findall(r"url\((?!#)", html) == []  # only the SVGs' own clip paths


@pytest.fixture(scope="module")
def examples_page() -> tuple[str, Page]:
    html = render_html(build_reports(EXAMPLES))
    return html, Page(html)


def test_examples_include_ours_and_xlas():
    formats = {f.format_name for f in build_reports(EXAMPLES).files}
    assert formats == {"autotune_cache", "xla"} and len(EXAMPLES) >= 6


def test_every_example_entry_has_a_section_with_its_chart(examples_page):
    html, page = examples_page
    assert_self_contained(html, page)
    ours = [p for p in EXAMPLES if "jax" not in p.parts]
    entries = [e for p in ours for e in load_results(p)]
    sections = page.find("section", "entry")
    assert len(sections) == len(entries)
    assert sorted(s["data-winner"] for s in sections) == sorted(
        config_summary(e.result.config) for e in entries)
    # One chart per section, inside its <figure>: inline SVG written from the data (bars.py).
    svgs = [stack for tag, _, stack in page.elements if tag == "svg"]
    assert len(svgs) == len(entries) and all(s[-2:] == ("section", "figure") for s in svgs)
    # Each chart labels its winner once and shows every candidate's time.
    for entry in entries:
        assert config_summary(entry.result.config) in html
    texts = "".join(page.text)
    assert texts.count("winner") >= len(entries)
    # Device and toolchain of each file.
    for name in ("NVIDIA H200 / sm_90 / 132 SMs", "cpu-interpreter / interpreter",
                 "ptxas=12.8.93,triton=3.6.0", "ed0e56ab8b2a0ecb"):
        assert name in texts


def test_xla_entries_are_a_table(examples_page):
    html, page = examples_page
    assert len(page.find("table", "xla-entries")) == 1
    jax = ROOT / "examples/jax/matmul_chain_test.autotune.textproto"
    assert html.count("<tr id=") == len(load_any(jax).rows()) == 6
    assert "records only the winning config of each fusion" in html


def test_rendering_is_deterministic():
    a = render_html(build_reports(EXAMPLES[:2]))
    assert a == render_html(build_reports(EXAMPLES[:2]))


def failing_entry() -> pb.Entry:
    entry = fake_tune(make_key(kernel="matmul"))
    entry.result.candidates.add(
        config=pb.Config(params=[pb.Param(name="BLOCK", int_value=256)], num_warps=8),
        failure="OutOfResources: shared memory, Required: 262144, Hardware limit: 232448")
    return entry


def test_failed_configs_are_listed_with_their_reasons(tmp_path):
    path = tmp_path / "c.textproto"
    save_results(path, [failing_entry()])
    html = render_html(build_reports([path]))
    page = Page(html)
    assert len(page.find("table", "failures")) == 1
    assert "OutOfResources: shared memory, Required: 262144" in "".join(page.text)
    assert "BLOCK=256 warps=8" in html
    assert "failed: OutOfResources" in html  # on the chart too


def retuned(entry: pb.Entry, new_winner: int, scale: float) -> pb.Entry:
    """`entry` re-tuned: every time scaled, and candidate `new_winner` now the fastest."""
    out = pb.Entry()
    out.CopyFrom(entry)
    for i, t in enumerate(out.result.candidates):
        t.time_ms = t.time_ms * scale if i != new_winner else 0.5
    out.result.config.CopyFrom(out.result.candidates[new_winner].config)
    out.result.time_ms = 0.5
    return out


def test_baseline_shows_which_winners_changed_and_by_how_much(tmp_path):
    old_a, old_b = fake_tune(make_key(kernel="a")), fake_tune(make_key(kernel="b"))
    gone = fake_tune(make_key(kernel="gone"))
    old, new = tmp_path / "old.textproto", tmp_path / "new.textproto"
    save_results(old, [old_a, old_b, gone])
    # a: the winner changes (BLOCK=64 warps=4 at 1.0 ms -> BLOCK=32 warps=4 at 0.5 ms; the old
    # winner now takes 1.1 ms); b: same winner, re-timed; c: new.
    new_b = pb.Entry()
    new_b.CopyFrom(old_b)
    new_b.result.time_ms = 1.2
    save_results(new, [retuned(old_a, 0, 1.1), new_b, fake_tune(make_key(kernel="c"))])
    report = build_reports([new], [old])
    html = render_html(report)
    page = Page(html)
    assert "1 winners changed, 1 re-timed, 1 new, 1 removed, 0 unchanged." in html
    rows = page.find("tr", "changed")
    assert len(rows) == 1
    text = "".join(page.text)
    assert "BLOCK=64 warps=4 stages=3" in text and "BLOCK=32 warps=4 stages=3" in text
    assert "-50.0%" in text  # 1.0 ms -> 0.5 ms
    # The old winner, timed in the new tuning.
    assert "1.1 ms (+120.0% vs new, measured in the same run)" in text
    assert "baseline winner" in html  # hatched and labelled on the chart
    change = report.changes("winner changed")[0].change
    assert (change.old_time_ms, change.new_time_ms, change.old_winner_now_ms) == (1.0, 0.5,
                                                                                   1.1)
    assert [r.kernel for r in report.removed] == ["gone"]


def test_cli_writes_the_page_and_one_png_per_kernel(tmp_path, capsys):
    ours = [p for p in EXAMPLES if "triton" in p.parts]
    out, png = tmp_path / "r.html", tmp_path / "png"
    assert cli.main(["report", *map(str, ours), "-o", str(out), "--png", str(png),
                     "--baseline", str(ours[0])]) == 0
    kernels = {e.key.kernel for p in ours for e in load_results(p)}
    written = sorted(png.iterdir())
    assert [p.stem for p in written] == sorted(kernels)
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written)
    assert Page(out.read_text()).find("section", "entry")
    assert f"wrote {len(kernels)} charts to {png}" in capsys.readouterr().out


def test_cli_needs_an_output(tmp_path, capsys):
    assert cli.main(["report", str(EXAMPLES[0])]) == 2
    assert "report: give -o REPORT.html, --png DIR, or both" in capsys.readouterr().err


def test_cli_names_a_bad_input(tmp_path, capsys):
    bad = tmp_path / "bad.textproto"
    bad.write_text("entries { nonsense: 1 }")
    assert cli.main(["report", str(bad), "-o", str(tmp_path / "r.html")]) == 2
    assert str(bad) in capsys.readouterr().err


def test_two_thousand_entries_make_an_indexed_page_of_a_few_megabytes(tmp_path):
    """Issue 39: `report` on 2,000 entries wrote 25 MB with no index (one matplotlib figure per
    entry, 270 s). Now: an index grouped by kernel, each kernel's entries in a <details> that
    starts closed on a page this long, and at most 5 MB. (Its time is a benchmark's business:
    `python -m autotune_cache report` on this file takes a few seconds.)"""
    path = tmp_path / "big.textproto"
    save_results(path, [fake_tune(make_key(kernel=f"kernel_{i % 40}", problem={"M": i}))
                        for i in range(2000)])
    lines: list[str] = []
    html = render_html(build_reports([path], []), progress=lines.append)
    assert len(html.encode()) <= 5 * 1024 * 1024, len(html.encode())
    page = Page(html)
    assert len(page.find("section", "entry")) == 2000
    kernels = page.find("details", "kernel")
    assert len(kernels) == 40 and not any("open" in k for k in kernels)
    index = html[html.index('<nav class=index>'):html.index("</nav>")]
    assert index.count("<tr>") == 41 and 'href="#kernel-kernel_7"' in index
    svgs = [stack for tag, _, stack in page.elements if tag == "svg"]
    assert len(svgs) == 2000 and html.count('id="hatch"') == 1


def test_a_reused_timing_is_never_called_a_measurement_of_the_same_run(tmp_path):
    """Issue 39: after an incremental re-tune (a candidate added; the old ones' timings
    reused), the "old winner now" column claimed "measured in the same run" for the baseline's
    own timing, and showed a bogus change."""
    old = fake_tune(make_key())
    new = pb.Entry()
    new.CopyFrom(old)
    added = new.result.candidates.add()
    added.config.CopyFrom(old.result.config)
    added.config.num_warps = 16
    added.time_ms = old.result.time_ms / 2
    new.result.config.CopyFrom(added.config)
    new.result.time_ms = added.time_ms
    a, b = tmp_path / "old.textproto", tmp_path / "new.textproto"
    save_results(a, [old])
    save_results(b, [new])
    html = render_html(build_reports([b], [a]))
    assert "the baseline's timing, reused by the incremental re-tune, not re-measured" in html
    assert "measured in the same run" not in html


def _with_candidate(entry: pb.Entry, block: int, configs: str) -> pb.Entry:
    """`entry` under a new candidate list (`configs`) that adds BLOCK=`block` (timed slower)."""
    out = pb.Entry()
    out.CopyFrom(entry)
    out.key.configs_fingerprint = configs
    timing = out.result.candidates.add(time_ms=9.0)
    timing.config.CopyFrom(pb.Config(params=[pb.Param(name="BLOCK", int_value=block)],
                                     num_warps=4, num_stages=3))
    return out


def test_the_baseline_page_and_diff_say_the_same_line_and_name_newly_timed_candidates(
        tmp_path, capsys):
    """Two entries gained a newly timed candidate (a new key, the same winner): `diff` and the
    page give one line, from one function, and the page names what moved each entry."""
    a, b, c = (fake_tune(make_key(kernel=k)) for k in "abc")
    old, new = tmp_path / "old.textproto", tmp_path / "new.textproto"
    save_results(old, [a, b, c])
    save_results(new, [_with_candidate(a, 256, "cfg2"), _with_candidate(b, 256, "cfg2"), c,
                       fake_tune(make_key(kernel="d"))])
    cli.main(["diff", str(old), str(new)])
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line == ("0 winners changed, 0 re-timed, 1 new, 0 removed, 3 unchanged; 2 under a "
                    "new key (candidate list, kernel source or toolchain)")
    report = build_reports([new], [old])
    assert report.summary == line
    html = render_html(report)
    page = Page(html)
    assert f"<p class=summary>{line}.</p>" in html
    assert len(page.find("table", "rekeyed")) == 1
    text = "".join(page.text)
    # Two rows of the table, and each entry's own part of the page.
    assert text.count("1 newly timed candidate(s): BLOCK=256 warps=4 stages=3") == 4
    moved = {s.row.kernel for s in report.sections if s.change and s.change.rekeyed}
    assert moved == {"a", "b"}
    cli.main(["report", str(new), "--baseline", str(old), "-o", str(tmp_path / "r.html"),
              "--json"])
    assert json.loads(capsys.readouterr().out)["comparison"] == line
