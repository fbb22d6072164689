"""The autotuner's hit path (Autotuner.run): the fast memo agrees with the full path."""

from __future__ import annotations

import torch
import triton

from autotune_cache.triton import preload
from autotune_cache.triton.launch import launch_kwargs as launch_kwargs_of
from autotune_cache.triton.problem import triton_style_key
from tests.triton import kernels

TABLE = {16: 4.0, 32: 2.0, 64: 1.5, 128: 3.0}


def test_the_fast_key_resolves_to_tritons_memo(use_cache, fake):
    use_cache()
    fake(TABLE)
    kernel = kernels.tuned_add()
    kernels.launch_add(kernel, n=100)
    ((fast, (config, launch_kwargs, memo)),) = kernel._resolved.items()
    x = torch.rand(100)
    args = (x, x, x, 100)
    assert fast == kernel._fast_key(args)
    assert memo == triton_style_key(kernel.arg_names, kernel.keys,
                                    dict(zip(kernel.arg_names, args, strict=False)))
    assert kernel.cache[memo] is config and launch_kwargs == launch_kwargs_of(config)


def test_hits_launch_the_winner_and_follow_retuning(use_cache, fake):
    use_cache()
    bench = fake(TABLE)
    kernel = kernels.tuned_add()
    for _ in range(3):
        out, expected = kernels.launch_add(kernel, n=100)
        torch.testing.assert_close(out, expected)
    assert bench.calls == [16, 32, 64, 128]  # tuned once
    assert len(kernel._resolved) == 1 and kernel.best_config.kwargs == {"BLOCK_SIZE": 64}
    kernels.launch_add(kernel, n=300)  # another problem: tuned, resolved separately
    assert len(kernel._resolved) == 2

    bench.table.update({64: 9.0})  # clearing Triton's memo forces a re-tune, as in Triton
    kernel.cache.clear()
    use_cache()
    out, expected = kernels.launch_add(kernel, n=100)
    torch.testing.assert_close(out, expected)
    assert kernel.best_config.kwargs == {"BLOCK_SIZE": 32}


def test_a_key_passed_by_keyword_takes_the_full_path(use_cache, fake):
    use_cache()
    fake(TABLE)
    kernel = kernels.tuned_add()
    x, y = torch.rand(50), torch.rand(50)
    out = torch.empty_like(x)
    grid = lambda meta: (triton.cdiv(50, meta["BLOCK_SIZE"]),)  # noqa: E731
    kernel[grid](x, y, out, n=50)
    kernel[grid](x, y, out, n=50)
    torch.testing.assert_close(out, x + y)
    assert kernel.best_config.kwargs == {"BLOCK_SIZE": 64}


def test_compiles_started_are_attributed_to_the_candidate_being_specialised():
    """What compile_candidates records for preloading: Triton's jit_cache_hook runs in the
    thread that starts a compile; a hook the user set keeps running and is restored."""
    from triton import knobs

    from autotune_cache.triton.compile import recording_specializations

    seen = []
    installed = knobs.runtime.jit_cache_hook  # ours (warmups.py), put back at the end
    knobs.runtime.jit_cache_hook = lambda **kw: seen.append(kw["compile"]["key"])
    try:
        specs: dict[int, str] = {}
        with recording_specializations(specs) as now:
            now(2)
            knobs.runtime.jit_cache_hook(compile={"key": "k2", "specialization_data": "{2}"})
            now(5)
            knobs.runtime.jit_cache_hook(compile={"key": "k5", "specialization_data": "{5}"})
        assert specs == {2: "{2}", 5: "{5}"} and seen == ["k2", "k5"]
        knobs.runtime.jit_cache_hook(compile={"key": "after"})
        assert seen[-1] == "after"
    finally:
        knobs.runtime.jit_cache_hook = installed


class StubJit:
    """Stands in for the JIT function on a GPU: records preloads, launches the real kernel."""

    def __init__(self) -> None:
        self.preloaded: list[str] = []

    def preload(self, spec: str) -> None:
        self.preloaded.append(spec)

    def run(self, *args, **kwargs):
        return kernels.add_kernel.run(*args, **kwargs)


