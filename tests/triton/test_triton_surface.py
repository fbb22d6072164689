"""The whole `triton.autotune` surface, with Triton's own Autotuner as the reference.

Each test builds the same kernel twice, once under `triton.autotune` and once under ours, on the
CPU interpreter, and checks that both pick the same config, compute the same output and call
the user's hooks in the same order. Triton's autotuner cannot time anything on the interpreter
by itself (it asks the GPU driver for a benchmarker), so both get the same deterministic
`do_bench`: it launches the candidate once (running its hooks) and returns a time from a table
in candidate order. Where we deliberately differ from Triton, the test says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import triton
import triton.language as tl

from autotune_cache.triton import autotune
from tests.triton import attention, kernels


class OrderedBench:
    """A do_bench for both autotuners: launch once, then the next time from `times`."""

    def __init__(self, times: list[float]) -> None:
        self.times = list(times)
        self.calls = 0

    def __call__(self, kernel_call: Callable[[], Any], quantiles: Any) -> list[float]:
        kernel_call()
        time_ms = self.times[self.calls % len(self.times)]
        self.calls += 1
        return [time_ms, time_ms, time_ms]


DECORATORS = {"triton": triton.autotune, "ours": autotune}


def both(build: Callable[[Callable[..., Any]], Any]) -> dict[str, Any]:
    """{'triton': build(triton.autotune), 'ours': build(autotune)}."""
    return {name: build(decorator) for name, decorator in DECORATORS.items()}


def grid_1d(n: int) -> Callable[[dict[str, Any]], tuple[int]]:
    return lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)


def blocks_of(timings: dict[Any, Any]) -> list[int]:
    return sorted(c.kwargs["BLOCK_SIZE"] for c in timings)


# ----- configs, key ------------------------------------------------------------------------------

def test_configs_and_key_retune_on_the_same_launches(use_cache) -> None:
    """Both re-tune on a new key value or tensor dtype, and not on another non-key scalar."""
    use_cache()
    benches = {}
    tuners = {}
    for name, decorator in DECORATORS.items():
        benches[name] = OrderedBench([3.0, 1.0, 2.0])
        tuners[name] = decorator(configs=kernels.configs(16, 32, 64), key=["n"],
                                 do_bench=benches[name])(kernels.add_kernel)
    calls: dict[str, list[int]] = {name: [] for name in DECORATORS}
    for name, kernel in tuners.items():
        for n, dtype in ((64, torch.float32), (64, torch.float32), (80, torch.float32),
                         (80, torch.float64)):
            x = torch.rand(n, dtype=dtype)
            out = torch.empty_like(x)
            kernel[grid_1d(n)](x, x, out, n)
            torch.testing.assert_close(out, x + x)
            calls[name].append(benches[name].calls)
        assert kernel.best_config.kwargs == {"BLOCK_SIZE": 32}
    assert calls["ours"] == calls["triton"] == [3, 3, 6, 9]


# ----- prune_configs_by ----------------------------------------------------------------------

@pytest.mark.parametrize("prune", [
    pytest.param(lambda: {"early_config_prune":
                          lambda configs, nargs, **kw: [c for c in configs
                                                        if c.kwargs["BLOCK_SIZE"] <= nargs["n"]]},
                 id="early_config_prune"),
    pytest.param(lambda: {"perf_model": lambda **kw: -kw["BLOCK_SIZE"], "top_k": 2},
                 id="perf_model-top_k-int"),
    pytest.param(lambda: {"perf_model": lambda **kw: kw["BLOCK_SIZE"], "top_k": 0.5},
                 id="perf_model-top_k-fraction"),
    pytest.param(lambda: {"early_config_prune": lambda configs, nargs, **kw: configs[1:],
                          "perf_model": lambda **kw: kw["BLOCK_SIZE"], "top_k": 2},
                 id="early-prune-then-perf_model"),
])
def test_prune_configs_by_benchmarks_the_same_candidates(use_cache, prune) -> None:
    use_cache()
    results = {}
    for name, decorator in DECORATORS.items():
        bench = OrderedBench([2.0, 1.0, 3.0, 4.0])
        kernel = decorator(configs=kernels.configs(16, 32, 64, 128), key=["n"],
                           prune_configs_by=prune(), do_bench=bench)(kernels.add_kernel)
        out, expected = kernels.launch_add(kernel, n=48)
        torch.testing.assert_close(out, expected)
        results[name] = (blocks_of(kernel.configs_timings), kernel.best_config.kwargs,
                         bench.calls)
    assert results["ours"] == results["triton"]


def test_early_prune_to_nothing_raises_like_triton(use_cache) -> None:
    use_cache()
    errors = {}
    for name, decorator in DECORATORS.items():
        kernel = decorator(configs=kernels.configs(16, 32), key=["n"],
                           prune_configs_by={"early_config_prune": lambda c, a, **k: []},
                           do_bench=OrderedBench([1.0]))(kernels.add_kernel)
        with pytest.raises(Exception) as err:
            kernels.launch_add(kernel)
        errors[name] = (type(err.value), str(err.value))
    assert errors["ours"] == errors["triton"]


# ----- reset_to_zero, restore_value, hooks -----------------------------------------------------

def test_reset_to_zero_and_restore_value_leave_the_same_results(use_cache) -> None:
    use_cache()
    n = 70
    x = torch.rand(n, generator=torch.Generator().manual_seed(4))
    for name, decorator in DECORATORS.items():
        acc = decorator(configs=kernels.configs(16, 32, 64), key=["n"], reset_to_zero=["out_ptr"],
                        do_bench=OrderedBench([2.0, 1.0, 3.0]))(kernels.accumulate_kernel)
        out = torch.full((n,), 7.0)
        acc[grid_1d(n)](x, out, n)
        torch.testing.assert_close(out, x, msg=name)  # zeroed once after tuning, then += x

        double = decorator(configs=kernels.configs(16, 32, 64), key=["n"],
                           restore_value=["x_ptr"],
                           do_bench=OrderedBench([2.0, 1.0, 3.0]))(kernels.double_in_place_kernel)
        y = x.clone()
        double[grid_1d(n)](y, n)
        torch.testing.assert_close(y, x * 2, msg=name)  # benchmarks restored, one real launch


def _hook_recorder() -> tuple[list[tuple], Callable[..., None], Callable[..., None],
                              list[triton.Config]]:
    events: list[tuple] = []

    def pre_hook(nargs: dict, reset_only: bool = False) -> None:
        events.append(("pre", nargs.get("BLOCK_SIZE"), reset_only))
        nargs["out_ptr"].zero_()

    def post_hook(nargs: dict, exception: BaseException | None) -> None:
        events.append(("post", nargs["BLOCK_SIZE"], exception is None))

    def config_hook(nargs: dict) -> None:
        events.append(("config", nargs["BLOCK_SIZE"]))

    configs = [triton.Config({"BLOCK_SIZE": b}, num_warps=4, num_stages=2, pre_hook=config_hook)
               for b in (16, 32, 64)]
    return events, pre_hook, post_hook, configs


def test_decorator_and_config_hooks_run_in_triton_order(use_cache) -> None:
    """Per benchmark launch: Config.pre_hook, pre_hook, launch, post_hook; then the
    reset-only pre_hook once; then the winner's Config.pre_hook before the real launch."""
    use_cache()
    sequences = {}
    for name, decorator in DECORATORS.items():
        events, pre_hook, post_hook, configs = _hook_recorder()
        kernel = decorator(configs=configs, key=["n"], pre_hook=pre_hook, post_hook=post_hook,
                           do_bench=OrderedBench([2.0, 1.0, 3.0]))(kernels.accumulate_kernel)
        n = 50
        x = torch.rand(n)
        out = torch.full((n,), 3.0)
        kernel[grid_1d(n)](x, out, n)
        torch.testing.assert_close(out, x)
        sequences[name] = events
        assert kernel.best_config is configs[1]
    assert sequences["ours"] == sequences["triton"]
    assert sequences["ours"][:4] == [("config", 16), ("pre", 16, False), ("post", 16, True),
                                     ("config", 32)]
    assert sequences["ours"][-2:] == [("pre", 32, True), ("config", 32)]


