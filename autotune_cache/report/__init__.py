"""`autotune-cache report`: a self-contained HTML page (and PNG charts) of tuning results.

    autotune-cache report examples/triton/*.autotune.textproto -o report.html
    autotune-cache report new.textproto --baseline old.textproto -o report.html --png charts/

model.py reads the files into sections (one per kernel, problem, device and toolchain) and compares
them with a baseline; charts.py draws every candidate's time with matplotlib; page.py writes the
HTML, charts inline as SVG, so the page fetches nothing when opened. See docs/report.md.
"""

from autotune_cache.report.model import (
    Candidate,
    Change,
    FileReport,
    Report,
    Section,
    build_reports,
)
from autotune_cache.report.page import render_html

__all__ = ["Candidate", "Change", "FileReport", "Report", "Section", "build_reports", "render_html"]
