"""autotune_cache.triton.install(): every spelling of triton.autotune routed through the cache.

The kernels are a fake third-party package (tests/triton/thirdparty_pkg) with real
@triton.autotune kernels, imported fresh in each test so that the test decides whether they are
decorated before or after the switch. They run on the CPU interpreter with a fake benchmark;
Triton's own autotuner could not tune them here (it benchmarks with the GPU driver)."""

from __future__ import annotations

import importlib
import sys
import threading
import types
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import triton
import triton.runtime
import triton.runtime.autotuner
from triton.runtime.autotuner import Autotuner as TritonAutotuner

from autotune_cache.formats import load_results
from autotune_cache.triton import (
    Autotuner,
    UnroutedKernelsWarning,
    autotune,
    install,
    installed,
    is_installed,
    uninstall,
)
from autotune_cache.triton import routing as routing
from tests.triton import kernels

PKG = "tests.triton.thirdparty_pkg"
TABLE = {16: 4.0, 32: 2.0, 64: 1.5, 128: 3.0}
SPELLINGS = ("scale_kernel", "add_kernel", "square_kernel", "accumulate_kernel")
ORIGINAL = triton.runtime.autotuner.autotune


@pytest.fixture(autouse=True)
def switched_off(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts and ends with the switch off, no package module loaded, nothing warned."""
    uninstall()
    monkeypatch.setattr(routing, "_warned", set())
    _forget_package()
    yield
    uninstall()
    _forget_package()


def _forget_package() -> None:
    for name in [n for n in sys.modules if n.startswith(PKG + ".")]:
        del sys.modules[name]


def fresh(module: str) -> types.ModuleType:
    """Import a module of the fake package anew: its kernels are decorated now."""
    sys.modules.pop(f"{PKG}.{module}", None)
    return importlib.import_module(f"{PKG}.{module}")


def spellings_of_triton() -> list[object]:
    from triton import autotune as imported_now

    return [triton.autotune, triton.runtime.autotune, triton.runtime.autotuner.autotune,
            imported_now]


def test_install_replaces_every_spelling_and_uninstall_restores_triton() -> None:
    assert spellings_of_triton() == [ORIGINAL] * 4
    install()
    assert is_installed()
    assert spellings_of_triton() == [routing.routed_autotune] * 4
    patched = list(routing._patched)
    install()  # idempotent: nothing is patched twice, so uninstall restores Triton's own
    assert routing._patched == patched
    uninstall()
    assert not is_installed()
    assert all(f is ORIGINAL for f in spellings_of_triton())
    uninstall()
    assert all(f is ORIGINAL for f in spellings_of_triton())


def test_installed_context_manager_restores_only_what_it_switched_on() -> None:
    with installed():
        with installed():
            assert triton.autotune is routing.routed_autotune
        assert triton.autotune is routing.routed_autotune  # the inner block found it on
    assert triton.autotune is ORIGINAL
    install()
    with installed():
        pass
    assert triton.autotune is routing.routed_autotune  # on before the block: stays on


def test_concurrent_install_and_uninstall_never_lose_tritons_decorator() -> None:
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def churn() -> None:
        try:
            barrier.wait()
            for _ in range(10):
                install()
                with installed():
                    pass
                uninstall()
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=churn) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    install()
    assert all(previous is ORIGINAL for _, previous in routing._patched)
    uninstall()
    assert all(f is ORIGINAL for f in spellings_of_triton())


def _run_all(spellings: types.ModuleType, attn_a: types.ModuleType,
             attn_b: types.ModuleType) -> None:
    """Every op of the package, checked against torch."""
    x = torch.arange(100, dtype=torch.float32)
    y = torch.ones(100)
    torch.testing.assert_close(spellings.scale(x), x * 3)
    torch.testing.assert_close(spellings.add(x, y), x + y)
    torch.testing.assert_close(spellings.square(x), x * x)
    torch.testing.assert_close(spellings.accumulate(x), x)  # the pre_hook zeroed the 7s
    torch.testing.assert_close(attn_a.forward(x), x + 1)
    torch.testing.assert_close(attn_b.forward(x), x + 1)


def _import_package() -> tuple[types.ModuleType, ...]:
    return fresh("spellings"), fresh("attn_a"), fresh("attn_b")


def test_routed_kernels_tune_through_the_cache_dump_and_reload_without_benchmarks(
        use_cache, fake, tmp_path: Path) -> None:
    dump = tmp_path / "thirdparty.autotune.textproto"
    cache = use_cache(dump_to=dump)
    bench = fake(TABLE)
    with installed():
        spellings, attn_a, attn_b = _import_package()
    for name in SPELLINGS:
        kernel = spellings.KERNELS[name]
        assert isinstance(kernel, Autotuner), f"{name} was not routed"
        assert kernel.kernel_name == f"{PKG}.spellings.{name}"
    assert attn_a._fwd_kernel.kernel_name == f"{PKG}.attn_a._fwd_kernel"
    assert attn_b._fwd_kernel.kernel_name == f"{PKG}.attn_b._fwd_kernel"
    _run_all(spellings, attn_a, attn_b)
    assert len(bench.calls) == 6 * len(TABLE)  # two _fwd_kernels: two tunings, not one
    assert cache.stats.kernels_served == {
        *(f"{PKG}.spellings.{n}" for n in SPELLINGS),
        f"{PKG}.attn_a._fwd_kernel", f"{PKG}.attn_b._fwd_kernel"}
    cache.close()
    kernels_in_dump = sorted(e.key.kernel for e in load_results(dump))
    assert kernels_in_dump == sorted(cache.stats.kernels_served)

    # A second process: the package imported again under the switch, the dump loaded strictly.
    cache = use_cache(load_from=(dump,), require_complete=True)
    bench = fake({})  # any benchmark would raise KeyError
    with installed():
        spellings, attn_a, attn_b = _import_package()
    _run_all(spellings, attn_a, attn_b)
    assert bench.calls == []
    assert (cache.stats.hits, cache.stats.misses, cache.stats.benchmarks) == (6, 0, 0)


def test_kernels_decorated_after_uninstall_are_tritons_again(use_cache) -> None:
    with installed():
        routed = fresh("attn_a")._fwd_kernel
    assert isinstance(routed, Autotuner)  # keeps our tuner after the switch is off
    plain = fresh("attn_a")._fwd_kernel
    assert isinstance(plain, TritonAutotuner) and not isinstance(plain, Autotuner)


def test_the_users_own_kernels_keep_their_plain_name(use_cache) -> None:
    """Committed caches of kernels decorated with autotune_cache.triton.autotune stay valid."""
    with installed():
        own = autotune(configs=kernels.configs(16, 32), key=["n"])(kernels.add_kernel)
        through_triton = triton.autotune(configs=kernels.configs(16, 32),
                                         key=["n"])(kernels.add_kernel)
    assert own.kernel_name == "add_kernel"
    assert through_triton.kernel_name == "tests.triton.kernels.add_kernel"


def test_kernels_decorated_before_install_are_named_in_a_warning_with_the_fix(
        use_cache) -> None:
    cache = use_cache()
    early = fresh("spellings")  # imported before the switch: Triton's own autotuners
    with pytest.warns(UnroutedKernelsWarning) as record:
        left = install()
    text = str(record[0].message)
    assert f"{PKG}.spellings used Triton's own triton.autotune before" in text
    for name in SPELLINGS:
        assert f"  {PKG}.spellings.{name}\n" in text
        assert type(early.KERNELS[name]) is TritonAutotuner  # not adopted
    assert f"{PKG}.spellings.autotune: Triton's decorator, imported by name" in text
    assert "call install() before importing them" in text
    assert "AUTOTUNE_FLAGS=--autotune_all_kernels" in text
    assert {u.kernel for u in left if u.kernel} == {f"{PKG}.spellings.{n}" for n in SPELLINGS}
    assert cache.stats.kernels_on_triton == {f"{PKG}.spellings.{n}" for n in SPELLINGS}
    assert "4 autotuned kernel(s) stayed on Triton's own autotuner" in cache.stats.summary_line()
    assert cache.stats.as_dict()["kernels_on_triton"] == sorted(cache.stats.kernels_on_triton)

    # A module imported after the switch is routed and named nowhere; the early one is named once.
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnroutedKernelsWarning)
        install()
        assert isinstance(fresh("attn_b")._fwd_kernel, Autotuner)
