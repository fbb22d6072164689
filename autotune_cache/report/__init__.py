"""`autotune-cache report`: a self-contained HTML page (and PNG charts) of tuning results.

    autotune-cache report examples/triton/*.autotune.textproto -o report.html
    autotune-cache report new.textproto --baseline old.textproto -o report.html --png charts/

model.py reads the files into sections (one per kernel, problem, device and toolchain) and compares
them with a baseline; charts.py draws every candidate's time with matplotlib; page.py writes the
HTML, charts inline as SVG, so the page fetches nothing when opened. See docs/report.md.

This package imports nothing itself (import from its modules), so that building the CLI's
parser, which adds the `report` verb, loads no HTML or plotting code: every other verb works
where only the library's own modules can be imported.
"""