def test_post_hook_sees_the_launch_exception(use_cache) -> None:
    """A failing candidate's post_hook gets the exception in both (Triton then re-raises it for
    an error that is not a resource or compile-time assertion failure; we record the config as
    failed and carry on: a deliberate difference, see docs/triton.md)."""
    use_cache()
    seen: dict[str, list] = {}
    for name, decorator in DECORATORS.items():
        seen[name] = []

        def post_hook(nargs: dict, exception: BaseException | None, name: str = name) -> None:
            seen[name].append((nargs["BLOCK_SIZE"], type(exception).__name__))

        kernel = decorator(configs=kernels.configs(24, 32), key=["n"], post_hook=post_hook,
                           do_bench=OrderedBench([1.0, 2.0]))(kernels.add_kernel)
        if name == "triton":
            with pytest.raises(Exception, match="power of 2"):
                kernels.launch_add(kernel, n=40)
        else:
            out, expected = kernels.launch_add(kernel, n=40)
            torch.testing.assert_close(out, expected)
            assert "power of 2" in kernel.last_entry.result.candidates[0].failure
    assert seen["ours"][0] == seen["triton"][0]
    assert seen["ours"][0][0] == 24 and seen["ours"][0][1] != "NoneType"


# ----- benchmark arguments -----------------------------------------------------------------------

