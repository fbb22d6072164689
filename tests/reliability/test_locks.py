"""Item 1 and 10a of issue 11: lock files in shared directories cannot be turned against a user.

Anyone who can write a shared cache directory (or the benchmark lock directory under /tmp) can
plant a symlink, a hard link or a directory where a lock file goes. Taking the lock must never
truncate, chmod or follow what was planted, must not crash with a raw OSError, and must not trust
a lock directory that another account owns.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import threading
from importlib import metadata
from pathlib import Path

import pytest

from tests.cachetools import make_key
from tests.reliability.conftest import ROOT, chown, run_python

KEY = make_key()
SECRET = b"victim's data: must survive\n"

TUNE = """
import logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
from autotune_cache import Cache, Settings
from tests.cachetools import fake_tune, make_key
cache = Cache(Settings(cache_dir={dir!r}))
key = make_key()
with cache.tune_lock(key) as held:
    cache.record(fake_tune(key))
print("held" if held else "not held")
"""


def victim_file(path: Path, mode: int = 0o600) -> Path:
    path.write_bytes(SECRET)
    path.chmod(mode)
    return path


def assert_untouched(path: Path, mode: int = 0o600) -> None:
    assert path.read_bytes() == SECRET, f"{path} was truncated or overwritten"
    assert stat.S_IMODE(path.lstat().st_mode) == mode, f"{path} was chmod-ed"


def lock_path(cache_dir: Path) -> Path:
    return cache_dir / ".locks" / f"{KEY.digest()}.lock"


@pytest.mark.parametrize("planted", ["symlink", "hardlink", "directory"])
def test_thing_planted_at_the_lock_path_is_not_followed_and_not_fatal(tmp_path, planted):
    cache_dir = tmp_path / "shared"
    (cache_dir / ".locks").mkdir(parents=True)
    victim = victim_file(tmp_path / "victim.txt")
    where = lock_path(cache_dir)
    if planted == "symlink":
        where.symlink_to(victim)
    elif planted == "hardlink":
        os.link(victim, where)
    else:
        where.mkdir()
    res = run_python(TUNE.format(dir=str(cache_dir)))
    res.assert_no_traceback()
    assert res.rc == 0, res.text
    assert_untouched(victim)
    # The tuner says which lock it could not take, and why; the result is still stored.
    assert str(where) in res.err, res.err
    assert (cache_dir / f"{KEY.problem_group()}-{KEY.digest()}.textproto").is_file()


def test_lock_errors_are_a_named_error_type():
    import autotune_cache
    from autotune_cache.errors import AutotuneCacheError

    assert issubclass(autotune_cache.LockError, AutotuneCacheError)


def test_filelock_floor_is_patched_for_both_cves():
    """filelock < 3.20.1 follows symlinks (CVE-2025-68146), < 3.20.3 also in SoftFileLock
    (CVE-2026-22701). 3.20.3 installs on Python >= 3.10, every Python we support."""
    text = (ROOT / "pyproject.toml").read_text()
    floors = re.findall(r'"filelock>=([0-9.]+)"', text)
    assert floors, "pyproject.toml does not require filelock"
    for floor in floors:
        assert tuple(map(int, floor.split("."))) >= (3, 20, 3), floor
    installed = tuple(int(p) for p in metadata.version("filelock").split(".")[:3])
    assert installed >= (3, 20, 3)


def test_an_unpatched_filelock_is_never_used(tmp_path):
    """Whatever the environment installs, a vulnerable filelock is not called."""
    fake = tmp_path / "site" / "filelock"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "__version__ = '3.16.1'\n"
        "class Timeout(Exception):\n    pass\n"
        "class FileLock:\n"
        "    def __init__(self, *a, **k):\n"
        "        raise SystemExit('vulnerable filelock 3.16.1 was used')\n")
    code = TUNE.format(dir=str(tmp_path / "cache"))
    res = run_python(code, env={"PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{ROOT}"})
    res.assert_no_traceback()
    assert res.rc == 0, res.text
    assert "3.20.3" in res.err, "the warning should name the filelock release to install"


def test_shared_dir_lock_of_another_user_is_not_trusted(users, world_dir):
    """`other` owns the shared cache directory and its .locks, and plants a symlink at the lock
    path pointing to a file of `victim`; the victim's tuner must not touch it."""
    other, victim_user = users
    cache_dir = world_dir / "cache"
    (cache_dir / ".locks").mkdir(parents=True)
    for d in (cache_dir, cache_dir / ".locks"):
        d.chmod(0o777)
        chown(d, other)
    home = world_dir / "victim-home"
    home.mkdir()
    chown(home, victim_user)
    victim = victim_file(home / "notes.txt")
    chown(victim, victim_user)
    lock_path(cache_dir).symlink_to(victim)
    os.lchown(lock_path(cache_dir), *_ids(other))
    res = run_python(TUNE.format(dir=str(cache_dir)), user=victim_user)
    res.assert_no_traceback()
    assert res.rc == 0, res.text
    assert_untouched(victim)
    assert (cache_dir / f"{KEY.problem_group()}-{KEY.digest()}.textproto").is_file()


