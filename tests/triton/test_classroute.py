"""Tuners a library builds from Triton's Autotuner class itself (triton/classroute.py).

The library is shaped like flash-linear-attention's `fla_cache_autotune`
(tests/triton/thirdparty_pkg/own_tuner.py): a `CachedAutotuner(Autotuner)` constructed
directly, whose `run()` consults the library's own config files and calls `super().run()`.
Kernels run on the CPU interpreter with a fake benchmark."""

from __future__ import annotations

import importlib
import json
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from autotune_cache.errors import UnroutedTuningError
from autotune_cache.formats import load_results
from autotune_cache.triton import classroute, installed, routing, uninstall

PKG = "tests.triton.thirdparty_pkg"
OWN = f"{PKG}.own_tuner.own_kernel"
PRUNED = f"{PKG}.own_tuner.pruned_kernel"
TABLE = {16: 4.0, 32: 2.0, 64: 1.5, 128: 3.0}


@pytest.fixture(autouse=True)
def switched_off(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    uninstall()
    monkeypatch.setattr(routing, "_warned", set())
    sys.modules.pop(f"{PKG}.own_tuner", None)
    monkeypatch.delenv("TP_CONFIG_DIR", raising=False)
    yield
    uninstall()
    sys.modules.pop(f"{PKG}.own_tuner", None)


def library() -> types.ModuleType:
    """The library imported now: its tuners are constructed now."""
    sys.modules.pop(f"{PKG}.own_tuner", None)
    return importlib.import_module(f"{PKG}.own_tuner")


def x() -> torch.Tensor:
    return torch.arange(100, dtype=torch.float32)


def wall_clock(fn: Any, quantiles: Any = None, **_: Any) -> Any:
    start = time.perf_counter()
    fn()
    ms = (time.perf_counter() - start) * 1e3
    return [ms, ms, ms] if quantiles else ms


def census_row(tuner: Any) -> classroute.Tuner:
    """The tuner's census row, which the census of the whole process holds."""
    row = classroute.describe(tuner)
    assert row in classroute.census()
    return row


def dump_own_kernel(use_cache, fake, path: Path) -> None:
    cache = use_cache(dump_to=path)
    bench = fake(TABLE)
    with installed():
        lib = library()
    assert type(lib.own_kernel).__name__ == "CachedAutotuner"  # the library's object, kept
    assert torch.equal(lib.own(x()), x() * 3)
    assert len(bench.calls) == len(TABLE)
    assert cache.stats.kernels_served == {OWN}
    assert lib.own_kernel.best_config.kwargs == {"BLOCK_SIZE": 64}
    assert census_row(lib.own_kernel) == classroute.Tuner(f"{PKG}.own_tuner.CachedAutotuner",
                                                          OWN, "routed", True)
    cache.close()
    assert [e.key.kernel for e in load_results(path)] == [OWN]


def test_a_library_built_subclass_is_routed_dumped_and_strictly_reloaded(
        use_cache, fake, tmp_path: Path) -> None:
    dump = tmp_path / "lib.autotune.textproto"
    dump_own_kernel(use_cache, fake, dump)
    cache = use_cache(load_from=(dump,), require_complete=True)
    bench = fake({})  # any benchmark would raise KeyError
    with installed():
        lib = library()
    assert torch.equal(lib.own(x()), x() * 3)
    assert bench.calls == []
    assert (cache.stats.hits, cache.stats.benchmarks) == (1, 0)
    assert cache.stats.kernels_ran_on_triton == set()


def test_a_config_the_library_supplies_itself_is_its_choice_counted_not_tuned(
        use_cache, fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "own_kernel.json").write_text(json.dumps({"kwargs": {"BLOCK_SIZE": 32}}))
    monkeypatch.setenv("TP_CONFIG_DIR", str(tmp_path))
    cache = use_cache(require_complete=True)  # not a tuning: strict mode lets it through
    bench = fake(TABLE)
    with installed():
        lib = library()
    assert torch.equal(lib.own(x()), x() * 3)
    assert torch.equal(lib.own(x()), x() * 3)
    assert bench.calls == []
    assert lib.own_kernel.best_config.kwargs == {"BLOCK_SIZE": 32}
    assert cache.stats.library_configs == 1  # one launch key, launched twice
    assert "1 launch key(s) ran the config their library supplied itself" in \
        cache.stats.summary_line()


def test_without_the_switch_a_strict_run_fails_naming_the_kernel_and_the_switch(
        use_cache, fake, tmp_path: Path) -> None:
    dump = tmp_path / "lib.autotune.textproto"
    dump_own_kernel(use_cache, fake, dump)
    cache = use_cache(load_from=(dump,), require_complete=True)
    lib = library()  # no switch: Triton's autotuner
    with pytest.raises(UnroutedTuningError) as raised:
        lib.own(x())
    message = str(raised.value)
    assert OWN in message and f"module {PKG}.own_tuner" in message
    assert "--require_complete_autotune_results forbids tuning here" in message
    assert "the switch that routes third-party kernels through the cache is off" in message
    assert "--autotune_all_kernels" in message and "install() before importing" in message
    assert "The loaded results hold 1 entries of it, unused." in message
    cache.note_bypassed()
    assert cache.stats.loaded_on_triton == {OWN: 1}
    line = cache.stats.summary_line()
    assert f"BYPASSED: 1 autotuned kernel(s) ran on Triton's own autotuner, uncached (1 tuned " \
           f"there): {OWN}" in line
    assert f"1 loaded entries went unused because their kernel stayed on Triton's autotuner: " \
           f"{OWN} (1)" in line


def test_a_tuner_built_before_install_is_named_as_such_under_strict(use_cache) -> None:
    use_cache(require_complete=True)
    lib = library()
    with installed(), pytest.raises(UnroutedTuningError,
                                    match="built before autotune_cache.triton"):
        lib.own(x())


def test_a_subclass_overriding_the_tuning_path_is_seeded_and_a_miss_is_named(use_cache) -> None:
    """It keeps Triton's run() and memo, so the cache seeds the memo (triton/seeding.py): with
    nothing loaded, a strict launch is the usual miss, naming the library's own memo key."""
    from autotune_cache.errors import MissingResultError

    use_cache(require_complete=True)
    with installed():
        lib = library()
    with pytest.raises(MissingResultError) as raised:
        lib.pruned(x())
    assert not isinstance(raised.value, UnroutedTuningError)
    assert f"{PRUNED} [memo=(100,torch.float32,torch.float32)]" in str(raised.value)
    row = census_row(lib.pruned_kernel)
    assert (row.kind, row.owner, row.ran) == (f"{PKG}.own_tuner.PrunedTuner", "seeded", True)
    assert "overrides prune_configs" in row.why


def test_triton_tuning_outside_strict_mode_is_said_in_the_summary(use_cache) -> None:
    cache = use_cache()
    classroute.patch()  # as the switch or strict mode would (a tuner built outside them)
    lib = library()
    tuner = lib.lib_autotune(lib.CONFIGS, ["n"], do_bench=wall_clock)(lib.own_kernel.fn)
    out = torch.empty(100)
    tuner[lambda meta: (4,)](x(), out, 100)
    assert cache.stats.kernels_tuned_on_triton == {OWN}
    assert "BYPASSED: 1 autotuned kernel(s) ran on Triton's own autotuner" in \
        cache.stats.summary_line()


def test_a_changed_candidate_list_is_named_as_such_with_the_added_config(
        use_cache, fake, tmp_path: Path) -> None:
    """Issue 39: the strict failure said "(the cache is stale)" while the summary said
    "0 stale", named no added config, and told to dump to PATH though the path was known."""
    from autotune_cache.errors import MissingResultError
    from tests.triton import kernels

    dump = tmp_path / "k.autotune.textproto"
    cache = use_cache(dump_to=dump)
    fake(kernels.TABLE)
    kernels.launch_add(kernels.tuned_add((16, 32, 64)), n=64)
    cache.close()
    cache = use_cache(load_from=(dump,), require_complete=True)
    with pytest.raises(MissingResultError) as raised:
        kernels.launch_add(kernels.tuned_add((16, 32, 64, 128)), n=64)
    message = str(raised.value)
    assert "(the kernel's candidate list changed)" in message
    assert "(the cache is stale)" not in message and "The cache is stale" not in message
    assert "New candidate(s) since it was tuned: BLOCK_SIZE=128" in message
    assert f"--dump_autotune_results_to={dump}" in message
    assert cache.stats.stale == 0 and cache.stats.candidates_changed == 1


@pytest.mark.parametrize("name, added", [("benching_kernel", 5), ("policy_kernel", 7)])
def test_a_subclass_timing_configs_its_own_way_is_seeded(use_cache, name, added,
                                                          tmp_path: Path) -> None:
    """A subclass overriding `_bench`, or whose own `run()` times configs through
    `self.do_bench`, keeps Triton's memo: its pick is recorded in the dump, and a strict load
    gives it back through the memo with nothing timed (triton/seeding.py)."""
    kernel = f"{PKG}.own_tuner.{name}"
    path = tmp_path / "own.autotune.textproto"
    cache = use_cache(dump_to=path)
    with installed():
        lib = library()
    tuner = getattr(lib, name)
    tuner._do_bench = wall_clock  # the interpreter has no GPU benchmarker
    assert torch.equal(lib.launch(tuner, x()), x() + added)
    assert kernel not in cache.stats.kernels_tuned_on_triton
    assert census_row(tuner).owner == "seeded"
    picked = tuner.best_config.kwargs if name == "benching_kernel" else None
    cache.close()
    assert [e.key.kernel for e in load_results(path)] == [kernel]

    cache = use_cache(load_from=(path,), require_complete=True)
    with installed():
        lib = library()
    tuner = getattr(lib, name)
    tuner._do_bench = None  # timing anything now fails the test
    assert torch.equal(lib.launch(tuner, x()), x() + added)
    assert cache.stats.hits == 1 and cache.stats.misses == 0
    if picked is not None:
        assert tuner.best_config.kwargs == picked
