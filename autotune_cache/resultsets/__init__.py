"""Result sets: every format's entries in the terms the CLI and tools show and compare.

- base.py: Row, the ResultSet and Format protocols, diff, merge with a conflict policy, prune.
- ours.py: autotune_cache's own results files and cache directories.
- registry.py: every format (ours, then XLA's), by path (`load_any`) or by bytes (`loads`).

The order is one-way: base <- ours, base <- xla's formats <- registry; nothing imports the
registry but the CLI and tools.
"""
