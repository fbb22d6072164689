"""Library tuners that tune by their own rules, seeded through their memo (triton/seeding.py).

The library is bucketlib (tests/thirdparty/tp_src/bucketlib), shaped like an operator library's
own tuner: a subclass of Triton's Autotuner whose `run()` never calls Triton's, a key of its own
(sizes rounded up to a power of two, or to a multiple of 32), its own policy over `self._bench`,
and its picks in a sqlite database behind `self.cache`. Triton's `_bench` is replaced by a table
of times (by BLOCK_SIZE), so every pick here is known; kernels run on the CPU interpreter.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from autotune_cache.errors import MissingResultError, UnroutedTuningError
from autotune_cache.formats import load_results
from autotune_cache.triton import classroute, installed, uninstall

SRC = Path(__file__).resolve().parents[1] / "thirdparty" / "tp_src"
SCALE = "bucketlib.ops.scale_kernel"
TABLE = {16: 4.0, 32: 2.0, 64: 1.5, 128: 3.0, 256: 1.0}


@pytest.fixture(autouse=True)
def library_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[int]]:
    """bucketlib importable, its database in tmp_path, and Triton's `_bench` a table of times
    (the BLOCK_SIZEs it was asked to time, in order, are yielded)."""
    uninstall()
    monkeypatch.syspath_prepend(str(SRC))
    monkeypatch.setenv("BUCKETLIB_DB", str(tmp_path / "bucketlib.db"))
    monkeypatch.delenv("BUCKETLIB_EXTRA_CONFIG", raising=False)
    classroute.patch()
    timed: list[int] = []

    def table_bench(self: Any, *args: Any, config: Any, **meta: Any) -> list[float]:
        timed.append(config.kwargs["BLOCK_SIZE"])
        ms = TABLE[config.kwargs["BLOCK_SIZE"]]
        return [ms, ms, ms]

    monkeypatch.setitem(classroute._originals, "_bench", table_bench)
    yield timed
    uninstall()
    for name in [m for m in sys.modules if m == "bucketlib" or m.startswith("bucketlib.")]:
        del sys.modules[name]


def bucketlib(switch: bool = True) -> types.ModuleType:
    """bucketlib imported now (its tuners built now), under the switch unless told not to."""
    for name in [m for m in sys.modules if m == "bucketlib" or m.startswith("bucketlib.")]:
        del sys.modules[name]
    if not switch:
        return importlib.import_module("bucketlib")
    with installed():
        return importlib.import_module("bucketlib")


def scale(lib: types.ModuleType, n: int) -> None:
    x = torch.arange(n, dtype=torch.float32)
    assert torch.equal(lib.scale(x), x * 3)


def dump(use_cache, path: Path, sizes: tuple[int, ...] = (100, 120, 300)) -> None:
    cache = use_cache(dump_to=path)
    lib = bucketlib()
    for n in sizes:
        scale(lib, n)
    cache.close()


def fresh_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BUCKETLIB_DB", str(tmp_path / "fresh.db"))


def test_a_bucketing_library_is_dumped_under_its_own_keys_then_loaded_with_no_benchmark(
        use_cache, library_env: list[int], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "lib.autotune.textproto"
    dump(use_cache, path)
    # 100 and 120 share the library's bucket (128): one tuning, one entry, as the library keys.
    assert library_env == [16, 32, 64, 128] * 2
    entries = load_results(path)
    assert sorted(e.key.problem for e in entries) == [
        "memo=(128,torch.float32,torch.float32)", "memo=(512,torch.float32,torch.float32)"]
    for entry in entries:
        assert entry.key.kernel == SCALE
        assert entry.result.timing_method == "library bucketlib.tuner.BucketTuner"
        assert {t.config.params[0].int_value: t.time_ms for t in entry.result.candidates} == {
            b: TABLE[b] for b in (16, 32, 64, 128)}
        assert entry.result.config.params[0].int_value == 64  # the library's pick

    fresh_database(tmp_path, monkeypatch)
    library_env.clear()
    cache = use_cache(load_from=(path,), require_complete=True)
    lib = bucketlib()
    for n in (100, 120, 300, 500):
        scale(lib, n)
    assert library_env == []  # nobody benchmarked: not us, not the library
    assert lib.ops.scale_kernel.best_config.kwargs == {"BLOCK_SIZE": 64}
    assert cache.stats.hits == 2 and cache.stats.misses == 0
    assert cache.stats.kernels_seeded == {SCALE}
    assert "1 kernel(s) seeded" in cache.stats.summary_line()
    row = classroute.describe(lib.ops.scale_kernel)
    assert (row.owner, row.ran) == ("seeded", True)
    assert "replaces run()" not in row.why and "overrides run" in row.why


def test_a_pick_is_never_given_to_another_bucket(use_cache, library_env: list[int],
                                                 tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "lib.autotune.textproto"
    dump(use_cache, path, sizes=(100,))
    fresh_database(tmp_path, monkeypatch)
    library_env.clear()
    use_cache(load_from=(path,), require_complete=True)
    lib = bucketlib()
    scale(lib, 128)  # the same bucket as 100: served
    with pytest.raises(MissingResultError) as raised:
        scale(lib, 129)  # the next bucket (256): a miss, never the pick made for 128
    assert "memo=(256,torch.float32,torch.float32)" in str(raised.value)
    assert library_env == []


def test_a_changed_candidate_list_is_a_miss_with_the_usual_explanation(
        use_cache, library_env: list[int], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "lib.autotune.textproto"
    dump(use_cache, path, sizes=(100,))
    fresh_database(tmp_path, monkeypatch)
    monkeypatch.setenv("BUCKETLIB_EXTRA_CONFIG", "256")
    library_env.clear()
    cache = use_cache(load_from=(path,), require_complete=True)
    lib = bucketlib()
    with pytest.raises(MissingResultError) as raised:
        scale(lib, 100)
    assert "(the kernel's candidate list changed)" in str(raised.value)
    assert "BLOCK_SIZE=256" in str(raised.value)
    assert library_env == [] and cache.stats.candidates_changed == 1


def test_the_committed_pick_wins_over_the_library_database(
        use_cache, library_env: list[int], tmp_path: Path) -> None:
    path = tmp_path / "lib.autotune.textproto"
    dump(use_cache, path, sizes=(100,))
    lib = bucketlib(switch=False)  # the developer's database holds another pick for 128
    lib.ops.scale_kernel.cache[(128, "torch.float32", "torch.float32")] = \
        lib.ops.scale_kernel.configs[0]
    library_env.clear()
    use_cache(load_from=(path,), require_complete=True)
    lib = bucketlib()
    scale(lib, 100)
    assert lib.ops.scale_kernel.best_config.kwargs == {"BLOCK_SIZE": 64}
    assert library_env == []


def test_a_pick_from_the_library_database_is_recorded_and_says_it_has_no_timings(
        use_cache, library_env: list[int], tmp_path: Path) -> None:
    lib = bucketlib(switch=False)
    lib.ops.scale_kernel.cache[(128, "torch.float32", "torch.float32")] = \
        lib.ops.scale_kernel.configs[1]
    path = tmp_path / "lib.autotune.textproto"
    dump(use_cache, path, sizes=(100,))
    assert library_env == []
    (entry,) = load_results(path)
    assert entry.result.config.params[0].int_value == 32
    assert "timings not exposed" in entry.result.timing_method
    assert not entry.result.candidates

    # Under require-complete the database's pick does not make the run complete.
    use_cache(require_complete=True)
    lib = bucketlib()
    with pytest.raises(MissingResultError, match=r"memo=\(128,"):
        scale(lib, 100)


def test_without_the_switch_nothing_is_seeded(use_cache, library_env: list[int],
                                              tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "lib.autotune.textproto"
    dump(use_cache, path, sizes=(100,))
    fresh_database(tmp_path, monkeypatch)
    use_cache(load_from=(path,), require_complete=True)
    lib = bucketlib(switch=False)
    assert "run" not in vars(lib.ops.scale_kernel)  # the library's object, untouched
    with pytest.raises(UnroutedTuningError, match="switch that routes third-party kernels"):
        scale(lib, 100)


def test_a_tuner_that_never_asks_its_memo_keeps_the_loud_error(use_cache) -> None:
    """Seeding cannot work where the library benchmarks without asking its memo."""
    use_cache(require_complete=True)
    sys.modules.pop("tests.triton.thirdparty_pkg.own_tuner", None)
    with installed():
        lib = importlib.import_module("tests.triton.thirdparty_pkg.own_tuner")
    tuner = lib.memoless_kernel
    with pytest.raises(UnroutedTuningError) as raised:
        lib.launch(tuner, torch.arange(100, dtype=torch.float32))
    message = str(raised.value)
    assert "Nor can the cache seed it: it benchmarked without asking its memo" in message
    assert "docs/third-party-kernels.md" in message


def test_the_launch_of_a_seeded_pick_is_a_warm_up_its_candidates_are_not(
        use_cache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compile under a Triton tuner that is not ours is one of its candidates (not recorded),
    except a seeded tuner's launch of its pick: that compile is recorded as a warm-up, and the
    recorded name resolves through the seeded tuner, so a loaded run compiles it ahead."""
    from autotune_cache.cache import get_cache
    from autotune_cache.triton import warmups

    def in_run(self: Any, spec: str) -> None:  # a compile Triton starts inside the tuner's run
        warmups._record(warmups._current(), self.fn, spec)

    use_cache(dump_to=tmp_path / "lib.autotune.textproto")
    stats = get_cache().stats
    plain = bucketlib(switch=False).ops.scale_kernel
    in_run(plain, "spec-a")  # Triton's tuner, not seeded: its compiles are its candidates
    assert stats.warmups_recorded == 0
    tuner = bucketlib().ops.scale_kernel
    seeding = vars(tuner)["_autotune_cache_seeding"]
    seeding.comparing = True
    in_run(tuner, "spec-b")  # benchmarking its candidates: kept aside, not recorded
    assert stats.warmups_recorded == 0 and seeding.compiled == [(tuner.fn, "spec-b")]
    seeding.comparing = False
    in_run(tuner, "spec-c")  # launching its pick
    assert stats.warmups_recorded == 1
    # A GPU's JIT function (the interpreter's has no `preload`: nothing compiles ahead there).
    jit = types.SimpleNamespace(fn=tuner.fn.fn, preload=lambda spec: None)
    monkeypatch.setattr(tuner, "fn", jit)
    assert warmups._resolve("bucketlib.ops.scale_kernel") is jit
    monkeypatch.setattr(plain, "fn", jit)
    sys.modules["bucketlib.ops"].scale_kernel = plain
    assert warmups._resolve("bucketlib.ops.scale_kernel") is None  # an unseeded tuner's


