"""The cache key is canonical, stable and self-describing."""

import pytest

from autotune_cache import CacheKey, Device
from autotune_cache.key import canonical_problem
from tests.cachetools import CPU, H200, make_key


def test_problem_is_sorted_and_typed():
    assert canonical_problem({"N": 2, "M": 1, "a": "float16", "f": 0.5, "b": True}) == (
        "M=1,N=2,a=float16,b=true,f=0.5")


def test_problem_rejects_separator_characters():
    with pytest.raises(ValueError, match="must not contain"):
        canonical_problem({"M": "1,2"})
    with pytest.raises(ValueError, match="name"):
        canonical_problem({"a=b": 1})


def test_digest_is_stable_and_distinguishes_every_field():
    base = make_key()
    assert base.digest() == make_key().digest()
    # Pinned: a change here renames every cache-directory file, so it must be deliberate.
    assert base.digest() == "bee74eb89c95046df13b373e412be6288f1de383d60dd55b94a84a9dad0d6b5e"
    variants = [make_key(kernel="other"), make_key(problem={"M": 1}), make_key(device=CPU),
                make_key(toolchain={"triton": "3.5.0"}), make_key(source="s2"),
                make_key(configs="c2"), make_key(device=Device("NVIDIA H200", "sm_90", 66))]
    assert len({v.digest() for v in variants} | {base.digest()}) == len(variants) + 1


def test_digest_does_not_depend_on_dict_order():
    a = CacheKey("k", "s", "c", {"M": 1, "N": 2}, H200, {"triton": "3.6.0", "cuda": "13.0"})
    b = CacheKey("k", "s", "c", {"N": 2, "M": 1}, H200, {"cuda": "13.0", "triton": "3.6.0"})
    assert a == b and a.digest() == b.digest()


def test_proto_round_trip():
    key = make_key()
    assert CacheKey.from_proto(key.to_proto()) == key


def test_stale_reasons_name_what_differs():
    reasons = make_key().stale_reasons(make_key(device=CPU, toolchain={"triton": "3.5.0"}))
    assert any("cpu-interpreter" in r for r in reasons)
    assert any("triton=3.5.0" in r for r in reasons)