def test_locks_dir_made_with_another_users_umask_is_a_named_warning(users, world_dir):
    """`other` created .locks with umask 077; a second user of the shared directory still tunes,
    stores its result, and is told why it tuned without the lock (item 10)."""
    other, second = users
    cache_dir = world_dir / "cache"
    cache_dir.mkdir()
    cache_dir.chmod(0o777)
    chown(cache_dir, other)
    res = run_python("""
        import os
        os.umask(0o077)
        os.mkdir({locks!r})
    """.format(locks=str(cache_dir / ".locks")), user=other)
    assert res.rc == 0, res.text
    res = run_python(TUNE.format(dir=str(cache_dir)), user=second)
    res.assert_no_traceback()
    assert res.rc == 0, res.text
    assert (cache_dir / f"{KEY.problem_group()}-{KEY.digest()}.textproto").is_file()


BENCH_LOCK = """
import sys
import threading
from autotune_cache.triton.benchlock import device_bench_lock, default_lock_dir
with device_bench_lock("GPU-test") as held:
    import os, glob
    mine = [p for p in glob.glob(os.path.join(os.path.dirname(default_lock_dir()), "*", "*.lock"))
            if os.stat(os.path.dirname(p)).st_uid == os.getuid()
            and os.stat(p).st_uid == os.getuid()]
    print("held" if held else "not held", len(mine))
"""


def test_bench_lock_dir_created_by_another_user_is_not_trusted(users, world_dir):
    """`other` created the default benchmark lock directory under the temp dir first and planted a
    symlink to the victim's file at the lock path. The victim's benchmark must neither empty nor
    chmod that file, and must lock in a directory it owns instead."""
    other, victim_user = users
    tmp = world_dir / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    bench_dir = tmp / "autotune_cache_bench_locks"
    bench_dir.mkdir()
    bench_dir.chmod(0o1777)
    chown(bench_dir, other)
    home = world_dir / "victim-home"
    home.mkdir()
    chown(home, victim_user)
    victim = victim_file(home / "notes.txt")
    chown(victim, victim_user)
    planted = bench_dir / "bench-GPU-test.lock"
    planted.symlink_to(victim)
    os.lchown(planted, *_ids(other))
    res = run_python(BENCH_LOCK, user=victim_user,
                     env={"TMPDIR": str(tmp), "AUTOTUNE_BENCH_LOCK_DIR": ""})
    res.assert_no_traceback()
    assert res.rc == 0, res.text
    assert_untouched(victim)
    assert res.out.split() == ["held", "1"], res.text


def _ids(user: str) -> tuple[int, int]:
    import pwd

    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid


if sys.platform != "linux":  # pragma: no cover
    pytest.skip("POSIX lock semantics are checked on Linux", allow_module_level=True)


LAZY = """
import sys
import threading
from pathlib import Path
from autotune_cache import Cache, Settings, configure
from autotune_cache.formats import save_results
from tests.cachetools import fake_tune, make_key
committed = Path({dir!r}) / "committed.autotune.textproto"
save_results(committed, [fake_tune(make_key())])
loading = Cache(Settings(load_from=(committed,), require_complete=True))
assert loading.lookup(make_key()) is not None
print("load only:", "filelock" in sys.modules)
dumping = configure(Settings(load_from=(committed,), dump_to=Path({dir!r}) / "dump.textproto"))
print("with a dump:", "filelock" in sys.modules)
assert dumping.lookup(make_key()) is not None
"""


def test_filelock_is_imported_only_by_what_can_lock(tmp_path):
    """A process that only loads a committed file takes no lock, so it does not import filelock
    (bench/process_cost.py); a cache that can lock at exit (a dump) imports it when it is built,
    never at interpreter shutdown, and its dump is written at exit."""
    res = run_python(LAZY.format(dir=str(tmp_path)), env={"PYTHONPATH": str(ROOT)})
    res.assert_no_traceback()
    assert res.rc == 0, res.text
    assert "load only: False" in res.out and "with a dump: True" in res.out, res.text
    assert (tmp_path / "dump.textproto").exists(), res.text


def test_a_sweep_never_takes_a_starting_owner_for_a_dead_one(tmp_path):
    """Runs that start together each sweep the others' leftovers (dumpfile.py, the xdist
    controller). An owner's `alive` must never be seen unlocked, and a sweeper's probe must
    never make the owner's own lock fail: 300 owners start while another thread sweeps."""
    from autotune_cache.foundation.locking import Liveness, sweep_dead

    stop = threading.Event()
    swept: list[Path] = []

    def sweeper() -> None:
        while not stop.is_set():
            swept.extend(sweep_dead(tmp_path, "run-*"))

    thread = threading.Thread(target=sweeper)
    thread.start()
    owners, failures = [], []
    try:
        for i in range(300):
            directory = tmp_path / f"run-{i}"
            directory.mkdir()
            try:
                owners.append(Liveness(directory))
            except OSError as e:  # the probe held `alive` when the owner tried to lock it
                failures.append(e)
    finally:
        stop.set()
        thread.join()
    assert failures == [] and swept == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"run-{i}" for i in range(300))
    for owner in owners:
        owner.release()
    assert len(sweep_dead(tmp_path, "run-*")) == 300  # once released, all are dead