def test_the_compile_of_a_library_pick_is_found_among_its_candidates() -> None:
    """While a seeded library compares its candidates their compiles are kept; the one whose
    specialization is the pick's (its meta-parameters among the compile's constants, by
    argument position; its launch options) is recorded as a warm-up at the launch's end."""
    import json

    import triton

    from autotune_cache.triton.seeding import compiled_config

    jit = types.SimpleNamespace(arg_names=["x_ptr", "out_ptr", "n", "BLOCK_SIZE"])

    def spec(block: int, warps: int) -> str:
        return json.dumps({"constant_keys": [[3]], "constant_vals": [block],
                           "options": {"num_warps": warps, "num_stages": 3}})

    pick = triton.Config({"BLOCK_SIZE": 64}, num_warps=4)
    assert compiled_config(jit, spec(64, 4), pick)
    assert not compiled_config(jit, spec(64, 8), pick)
    assert not compiled_config(jit, spec(32, 4), pick)
    constexpr = json.dumps({"constant_keys": [[3]], "constant_vals": [{"constexpr": 64}],
                            "options": {"num_warps": 4}})
    assert compiled_config(jit, constexpr, pick)
    assert not compiled_config(jit, "not json", pick)


def test_a_memo_key_the_file_cannot_write_keeps_the_loud_error_and_says_why(
        use_cache, monkeypatch: pytest.MonkeyPatch) -> None:
    use_cache(require_complete=True)
    lib = bucketlib()
    tuner = lib.ops.scale_kernel
    monkeypatch.setattr(tuner, "get_key", lambda nargs: ("a,b", nargs["n"]))
    with pytest.raises(UnroutedTuningError) as raised:
        scale(lib, 100)
    assert "its memo key ('a,b', 100) holds a value a results file cannot write" in \
        str(raised.value)
