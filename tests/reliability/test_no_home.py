"""Issue 22, item 1: nothing on the load path needs a home directory.

Containers run as an arbitrary uid, `env -i` and remote-execution workers give a process no
HOME, and a uid with no passwd entry has no home to fall back on (Python's `Path.home()` then
raises RuntimeError). Loading results files, using a cache directory, dumping and the CLI must
all work there. Needs root, to become a uid that has no passwd entry.
"""

from __future__ import annotations

import os
import pwd

import pytest

from autotune_cache.formats import save_results
from tests.cachetools import fake_tune, make_key
from tests.reliability.conftest import ROOT, run_python

NO_SUCH_UID = 54321

DROP_AND_LOAD = """
import os, pwd, sys
os.environ.pop("HOME", None)  # before anything reads the environment, as under `env -i`
os.environ.pop("XDG_CACHE_HOME", None)
from pathlib import Path
import autotune_cache, autotune_cache.cli, autotune_cache.tiers
from autotune_cache import Cache, Settings, get_cache
from autotune_cache.cli import main
from tests.cachetools import fake_tune, make_key
os.setgroups([])
os.setresgid({uid}, {uid}, {uid})
os.setresuid({uid}, {uid}, {uid})
try:
    Path.home()
except RuntimeError as e:
    print("no home:", e)
root = Path({root!r})
for name in ("ours.textproto", "ours.pb", "hand.textproto"):
    cache = Cache(Settings(load_from=root / name))
    assert cache.lookup(make_key()) is not None, name
os.environ["AUTOTUNE_FLAGS"] = (f"--load_autotune_results_from={{root / 'ours.pb'}} "
                                f"--autotune_cache_dir={{root / 'rw' / 'dir'}} "
                                f"--dump_autotune_results_to={{root / 'rw' / 'dump.textproto'}}")
cache = get_cache()
assert cache.lookup(make_key()) is not None
with cache.tune_lock(make_key(problem={{"M": 9}})) as held:
    cache.record(fake_tune(make_key(problem={{"M": 9}})))
assert main(["inspect", str(root / "ours.textproto")]) == 0
assert main(["verify", str(root / "ours.pb"), str(root / "rw" / "dir")]) == 0
print("loaded without a home")
"""


def test_loading_dumping_and_the_cli_need_no_home_directory(world_dir):
    if os.geteuid() != 0:
        pytest.skip("needs root, to run as a uid that has no passwd entry")
    try:
        pwd.getpwuid(NO_SUCH_UID)
        pytest.skip(f"uid {NO_SUCH_UID} has a passwd entry here")
    except KeyError:
        pass
    # A committed cache of some size (the binary copy this once needed a home for started at
    # 16 KiB).
    entries = [fake_tune(make_key()), *(fake_tune(make_key(problem={"M": i})) for i in range(60))]
    save_results(world_dir / "ours.textproto", entries)
    save_results(world_dir / "ours.pb", entries)
    (world_dir / "hand.textproto").write_bytes(b"# by hand\n"
                                               + (world_dir / "ours.textproto").read_bytes())
    (world_dir / "rw").mkdir(mode=0o777)
    (world_dir / "rw").chmod(0o777)
    for p in world_dir.iterdir():
        if p.is_file():
            p.chmod(0o644)
    res = run_python(DROP_AND_LOAD.format(uid=NO_SUCH_UID, root=str(world_dir)), cwd=ROOT)
    res.assert_no_traceback()
    assert "no home:" in res.out, "the scenario must really have no home directory"
    assert "loaded without a home" in res.out, res.text
    assert res.rc == 0, res.text
    assert (world_dir / "rw" / "dump.textproto").exists()
    assert (world_dir / "ours.textproto").stat().st_size > 64 * 1024
