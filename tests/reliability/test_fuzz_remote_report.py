"""Property-based fuzz of the Redis tier against hostile server replies, and of the report
(issue 22). Same modes as test_fuzz.py: quick in CI; AUTOTUNE_FUZZ=nightly runs at least
1,200 cases per property:

    AUTOTUNE_FUZZ=nightly PYTHONPATH=$PWD python -m pytest -q \
        tests/reliability/test_fuzz_remote_report.py

The Redis property: whatever a server answers to each command (well-formed replies of any type,
our entries damaged, errors, nil, garbage, bulk strings longer than what follows, oversize
headers), the tier's get, near-miss search, lock and put return a miss or a valid entry of the
key asked for, with a warning at most: never an exception. The report property: any entries
(names with `$`, backslashes, control characters, any Unicode; non-finite times; failures) and
any damaged XLA file give a page or a named error (exit 1 or 2), never a traceback.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from autotune_cache.cli import main as cli_main
from autotune_cache.formats import save_results
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.tiers.redis import RedisTier
from tests.cachetools import fake_tune, make_key
from tests.reliability.conftest import ROOT
from tests.reliability.fake_resp import array, bulk, fake_server

pytest.importorskip("redis", reason="the redis client is not installed (extra 'redis')")

NIGHTLY = os.environ.get("AUTOTUNE_FUZZ", "") == "nightly"
QUICK_EXAMPLES = {"redis": 60, "report": 15, "xla": 15}
NIGHTLY_EXAMPLES = 1200


def examples(kind: str) -> settings:
    return settings(max_examples=NIGHTLY_EXAMPLES if NIGHTLY else QUICK_EXAMPLES[kind],
                    deadline=None, derandomize=not NIGHTLY,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


KEY = make_key()
ENTRY = fake_tune(KEY).SerializeToString(deterministic=True)
OTHER = fake_tune(make_key(problem={"M": 1})).SerializeToString(deterministic=True)

damaged_entry = st.builds(
    lambda data, pos, val, cut: bytes(
        (val if i == pos % max(1, len(data)) else b) for i, b in enumerate(data))[cut:],
    st.sampled_from([ENTRY, OTHER]), st.integers(0, 10**4), st.integers(0, 255),
    st.integers(0, 8))
small_bulk = st.one_of(st.binary(max_size=64), st.just(ENTRY), st.just(OTHER), damaged_entry,
                       st.just(KEY.digest().encode()), st.just(b"OK"))
reply = st.one_of(
    small_bulk.map(bulk),
    st.just(bulk(None)),
    st.integers(-2**63, 2**63 - 1).map(lambda n: b":%d\r\n" % n),
    st.lists(small_bulk, max_size=6).map(array),
    st.sampled_from([b"+OK\r\n", b"+QUEUED\r\n", b"-ERR no\r\n", b"-WRONGTYPE x\r\n",
                     b"-NOSCRIPT x\r\n", b"*-1\r\n", b"*1\r\n*1\r\n:1\r\n", b"%1\r\n+a\r\n:1\r\n",
                     b"$99999999999\r\n", b"$5\r\nab", b"*3\r\n:1\r\n", b":x\r\n",
                     b"HTTP/1.1 400 Bad Request\r\n\r\n", b""]),
    st.binary(min_size=1, max_size=40),
)
COMMANDS = [b"EXISTS", b"STRLEN", b"GETRANGE", b"SCARD", b"SRANDMEMBER", b"SET", b"SADD",
            b"EVALSHA", b"EVAL", b"SCRIPT", b"MULTI", b"EXEC"]


@examples("redis")
@given(st.fixed_dictionaries({c: reply for c in COMMANDS}), reply)
@example({c: b"" for c in COMMANDS}, b":1\r\n")
@example({**{c: b":1\r\n" for c in COMMANDS}, b"GETRANGE": bulk(ENTRY),
          b"SRANDMEMBER": array([KEY.digest().encode()])}, b"+OK\r\n")
def test_the_redis_tier_survives_any_server_replies(replies, default):
    def answer(args: list[bytes]) -> bytes:
        return replies.get(args[0].upper() if args else b"", default)

    logger = logging.getLogger("autotune_cache")
    level = logger.level
    logger.setLevel(logging.CRITICAL)  # warnings are expected; restored for the other tests
    with contextlib.ExitStack() as restore:
        restore.callback(logger.setLevel, level)
        url = restore.enter_context(fake_server(answer))
        tier = RedisTier(url, timeout_s=0.2)
        found = tier.get(KEY)
        assert found is None or (found.key == KEY and found.entry.key == KEY.to_proto())
        tier.available = True  # each operation again, even after the first disabled the tier
        for near in tier.same_problem(KEY):
            assert near.entry.key.kernel and near.key.problem_group() == KEY.problem_group()
        tier.available = True
        with tier.lock(KEY, timeout=0.2) as held:
            assert held in (True, False)
        tier.available = True
        tier.put(KEY, fake_tune(KEY))
        assert "hunter2" not in repr(tier) + tier.origin


# ----- the report ------------------------------------------------------------------------------

names = st.one_of(st.text(min_size=1, max_size=24),
                  st.sampled_from(["$x$", "$\\frac{a$", "a\\b", "^_{}", "\x00\x1f", "名前",
                                   "<script>", "&amp;", "%s%d", "\u202e"]))
times = st.floats(allow_nan=True, allow_infinity=True, width=64)


@st.composite
def entries(draw) -> list[pb.Entry]:
    out = []
    for i in range(draw(st.integers(1, 3))):
        value = draw(names.filter(lambda t: "," not in t and "=" not in t))  # key.py's rule
        entry = fake_tune(make_key(kernel=draw(names), problem={"M": i, "p": value}))
        entry.result.time_ms = draw(times)
        for c in entry.result.candidates:
            c.time_ms = draw(times)
            if draw(st.booleans()):
                c.failure = draw(names)
            c.config.params[0].name = draw(names)
        entry.result.timing_method = draw(st.sampled_from(["", "fake", "cuda-graph"]))
        out.append(entry)
    return out


def run_report(*argv: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            return cli_main(["report", *argv])
        except SystemExit as e:  # argparse usage errors
            return int(e.code or 0)


@examples("report")
@given(entries(), entries(), st.booleans())
def test_the_report_renders_any_entries_or_names_the_problem(new, old, png):
    pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        save_results(root / "new.textproto", new)
        save_results(root / "old.pb", old)
        argv = [str(root / "new.textproto"), "--baseline", str(root / "old.pb"), "-o",
                str(root / "r.html")]
        rc = run_report(*argv, *(["--png", str(root / "png")] if png else []))
        # Binary vs text baselines are one format (ours): the page is written.
        assert rc == 0
        page = (root / "r.html").read_text(encoding="utf-8")
        assert "<script>" not in page or page.count("<script>") == page.count("</script>")
        assert not any(math.isnan(e.result.time_ms) for e in new) or "nan" in page.lower()


XLA = ROOT / "tests" / "fixtures" / "xla_h200_jax0.11.2"
XLA_SEEDS = {name: (XLA / name).read_bytes() for name in ("res.textproto", "legacy.textproto")}


@examples("xla")
@given(st.sampled_from(sorted(XLA_SEEDS)), st.lists(st.tuples(st.integers(0, 10**6),
                                                            st.integers(0, 255)), max_size=6),
       st.integers(0, 200), st.booleans())
def test_the_report_on_damaged_xla_files(name, flips, cut, as_baseline):
    pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")
    data = bytearray(XLA_SEEDS[name][: max(0, len(XLA_SEEDS[name]) - cut)])
    for pos, val in flips:
        if data:
            data[pos % len(data)] = val
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / name
        path.write_bytes(bytes(data))
        other = XLA / name
        argv = ([str(other), "--baseline", str(path)] if as_baseline else [str(path)])
        assert run_report(*argv, "-o", str(Path(d) / "r.html")) in (0, 1, 2)


def test_nightly_mode_runs_at_least_a_thousand_cases_per_property():
    properties = [name for name in globals() if name.startswith("test_the_")]
    assert len(properties) == 3 and NIGHTLY_EXAMPLES >= 1000
