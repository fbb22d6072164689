"""Layer 2, what the cache is built from below its tiers: the cache directory files
(`dirstore`), the dump file (`dumpfile`), the fast loader of results files (`results_index`), the
counters and exit summary (`stats`) and the backend-neutral tuning protocol (`tuning`).

This package re-exports nothing: import the module.
"""