def test_do_bench_is_called_like_triton(use_cache) -> None:
    use_cache()
    calls: dict[str, list] = {}
    for name in DECORATORS:
        calls[name] = []

        def do_bench(kernel_call: Callable[[], Any], quantiles: Any, name: str = name) -> float:
            calls[name].append(tuple(quantiles))
            kernel_call()
            return float(len(calls[name]))  # a float, not a list: both accept it

        kernel = kernels.tuned_add(blocks=(16, 32), do_bench=do_bench) if name == "ours" else \
            triton.autotune(configs=kernels.configs(16, 32), key=["n"],
                            do_bench=do_bench)(kernels.add_kernel)
        out, expected = kernels.launch_add(kernel)
        torch.testing.assert_close(out, expected)
        assert kernel.best_config.kwargs == {"BLOCK_SIZE": 16}
    assert calls["ours"] == calls["triton"] == [(0.5, 0.2, 0.8)] * 2


def test_warmup_rep_use_cuda_graph_are_ours_and_not_deprecated(use_cache, fake,
                                                              recwarn) -> None:
    """Triton warns that warmup/rep/use_cuda_graph are deprecated and swaps in its GPU
    do_bench; we keep them as our GPU benchmark's settings (the timing method records them), so
    no warning. On the interpreter the wall clock times, so the settings are only stored."""
    use_cache()
    kernel = kernels.tuned_add(warmup=5, rep=20, use_cuda_graph=True)
    assert (kernel.bench_warmup, kernel.bench_rep, kernel.use_cuda_graph) == (5, 20, True)
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]
    with pytest.warns(DeprecationWarning):
        triton.autotune(configs=kernels.configs(16, 32), key=["n"], warmup=5)(kernels.add_kernel)
    from autotune_cache.triton.bench import GpuBenchmark, choose_benchmark

    chosen = choose_benchmark(interpreter=False, do_bench=None, warmup=5, rep=20,
                              use_cuda_graph=True)
    assert isinstance(chosen, GpuBenchmark) and chosen.method == "cuda_graph(rep=20)"
    assert choose_benchmark(interpreter=False, do_bench=None, warmup=5, rep=20,
                            use_cuda_graph=False).method == "do_bench(warmup=5,rep=20)"


def test_unknown_decorator_arguments_go_to_triton(use_cache) -> None:
    errors = {}
    for name, decorator in DECORATORS.items():
        with pytest.raises(TypeError) as err:
            decorator(configs=kernels.configs(16), key=["n"],
                      no_such_argument=1)(kernels.add_kernel)
        errors[name] = str(err.value)
    assert "no_such_argument" in errors["ours"] and "no_such_argument" in errors["triton"]


# ----- heuristics, descriptors, special arguments -------------------------------------------------

