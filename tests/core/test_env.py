"""autotune_cache.foundation.env: the one reader of the environment, the one true/false
parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune_cache import Cache, DumpShardingError, Settings
from autotune_cache.config.flags import settings_from_env
from autotune_cache.foundation import env


@pytest.mark.parametrize(("text", "value"), [
    ("1", True), ("true", True), ("YES", True), (" on ", True),
    ("0", False), ("False", False), ("no", False), ("off", False),
    ("", None), ("maybe", None), (None, None),
])
def test_one_true_false_parser(text: str | None, value: bool | None) -> None:
    assert env.parse_bool(text) is value


def test_reads_are_live_so_monkeypatch_works(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_PROGRESS", "off")
    assert env.progress_mode() == "never"
    monkeypatch.setenv("AUTOTUNE_PROGRESS", "1")
    assert env.progress_mode() == "always"
    monkeypatch.delenv("AUTOTUNE_PROGRESS")
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", "1")
    assert env.progress_mode() == "always"


def test_use_swaps_in_a_whole_environment(tmp_path: Path) -> None:
    fake = {"AUTOTUNE_BENCH_LOCK_DIR": str(tmp_path), "TEST_TOTAL_SHARDS": "4",
            "TEST_UNDECLARED_OUTPUTS_DIR": str(tmp_path / "out"),
            "AUTOTUNE_FLAGS": "--autotune_cache_mode=read", "AUTOTUNE_REGEN_HINT": " bazel run x "}
    with env.use(fake):
        assert env.bench_lock_dir() == tmp_path
        assert env.total_shards() == 4
        assert env.undeclared_outputs_dir() == tmp_path / "out"
        assert settings_from_env().cache_mode == "read"
        with pytest.raises(DumpShardingError, match="runs in 4 shards"):
            Cache(Settings(dump_to=tmp_path / "dump.textproto"))
    with env.use({}):
        assert env.bench_lock_dir() is None
        assert env.total_shards() == 1
        assert env.undeclared_outputs_dir() is None
        assert env.progress_mode() == "auto"
