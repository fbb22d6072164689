"""Under require-complete with results files loaded, completeness is judged against those files
alone: an entry only a cache directory holds (outside a Bazel test's inputs, so Bazel's cached
PASS would hide a committed file that no longer matches the kernels) is a miss."""

import pytest

from autotune_cache import Cache, MissingResultError, Settings
from autotune_cache.errors import CorruptFileError
from autotune_cache.formats import save_results
from tests.cachetools import fake_tune, make_key

OLD = make_key(source="before-the-edit")
NEW = make_key(source="after-the-edit")


def test_a_stale_committed_file_fails_even_when_the_cache_directory_is_fresh(tmp_path):
    committed = tmp_path / "t.autotune.textproto"
    save_results(committed, [fake_tune(OLD)])
    directory = tmp_path / "ci_cache_dir"
    # A dump run (or any non-strict run) with the same --autotune_cache_dir tuned the new key.
    Cache(Settings(cache_dir=directory)).record(fake_tune(NEW))
    assert Cache(Settings(cache_dir=directory)).lookup(NEW) is not None
    strict = Cache(Settings(load_from=(committed,), cache_dir=directory, require_complete=True))
    with pytest.raises(MissingResultError) as info:
        strict.lookup(NEW)
    message = str(info.value)
    assert "the cache is stale" in message
    assert "The directory tier holds it, which does not count" in message
    assert "--require_complete_autotune_results" in message
    assert strict.stats.misses == 1 and strict.stats.hits == 0


def test_the_committed_files_entries_still_hit_with_a_cache_directory(tmp_path):
    committed = tmp_path / "t.autotune.textproto"
    save_results(committed, [fake_tune(NEW)])
    strict = Cache(Settings(load_from=(committed,), cache_dir=tmp_path / "d",
                            require_complete=True))
    assert strict.lookup(NEW) is not None


def test_without_a_loaded_file_the_directory_still_counts(tmp_path):
    """A fleet that runs strictly on a shared directory alone (no committed file) keeps
    working: there is no committed file to judge against."""
    directory = tmp_path / "d"
    Cache(Settings(cache_dir=directory)).record(fake_tune(NEW))
    assert Cache(Settings(cache_dir=directory, require_complete=True)).lookup(NEW) is not None


def test_a_broken_committed_file_names_the_regen_command(tmp_path, monkeypatch):
    committed = tmp_path / "t.autotune.textproto"
    committed.write_text("<<<<<<< HEAD\nversion: 1\n=======\n>>>>>>> theirs\n")
    monkeypatch.setenv("AUTOTUNE_REGEN_HINT", "bazel run //team:t.regen")
    with pytest.raises(CorruptFileError) as info:
        Cache(Settings(load_from=(committed,), require_complete=True))
    assert "merge-conflict marker" in str(info.value)
    assert "bazel run //team:t.regen" in str(info.value)