def loaded_kernel(use_cache, fake, tmp_path, monkeypatch, problems):
    """A fresh tuner over a results file whose winners (one per problem size) record the same
    specialization, with its JIT function swapped for a StubJit; returns it, the entries and
    the stub."""
    from autotune_cache.formats import save_results
    from autotune_cache.triton import engine

    use_cache()
    fake(TABLE)
    tuned = kernels.tuned_add()
    entries = []
    for n in problems:
        kernels.launch_add(tuned, n=n)
        entry = tuned.last_entry
        entry.result.triton_specialization = '{"name": "add_kernel"}'
        entries.append(entry)
    path = tmp_path / "r.textproto"
    save_results(path, entries)
    use_cache(load_from=(path,))
    kernel = kernels.tuned_add()
    assert kernel.source_fingerprint  # computed from the real function before the swap
    stub = StubJit()
    monkeypatch.setattr(kernel, "fn", stub)
    monkeypatch.setattr(engine, "interpreter_active", lambda: False)
    return kernel, entries, stub


def test_loaded_winners_are_preloaded_once_and_awaited_on_a_hit(use_cache, fake, tmp_path,
                                                                monkeypatch):
    """On a GPU the loaded winner's recorded specialization is compiled in the background at
    the first launch and awaited by its hit; here a stand-in JIT function records the calls."""
    from autotune_cache import CacheKey

    kernel, (entry,), stub = loaded_kernel(use_cache, fake, tmp_path, monkeypatch, [100])
    kernels.launch_add(kernel, n=100)
    kernels.launch_add(kernel, n=100)
    assert stub.preloaded == ['{"name": "add_kernel"}']
    assert list(preload.started(kernel)) == [CacheKey.from_proto(entry.key).digest()]


def test_winners_sharing_a_specialization_compile_once(use_cache, fake, tmp_path, monkeypatch):
    """Two loaded problems whose winners record the same specialization share one background
    compile, and both keys await that one; the driver is started once, before the threads (a
    stand-in here: there is no driver under the interpreter)."""
    from autotune_cache import CacheKey
    from autotune_cache.triton import preload

    kernel, entries, stub = loaded_kernel(use_cache, fake, tmp_path, monkeypatch, [100, 300])
    started = []
    monkeypatch.setattr(preload, "_start_driver", lambda: started.append(True))
    for n in (100, 300):
        out, expected = kernels.launch_add(kernel, n=n)
        torch.testing.assert_close(out, expected)
    assert stub.preloaded == ['{"name": "add_kernel"}']
    digests = [CacheKey.from_proto(e.key).digest() for e in entries]
    assert sorted(preload.started(kernel)) == sorted(digests)
    assert preload.started(kernel)[digests[0]] is preload.started(kernel)[digests[1]]
    assert started == [True]


def test_a_damaged_loaded_entry_skips_the_preload_not_the_launch(use_cache, fake, tmp_path,
                                                                 monkeypatch):
    """The preload scan parses every loaded entry of the kernel (results_index parses entries
    on use); a damaged one of another problem costs the preload, never the launch, whose own
    entry is intact."""
    kernel, _, stub = loaded_kernel(use_cache, fake, tmp_path, monkeypatch, [100, 300])
    path = tmp_path / "r.textproto"
    text = path.read_bytes()
    second = text.index(b"entries {", 1 + text.index(b"entries {"))
    damaged = text.index(b"time_ms:", second)
    path.write_bytes(text[:damaged] + b"time_ms: fast" + text[text.index(b"\n", damaged):])
    use_cache(load_from=(path,))
    out, expected = kernels.launch_add(kernel, n=100)
    torch.testing.assert_close(out, expected)
    assert stub.preloaded == [] and preload.started(kernel) == {}


def test_too_much_unparsed_text_skips_the_preload_scan(use_cache, fake, tmp_path, monkeypatch):
    """The scan parses the kernel's loaded entries; over PRELOAD_SCAN_BYTES of text still to
    parse, it is skipped, and only the launched key's entry gets parsed (by its lookup)."""
    from autotune_cache import get_cache
    from autotune_cache.triton import preload

    kernel, _, stub = loaded_kernel(use_cache, fake, tmp_path, monkeypatch, [100, 300])
    monkeypatch.setattr(preload, "PRELOAD_SCAN_BYTES", 100)
    out, expected = kernels.launch_add(kernel, n=100)
    torch.testing.assert_close(out, expected)
    assert stub.preloaded == [] and preload.started(kernel) == {}
    (loaded,) = get_cache().memory.loaded
    assert loaded.indexed and len(loaded.entries) == 1
