"""Issue 22, item 5: what loading a results file costs in memory, measured, as docs/security.md
states it.

Each case loads a file in a fresh process and reads the growth of its peak resident set
(VmHWM in /proc/self/status) across `Cache(...)` and one lookup: what a test process pays for
`--load_autotune_results_from`. Sizes are moderate (a few MiB, tens of thousands of entries),
and the bounds are the documented per-byte and per-entry figures with a fixed allowance for the
interpreter's own noise.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autotune_cache.formats import serialize_results
from autotune_cache.foundation import limits
from autotune_cache.proto import autotune_results_pb2 as pb
from tests.cachetools import fake_tune, make_key
from tests.reliability.conftest import run_python

MiB = 1 << 20
# The documented figures (docs/security.md, "Memory").
INDEX_BYTES_PER_ENTRY = 400       # a canonical text or binary file: its size plus this per entry
WHOLE_PARSE_PER_BYTE = 9          # any other text file: parsed whole, ~8x its size (9: margin)
ALLOWANCE = 12 * MiB              # allocator and interpreter noise around one load

MEASURE = """
import re
from pathlib import Path
from autotune_cache import Cache, Settings, AutotuneCacheError
from tests.cachetools import make_key
def hwm():
    status = open("/proc/self/status").read()
    return int(re.search(r"VmHWM:\\s+(\\d+)", status).group(1)) * 1024
before = hwm()
try:
    cache = Cache(Settings(load_from=Path({path!r})))
    cache.lookup(make_key(kernel="k3", problem={{"M": 3, "N": 7}}))
except AutotuneCacheError as e:
    print("named:", e)
print("grew", hwm() - before)
"""


def growth(path: Path) -> int:
    res = run_python(MEASURE.format(path=str(path)), timeout=300)
    res.assert_no_traceback()
    assert "named:" not in res.out, res.out
    return int(res.out.split("grew")[1])


def realistic(n: int) -> list[pb.Entry]:
    """Entries as the tuner writes them (six candidates each), over 50 kernels."""
    return [fake_tune(make_key(kernel=f"k{i % 50}", problem={"M": i, "N": 7})) for i in range(n)]


def tiny(n: int) -> list[pb.Entry]:
    """The smallest entries a file can hold: where a per-entry cost shows most."""
    return [pb.Entry(key=pb.Key(kernel="k", problem=f"M={i}")) for i in range(n)]


@pytest.mark.parametrize("shape", ["realistic", "tiny"])
@pytest.mark.parametrize("text", [True, False], ids=["canonical-text", "binary"])
def test_an_indexed_file_costs_its_size_plus_a_bounded_index(tmp_path, shape, text):
    n = 20_000 if shape == "realistic" else 100_000
    entries = realistic(n) if shape == "realistic" else tiny(n)
    path = tmp_path / ("cache.textproto" if text else "cache.pb")
    path.write_bytes(serialize_results(entries, text=text))
    grew = growth(path)
    bound = path.stat().st_size + INDEX_BYTES_PER_ENTRY * n + ALLOWANCE
    assert grew <= bound, (f"{path.name} ({path.stat().st_size / MiB:.1f} MiB, {n:,} entries) "
                           f"grew the process by {grew / MiB:.0f} MiB, over {bound / MiB:.0f}")


def test_a_non_canonical_text_file_costs_about_eight_times_its_size(tmp_path):
    path = tmp_path / "hand.textproto"
    path.write_bytes(b"# edited by hand\n" + serialize_results(realistic(6_000), text=True))
    grew = growth(path)
    bound = WHOLE_PARSE_PER_BYTE * path.stat().st_size + ALLOWANCE
    assert grew <= bound, f"grew {grew / MiB:.0f} MiB, over {bound / MiB:.0f}"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


@pytest.mark.parametrize("kind", ["canonical.textproto", "hand.textproto", "binary.pb"])
def test_more_entries_than_the_cap_is_a_named_error(tmp_path, kind):
    n = limits.MAX_FILE_ENTRIES + 1
    path = tmp_path / kind
    if kind == "binary.pb":
        entry = pb.Entry(key=pb.Key(kernel="k", problem="M=1")).SerializeToString()
        path.write_bytes(b"\x08\x01" + (b"\x12" + _varint(len(entry)) + entry) * n)
    else:
        block = b'entries {\n  key {\n    kernel: "k"\n    problem: "M=1"\n  }\n}\n'
        head = b"version: 1\n" if kind.startswith("canonical") else b"# by hand\nversion: 1\n"
        path.write_bytes(head + block * n)
    res = run_python(MEASURE.format(path=str(path)), timeout=300)
    res.assert_no_traceback()
    assert "named:" in res.out and str(path) in res.out, res.text
    assert f"{limits.MAX_FILE_ENTRIES:,} entries" in res.out and "Split it" in res.out, res.out


@pytest.mark.parametrize("text", [True, False], ids=["canonical-text", "binary"])
def test_an_entry_over_the_entry_cap_is_a_named_error(tmp_path, text):
    big = fake_tune(make_key())
    big.result.tuner_version = "x" * (limits.MAX_ENTRY_BYTES + 1)
    path = tmp_path / ("cache.textproto" if text else "cache.pb")
    path.write_bytes(serialize_results([big, fake_tune(make_key(problem={"M": 1}))], text=text))
    res = run_python(MEASURE.format(path=str(path)), timeout=120)
    res.assert_no_traceback()
    assert "named:" in res.out and re.search(r"entry \d \(matmul\) is 4,1", res.out), res.out
    assert "4 MiB one entry may have" in res.out, res.out
