"""Item 4 of issue 11: reading a results file has a memory bound, for text files too.

protobuf's text parser costs about 140 bytes of memory per escaped byte (`\\001`), so a text file
that fits under the binary cap could still exhaust memory. Text files have their own, lower caps;
both are stated in docs/security.md.
"""

from __future__ import annotations

import re

from tests.reliability.conftest import ROOT, run_python

UNDER_A_MEMORY_LIMIT = """
import resource
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # 1 GiB of address space
from autotune_cache import Cache, Settings, AutotuneCacheError
try:
    Cache(Settings(load_from={path!r}))
except AutotuneCacheError as e:
    print("named:", e)
"""


def escaped_text_file(path, escapes: int):
    with open(path, "wb") as f:
        f.write(b'version: 1\nentries { key { kernel: "')
        f.write(b"\\001" * escapes)
        f.write(b'" } }\n')
    return path


def test_escape_heavy_text_file_is_refused_before_it_exhausts_memory(tmp_path):
    # 16 MiB of text, 4 Mi escapes: about 2.3 GB to parse without a cap.
    path = escaped_text_file(tmp_path / "big.textproto", 4 << 20)
    res = run_python(UNDER_A_MEMORY_LIMIT.format(path=str(path)), timeout=120)
    res.assert_no_traceback()
    assert res.out.startswith("named:") and str(path) in res.out, res.text
    assert "binary" in res.out, "the message should point to the binary format for big files"


def test_cli_refuses_it_too(tmp_path):
    path = escaped_text_file(tmp_path / "big.textproto", 4 << 20)
    res = run_python(UNDER_A_MEMORY_LIMIT.replace(
        "Cache(Settings(load_from={path!r}))",
        "from autotune_cache.cli import main; assert main(['verify', {path!r}]) == 1").format(
            path=str(path)), timeout=120)
    res.assert_no_traceback()
    assert str(path) in res.out, res.text


def test_the_limits_are_stated_in_the_docs():
    from autotune_cache.foundation import limits

    doc = (ROOT / "docs" / "security.md").read_text()
    for name in ("MAX_TEXT_BYTES", "MAX_BINARY_BYTES", "MAX_ENTRY_BYTES", "MAX_TEXT_ESCAPES",
                 "MAX_REMOTE_VALUE_BYTES", "MAX_FILE_ENTRIES", "MAX_REMOTE_INDEX_MEMBERS",
                 "MAX_REMOTE_MISS_BYTES"):
        value = getattr(limits, name)
        assert name in doc, f"docs/security.md does not state {name}"
        shown = re.search(rf"^\| `{name}` \|\s*([^|]+)\|", doc, re.MULTILINE)
        assert shown, f"docs/security.md has no table row for {name}"
        assert limits.describe(value, name) in shown.group(1), (name, shown.group(1))
    assert limits.MAX_TEXT_BYTES * 4 <= limits.MAX_BINARY_BYTES
