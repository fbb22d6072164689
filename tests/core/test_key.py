"""The cache key is canonical, stable and self-describing."""

from dataclasses import replace

import pytest
from google.protobuf import text_format

from autotune_cache import Cache, CacheKey, Device, MissingResultError, Settings
from autotune_cache.formats import save_results
from autotune_cache.foundation import env
from autotune_cache.foundation.key import (
    KEY_SCHEME,
    UNRECORDED_SCHEME,
    canonical_problem,
    scheme_mismatch,
)
from autotune_cache.proto import autotune_results_pb2 as pb
from tests.cachetools import CPU, H200, fake_tune, make_key


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


# ----- key schemes -----------------------------------------------------------------------------

def test_scheme_one_is_stored_as_before_schemes_were_recorded():
    key = make_key()
    assert key.scheme == KEY_SCHEME == UNRECORDED_SCHEME == 1
    assert not key.to_proto().key_scheme
    assert "key_scheme" not in text_format.MessageToString(key.to_proto())
    assert CacheKey.from_proto(pb.Key(kernel="matmul")).scheme == 1


def test_a_later_scheme_is_written_hashed_and_read_back():
    old, new = make_key(), replace(make_key(), scheme=2)
    assert "key_scheme: 2" in text_format.MessageToString(new.to_proto())
    assert CacheKey.from_proto(new.to_proto()) == new != old
    assert new.digest() != old.digest()
    assert new.problem_group() == old.problem_group()  # still found as a near miss
    assert new.sort_key() != old.sort_key()


def test_a_damaged_scheme_in_a_file_is_a_stale_near_miss_not_an_error():
    damaged = make_key().to_proto()
    damaged.key_scheme = -3
    key = CacheKey.from_proto(damaged)
    assert key.scheme == -3 and make_key().is_stale(key)
    assert make_key().stale_reasons(key) == [scheme_mismatch(-3, 1)]


def test_another_scheme_is_named_instead_of_an_edited_kernel():
    current = replace(make_key(source="src-recipe2"), scheme=2)
    reasons = current.stale_reasons(make_key(device=CPU))
    assert reasons[0].startswith("key scheme 1 != 2: this cache was written with key scheme 1, "
                                 "and this autotune_cache computes keys with scheme 2")
    assert reasons[0].endswith("regenerate the cache")
    assert any("cpu-interpreter" in r for r in reasons)  # device and toolchain still compare
    assert not any("source" in r or "candidate" in r for r in reasons)
    assert current.is_stale(make_key(source="src-recipe2"))
    newer = make_key().stale_reasons(replace(make_key(), scheme=3))
    assert newer == [scheme_mismatch(3, 1)] and "update autotune_cache" in newer[0]


def test_candidate_list_change_alone_is_not_stale():
    assert not make_key().is_stale(make_key(configs="cfg2"))
    assert make_key().is_stale(make_key(source="src2"))
    assert make_key().stale_reasons(make_key(source="src2")) == ["kernel source changed"]


def test_require_complete_message_names_the_scheme_and_the_regen_command(tmp_path):
    committed = tmp_path / "committed.textproto"
    save_results(committed, [fake_tune(make_key())])
    # The same kernel, as a release computing scheme 2 (other fingerprints) looks it up.
    current = replace(make_key(source="src-recipe2", configs="cfg-recipe2"), scheme=2)
    hint = "bazel run //kernels:matmul_test.regen"
    with env.use({"AUTOTUNE_REGEN_HINT": hint}):
        cache = Cache(Settings(load_from=(committed,), require_complete=True))
        with pytest.raises(MissingResultError) as info:
            cache.lookup(current)
    message = str(info.value)
    assert (f"  - {scheme_mismatch(1, 2)}  (in {committed})" in message
            and f"Regenerate the cache with:\n  {hint}" in message), message
    assert "kernel source changed" not in message
    assert (cache.stats.misses, cache.stats.stale) == (1, 1)


def test_a_later_scheme_loads_from_a_canonical_file(tmp_path):
    path = tmp_path / "scheme2.textproto"
    new = replace(make_key(), scheme=2)
    save_results(path, [fake_tune(new)])
    assert "    key_scheme: 2\n" in path.read_text()
    cache = Cache(Settings(load_from=(path,)))
    assert cache.lookup(new) is not None
    assert cache.lookup(make_key()) is None