@triton.jit
def scale_kernel(x_ptr, out_ptr, n, scale, HAS_BIAS: tl.constexpr, bias_ptr,
                 BLOCK_SIZE: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    if EVEN:  # noqa: SIM108  (the tutorials' style: one branch per specialisation)
        x = tl.load(x_ptr + offs)
    else:
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    y = x * scale
    if HAS_BIAS:
        y += tl.load(bias_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, y, mask=offs < n)


EVEN = {"EVEN": lambda args: args["n"] % args["BLOCK_SIZE"] == 0}


@pytest.mark.parametrize("stacking", ["heuristics-inside", "heuristics-outside"])
def test_heuristics_stacked_inside_and_outside(use_cache, stacking: str) -> None:
    use_cache()
    results = {}
    for name, decorator in DECORATORS.items():
        tune = decorator(configs=kernels.configs(16, 32, 64), key=["n"],
                         do_bench=OrderedBench([3.0, 1.0, 2.0]))
        if stacking == "heuristics-inside":
            kernel = tune(triton.heuristics(EVEN)(scale_kernel))
        else:  # the heuristic reads BLOCK_SIZE, so outside it needs a value: use n's
            kernel = triton.heuristics({"EVEN": lambda args: args["n"] % 16 == 0})(
                tune(scale_kernel))
        outs = []
        for n in (64, 70):
            x = torch.rand(n, generator=torch.Generator().manual_seed(n))
            out = torch.empty_like(x)
            kernel[grid_1d(n)](x, out, n, 2.0, False, None)
            torch.testing.assert_close(out, x * 2)
            outs.append(out)
        tuner = kernel if stacking == "heuristics-inside" else kernel.fn
        results[name] = (tuner.best_config.kwargs, outs)
    assert results["ours"][0] == results["triton"][0] == {"BLOCK_SIZE": 32}
    for ours, theirs in zip(results["ours"][1], results["triton"][1], strict=True):
        torch.testing.assert_close(ours, theirs, atol=0, rtol=0)


def test_none_and_constexpr_bool_arguments_keyword_only_launch(use_cache) -> None:
    """All-keyword launches (no positional argument at all), a None pointer, a constexpr bool,
    the key on a keyword argument, and a grid given as a tuple."""
    use_cache()
    n = 48
    x = torch.rand(n, generator=torch.Generator().manual_seed(5))
    bias = torch.rand(n, generator=torch.Generator().manual_seed(6))
    outs = {}
    for name, decorator in DECORATORS.items():
        bench = OrderedBench([3.0, 1.0, 2.0])
        kernel = decorator(configs=kernels.configs(16, 32, 64), key=["n", "HAS_BIAS"],
                           do_bench=bench)(triton.heuristics(EVEN)(scale_kernel))
        with_bias, without = torch.empty_like(x), torch.empty_like(x)
        kernel[(3,)](x_ptr=x, out_ptr=with_bias, n=n, scale=0.5, HAS_BIAS=True, bias_ptr=bias)
        kernel[(3,)](x_ptr=x, out_ptr=without, n=n, scale=0.5, HAS_BIAS=False, bias_ptr=None)
        torch.testing.assert_close(with_bias, x * 0.5 + bias)
        torch.testing.assert_close(without, x * 0.5)
        outs[name] = (bench.calls, kernel.best_config.kwargs)
    assert outs["ours"] == outs["triton"] == (6, {"BLOCK_SIZE": 32})  # HAS_BIAS is in the key


@triton.jit(do_not_specialize=["n"])
def add_dns_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


def test_do_not_specialize_kernel(use_cache) -> None:
    use_cache()
    results = {}
    for name, decorator in DECORATORS.items():
        bench = OrderedBench([2.0, 1.0])
        kernel = decorator(configs=kernels.configs(16, 32), key=["n"], do_bench=bench)(
            add_dns_kernel)
        for n in (40, 41):
            out, expected = kernels.launch_add(kernel, n=n)
            torch.testing.assert_close(out, expected)
        results[name] = (bench.calls, kernel.best_config.kwargs)
    assert results["ours"] == results["triton"] == (4, {"BLOCK_SIZE": 32})


def test_tensor_descriptor_attention_matches_triton(use_cache) -> None:
    """The fused-attention tutorial pattern: host TensorDescriptors with a dummy block shape,
    a per-config pre_hook setting the real one, an early prune. (The interpreter compiles
    nothing; the specialise-after-hook order is checked on the sm_90 compile path in
    test_compile_and_sandbox.py and on a GPU in test_gpu.py.)"""
    use_cache()
    q, k, v = attention.make_inputs(1, 2, 32, 16)
    outs = {}
    for name, decorator in DECORATORS.items():
        kernel = attention.tuned(decorator, attention.attention_configs((16, 32, 64), (16, 32)),
                                 do_bench=OrderedBench([3.0, 2.0, 1.0, 4.0]),
                                 prune_configs_by={"early_config_prune":
                                                   attention.prune_invalid_configs})
        outs[name] = attention.launch(kernel, q, k, v)
        assert kernel.best_config.kwargs == {"BLOCK_M": 32, "BLOCK_N": 16}, name
        assert len(kernel.configs_timings) == 4  # BLOCK_M=64 > N_CTX pruned
    torch.testing.assert_close(outs["ours"], attention.reference(q, k, v), atol=2e-3, rtol=0)
    torch.testing.assert_close(outs["ours"], outs["triton"], atol=0, rtol=0)


def test_ir_override_candidate_is_the_one_launched(use_cache) -> None:
    """A config with ir_override (the interpreter ignores the file) keeps its own timing and is
    the launched object, as in Triton."""
    use_cache()
    chosen = {}
    for name, decorator in DECORATORS.items():
        configs = [triton.Config({"BLOCK_SIZE": 32}, num_warps=4, num_stages=2),
                   triton.Config({"BLOCK_SIZE": 32}, num_warps=4, num_stages=2,
                                 ir_override="/overrides/add_kernel.ttgir")]
        kernel = decorator(configs=configs, key=["n"], do_bench=OrderedBench([2.0, 1.0]))(
            kernels.add_kernel)
        out, expected = kernels.launch_add(kernel)
        torch.testing.assert_close(out, expected)
        chosen[name] = configs.index(kernel.best_config)
        assert kernel.best_config.ir_override == "/overrides/add_kernel.ttgir"
    assert chosen["ours"] == chosen["triton"] == 1


def test_single_config_after_pruning_is_launched_without_tuning(use_cache) -> None:
    """A list pruned to one config is launched as it is: no benchmark, no cache entry (Triton
    >= 3.7 does the same; 3.6 benchmarks the lone config)."""
    cache = use_cache()
    bench = OrderedBench([1.0])
    kernel = kernels.tuned_add(blocks=(16, 32), do_bench=bench,
                               prune_configs_by={"early_config_prune": lambda c, a, **k: c[:1]})
    out, expected = kernels.launch_add(kernel)
    torch.testing.assert_close(out, expected)
    assert bench.calls == 0 and kernel.best_config.kwargs == {"BLOCK_SIZE": 16}
    assert not cache.stats.anything_happened


def test_listener_hears_each_new_key_where_triton_has_one(use_cache, fake) -> None:
    knobs = pytest.importorskip("triton.knobs")
    if not hasattr(knobs.autotuning, "listener"):
        pytest.skip(f"Triton {triton.__version__} has no knobs.autotuning.listener (>= 3.7)")
    use_cache()
    fake({16: 2.0, 32: 1.0})
    heard: list[dict] = []
    previous = knobs.autotuning.listener
    knobs.autotuning.listener = lambda **kw: heard.append(kw)
    try:
        kernel = kernels.tuned_add(blocks=(16, 32))
        kernels.launch_add(kernel, n=40)
        kernels.launch_add(kernel, n=40)  # the in-process memo: not a new key
        kernels.launch_add(kernels.tuned_add(blocks=(16, 32)), n=40)  # a hit in our cache
    finally:
        knobs.autotuning.listener = previous
    assert [(h["cache_hit"], h["best_config"].kwargs) for h in heard] == [
        (False, {"BLOCK_SIZE": 32}), (True, {"BLOCK_SIZE": 32})]
    assert heard[0]["fn"] is kernels.add_kernel and heard[0]["duration"] is not None


def test_conflicting_meta_parameter_raises_like_triton_before_any_benchmark(use_cache) -> None:
    from autotune_cache.triton.autotuner import ConflictingMetaParametersError

    use_cache()
    errors = {}
    for name, decorator in DECORATORS.items():
        bench = OrderedBench([1.0])
        kernel = decorator(configs=kernels.configs(16, 32), key=["n"], do_bench=bench)(
            kernels.add_kernel)
        x = torch.rand(8)
        with pytest.raises(ValueError) as err:
            kernel[(1,)](x, x, x, 8, BLOCK_SIZE=16)
        errors[name] = str(err.value)
        if name == "ours":
            assert isinstance(err.value, ConflictingMetaParametersError) and bench.calls == 0
    assert errors["ours"] == errors["triton"]
    assert errors["ours"].startswith("Conflicting meta-parameters: BLOCK_SIZE.")
