"""autotune_cache.tiers: the protocol every tier implements, and the order the cache uses."""

from __future__ import annotations

from autotune_cache import Cache, Settings
from autotune_cache.formats import save_results
from autotune_cache.tiers import DirectoryTier, ProcessTier, build_tiers
from autotune_cache.tiers.base import Found
from tests.cachetools import fake_tune, make_key

KEY = make_key()


def test_build_tiers_order_and_writability(tmp_path):
    tiers = build_tiers(Settings(cache_dir=tmp_path / "d", cache_mode="read"))
    assert [t.name for t in tiers] == ["memory", "directory"]
    assert [(t.shared, t.writable) for t in tiers] == [(False, True), (True, False)]


def test_tiers_pass_the_key_whole(tmp_path):
    entry = fake_tune(KEY)
    directory = DirectoryTier(tmp_path)
    directory.put(KEY, entry)
    found = directory.get(KEY)
    assert found is not None and found.key == KEY and found.origin.endswith(".textproto")
    assert [f.key for f in directory.same_problem(KEY)] == [KEY]
    with directory.lock(KEY, timeout=5) as held:
        assert held


def test_memory_tier_origins(tmp_path):
    path = tmp_path / "r.textproto"
    save_results(path, [fake_tune(KEY)])
    memory = ProcessTier.from_files([path])
    assert memory.get(KEY).origin == str(path)
    memory.put(KEY, fake_tune(KEY))
    assert memory.get(KEY).origin == "this process" and memory.in_memory(KEY)
    with memory.lock(KEY, timeout=1) as held:
        assert not held


class ListTier:
    """A tier in a dozen lines: what adding one takes."""

    name, shared, writable = "list", True, True

    def __init__(self) -> None:
        self.entries: list[Found] = []

    def searched(self) -> list[str]:
        return ["a list"]

    def get(self, key):
        return next((f for f in self.entries if f.key == key), None)

    def put(self, key, entry) -> None:
        self.entries.append(Found(entry, key, "a list"))

    def same_problem(self, key):
        return list(self.entries)

    def lock(self, key, timeout):
        import contextlib

        return contextlib.nullcontext(True)


def test_cache_loops_over_any_tier():
    cache = Cache(Settings())
    extra = ListTier()
    cache.tiers.append(extra)
    cache.record(fake_tune(KEY), key=KEY)
    assert [f.key for f in extra.entries] == [KEY]
    with cache.tune_lock(KEY) as held:
        assert held
    fresh = Cache(Settings())
    fresh.tiers.append(extra)
    assert fresh.lookup(KEY) is not None


def test_loaded_entries_of_a_kernel_within_the_bounds(tmp_path):
    first, second = tmp_path / "a.textproto", tmp_path / "b.textproto"
    keys = [make_key(problem={"M": m}) for m in (1, 2, 3)]
    save_results(first, [fake_tune(keys[0]), fake_tune(make_key(kernel="other"))])
    save_results(second, [fake_tune(k) for k in keys[1:]])
    cache = Cache(Settings(load_from=(first, second)))
    # Over a bound nothing is read: the entries stay unparsed.
    assert cache.loaded_entries("matmul", max_entries=3, max_unparsed_bytes=10) == []
    assert cache.loaded_entries("matmul", max_entries=2, max_unparsed_bytes=1 << 20) == []
    loaded = cache.loaded_entries("matmul", max_entries=3, max_unparsed_bytes=1 << 20)
    assert [k for k, _ in loaded] == keys  # earlier files first, only this kernel
    assert cache.loaded_entries("matmul", max_entries=3, max_unparsed_bytes=0) == loaded
