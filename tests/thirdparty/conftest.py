"""tp_src holds the third-party package's sources and its own tests: they run inside the venv
the tests build, never in this session."""

collect_ignore = ["tp_src"]
