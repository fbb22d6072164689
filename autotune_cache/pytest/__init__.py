"""The pytest plugin's parts, one module per role: options (the options and how they combine
with AUTOTUNE_FLAGS), summary (misses per test and the terminal summary), runner (the plugin in a
process that runs tests) and xdist (the plugin in pytest-xdist's controller). The plugin itself,
the `pytest11` entry point with its hooks, is autotune_cache.pytest_plugin."""
