"""Item 5 of issue 11: a killed tuner's lock does not stall its peers, and no peer fails waiting.

The Redis lock is a short lease that its holder renews while it tunes: a SIGKILLed holder's lease
runs out within LOCK_LEASE_S, and a waiter then takes it. A waiter whose patience ends while a live
peer still holds a lock (Redis or directory) tunes without the lock, with a warning, instead of
failing with TimeoutError.
"""

from __future__ import annotations

import signal
import subprocess
import sys

from tests.reliability.conftest import ROOT, child_env, run_python

HOLD = """
import sys, time
import autotune_cache.tiers.redis as remote
remote.LOCK_LEASE_S = {lease}
from autotune_cache import Cache, Settings
from tests.cachetools import make_key
cache = Cache(Settings({setting}={where!r}))
with cache.tune_lock(make_key()) as held:
    print("locked" if held else "not locked", flush=True)
    time.sleep({hold})
"""

WAIT = """
import logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
import autotune_cache.tiers.redis as remote
remote.LOCK_LEASE_S = {lease}
from autotune_cache import Cache, Settings
from tests.cachetools import make_key
cache = Cache(Settings({setting}={where!r}))
with cache.tune_lock(make_key(){timeout}) as held:
    print("held" if held else "not held")
"""


def start_holder(setting: str, where: str, lease: float, hold: float) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD.format(setting=setting, where=where, lease=lease, hold=hold)],
        cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line == "locked", (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc


def test_sigkilled_holder_of_the_redis_lock_frees_it_within_the_lease(redis_url, redis_client):
    holder = start_holder("remote_cache", redis_url, lease=2, hold=3600)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    # With the default wait (30 minutes) the waiter still gets the lock once the lease is over.
    res = run_python(WAIT.format(setting="remote_cache", where=redis_url, lease=2, timeout=""),
                     timeout=60)
    res.assert_no_traceback()
    assert res.out.strip() == "held", res.text


def test_live_holder_renews_its_lease(redis_url, redis_client):
    """The holder outlives several leases; a waiter must not get the lock meanwhile."""
    holder = start_holder("remote_cache", redis_url, lease=1, hold=8)
    try:
        res = run_python(WAIT.format(setting="remote_cache", where=redis_url, lease=1,
                                     timeout=", timeout=4"), timeout=60)
    finally:
        holder.kill()
        holder.wait()
    res.assert_no_traceback()
    assert res.out.strip() == "not held", res.text
    assert "without the lock" in res.err


def test_waiter_on_the_directory_lock_tunes_without_it_instead_of_failing(tmp_path):
    holder = start_holder("cache_dir", str(tmp_path), lease=30, hold=60)
    try:
        res = run_python(WAIT.format(setting="cache_dir", where=str(tmp_path), lease=30,
                                     timeout=", timeout=1"), timeout=60)
    finally:
        holder.kill()
        holder.wait()
    res.assert_no_traceback()
    assert res.rc == 0 and res.out.strip() == "not held", res.text
    assert "without the lock" in res.err and ".lock" in res.err
