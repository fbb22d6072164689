"""Plain @triton.jit warm-ups (triton/warmups.py): a dump run records the specializations it
compiled; a loaded run compiles them ahead, each once, and never a stale one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import triton

from autotune_cache import get_cache
from autotune_cache.cli import main as cli_main
from autotune_cache.formats import load_results
from autotune_cache.foundation.key import CacheKey, is_warmup
from autotune_cache.resultsets.ours import WARMUP_LABEL
from autotune_cache.triton import autotune, hooks, warmups
from autotune_cache.triton.compile import portable_specialization
from tests.triton import kernels

ROOT = Path(__file__).resolve().parents[2]
PLAIN = "tests.triton.test_warmups.plain_kernel"


@triton.jit
def plain_kernel(x_ptr):  # launched plainly only: no test wraps it in a tuner
    pass


def _worker(phase: str, results: Path, cache_dir: Path, **extra: str) -> dict:
    # Nothing of Triton's or ours that another test left in this process's environment
    # (a remote compile cache's variables, say) reaches the child.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "AUTOTUNE_"))}
    env.update(TRITON_CACHE_DIR=str(cache_dir), AUTOTUNE_FLAGS="", AUTOTUNE_PROGRESS="0",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
               **extra)
    proc = subprocess.run([sys.executable, "-m", "tests.triton.warmup_worker", phase,
                           str(results)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_real_plain_jit_specializations_are_recorded_then_compiled_ahead(tmp_path):
    """Triton's real compiler for sm_90 on the CPU. The dump keeps the plain kernel's two
    specializations, not the compiles of our tuner's kernel or of Triton's own autotuner. A
    fresh process with an empty compile cache compiles both on the pool, started by its first
    compile of another kernel (on its threads, in this process: nothing is forked), and its
    own compiles of them run no ptxas. While no pool thread
    may start, each launch runs its queued warm-up itself: still one compile each. A changed
    kernel source compiles nothing ahead."""
    results = tmp_path / "r.textproto"
    add = "tests.triton.kernels.add_kernel"
    dumped = _worker("dump", results, tmp_path / "tc-dump")
    assert dumped == {"written": 2, "warmups": [add, add], "with_specs": True, "recorded": 2}
    assert "libdevice" not in results.read_text()  # no machine's path in a committed file

    on_pool = _worker("load-waited", results, tmp_path / "tc-load")
    assert on_pool == {"queued_ok": [True, True], "launch_compiles": [True, True],
                       "ptxas": [["add_kernel", "pool"], ["add_kernel", "pool"],
                                 ["double_in_place_kernel", "MainThread"]],
                       "warmups_ahead": 2, "split": 0, "summary_mentions": True}
    # The same with the pool's back ends in compile processes (the default): this process runs
    # ptxas only for the launch nothing was queued for.
    split = _worker("load-waited", results, tmp_path / "tc-split", WARMUP_TEST_PROCESSES="1")
    assert split == {**on_pool, "ptxas": [["double_in_place_kernel", "MainThread"]], "split": 2}

    # While the process does its own work instead of waiting, the pool's threads run the
    # compiles all the same.
    threads = _worker("load", results, tmp_path / "tc-threads")
    assert threads["ptxas"] == [["add_kernel", "pool"], ["add_kernel", "pool"],
                                ["double_in_place_kernel", "MainThread"]]
    assert threads["launch_compiles"] == [True, True] and threads["warmups_ahead"] == 2

    held = _worker("load-held", results, tmp_path / "tc-held")
    assert held["ptxas"] == [["add_kernel", "MainThread"], ["add_kernel", "MainThread"],
                             ["double_in_place_kernel", "MainThread"]]
    assert held["warmups_ahead"] == 2

    # A regeneration in place (the ini setup loads the file, the dump rewrites it): the
    # warm-ups compile on the pool into the compile cache only, so the launches still compile
    # them (compile-cache hits, no ptxas) and the new dump records them with the run's own.
    regen = _worker("regen", results, tmp_path / "tc-regen")
    assert regen["queued_ok"] == [True, True] and regen["warmups_ahead"] == 2
    assert regen["ptxas"] == [["add_kernel", "pool"], ["add_kernel", "pool"],
                              ["double_in_place_kernel", "MainThread"]]
    dip = "tests.triton.kernels.double_in_place_kernel"
    assert regen["warmups"] == [add, add, dip] and regen["recorded"] == 3
    assert regen["written"] == 3

    # The same regen after the kernel's source fingerprint changed (an edit, a Triton upgrade):
    # the recorded warm-ups no longer match, but a compile-cache-only compile cannot be used
    # unseen, so they are compiled ahead all the same (of the current source); the launches find
    # them, and the dump records them under the new fingerprint.
    edited = _worker("regen", results, tmp_path / "tc-regen-edited", WARMUP_TEST_SOURCE="edited")
    assert edited["queued_ok"] == [True, True] and edited["warmups_ahead"] == 2
    assert edited["ptxas"] == regen["ptxas"]
    assert edited["warmups"] == [add, add, dip] and edited["fingerprints"] == ["edited"]

    stale = _worker("load", results, tmp_path / "tc-stale", WARMUP_TEST_SOURCE="edited")
    assert stale["queued_ok"] == [] and stale["warmups_ahead"] == 0
    assert stale["ptxas"] == [["add_kernel", "MainThread"], ["add_kernel", "MainThread"],
                              ["double_in_place_kernel", "MainThread"]]


def _spec(libs: list) -> str:
    return json.dumps({"name": "k", "options": {"num_warps": 4, "extern_libs": libs},
                       "key": "[('*fp32', 'D')]"})


def test_recorded_specializations_name_no_path_of_this_machine():
    """Triton's default libdevice (under its own package) is left out, for the loading machine
    to fill in its own; a library the user named is kept; anything unreadable is kept as is."""
    default = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "lib",
                           "libdevice.10.bc")
    mine = "/opt/my/libextra.bc"
    assert json.loads(portable_specialization(_spec([["libdevice", default]]))) == {
        "name": "k", "options": {"num_warps": 4, "extern_libs": None},
        "key": "[('*fp32', 'D')]"}
    kept = portable_specialization(_spec([["libdevice", default], ["extra", mine]]))
    assert json.loads(kept)["options"]["extern_libs"] == [["extra", mine]]
    assert portable_specialization(_spec([["extra", mine]])) == _spec([["extra", mine]])
    assert portable_specialization("not json") == "not json"


def _compile_event(jit_fn: object, spec: str) -> None:
    hooks._dispatch(key="k", fn=SimpleNamespace(jit_function=jit_fn),
                  compile={"key": "k", "specialization_data": spec}, is_manual_warmup=False)


def test_warmups_go_to_the_dump_only(use_cache, tmp_path):
    """A recorded warm-up is written to the dump (once, however often it compiles) and never to
    the shared cache directory; compiles of a kernel our tuner drives, and of a function no
    later process can find by name, are not recorded."""
    dump = tmp_path / "dump.textproto"
    use_cache(dump_to=dump, cache_dir=tmp_path / "shared")
    spec = _spec([])
    _compile_event(plain_kernel, spec)
    _compile_event(plain_kernel, spec)

    @triton.jit
    def local_kernel(x_ptr):
        pass

    _compile_event(local_kernel, spec)
    tuner = autotune(configs=kernels.configs(16), key=["n"])(kernels.accumulate_kernel)
    _compile_event(kernels.accumulate_kernel, spec)
    assert get_cache().finish_dump() == 1
    (entry,) = load_results(dump)
    key = CacheKey.from_proto(entry.key)
    assert is_warmup(key) and key.kernel == PLAIN
    assert entry.result.triton_specialization == spec
    assert not any(p.is_file() for p in (tmp_path / "shared").rglob("*"))
    assert get_cache().stats.warmups_recorded == 1
    assert tuner.fn is kernels.accumulate_kernel


def test_a_process_that_loads_nothing_leaves_compiles_alone(use_cache, monkeypatch):
    """No dump and no loaded file: the hook records nothing and starts nothing."""
    use_cache()
    _compile_event(plain_kernel, _spec([]))
    state = warmups._current()
    assert not state.record and not state.load and not state.started
    assert get_cache().stats.warmups_recorded == 0


def test_resolving_names_never_imports(monkeypatch):
    """A loaded name resolves only through modules already imported: a module not imported yet
    is looked for again later; a name that is a tuner, not a plain JIT function, is done."""
    plain = SimpleNamespace(fn=lambda: None, preload=lambda spec: None)  # a JIT function
    monkeypatch.setattr(kernels, "plain", plain, raising=False)
    assert warmups._resolve("tests.triton.kernels.plain") is plain
    assert warmups._resolve("no_such_package_xyz.kernel") is warmups._UNKNOWN
    assert "no_such_package_xyz" not in sys.modules
    monkeypatch.setattr(kernels, "a_tuner", autotune(configs=kernels.configs(16), key=["n"])(
        kernels.double_in_place_kernel), raising=False)
    assert warmups._resolve("tests.triton.kernels.a_tuner") is None
    assert warmups._resolve("tests.triton.kernels.not_defined_yet") is warmups._UNKNOWN


def wrapped_kernel() -> None:
    """The Python function of the JIT function a library's launch wrapper holds (below)."""


def test_a_jit_function_inside_a_library_launch_wrapper_resolves(monkeypatch):
    """A library may hold its kernels in a launch wrapper of its own (FlagGems' LibEntry keeps
    the JIT function as `.fn`): the recorded name resolves to that JIT function, and only when
    it is the one the name names."""
    jit = SimpleNamespace(fn=wrapped_kernel, preload=lambda spec: None)  # a JIT function
    monkeypatch.setattr(sys.modules[__name__], "wrapped_kernel", SimpleNamespace(fn=jit))
    assert warmups._resolve(f"{__name__}.wrapped_kernel") is jit
    monkeypatch.setattr(kernels, "wrapped", SimpleNamespace(fn=jit), raising=False)
    assert warmups._resolve("tests.triton.kernels.wrapped") is None  # another function's


def test_inspect_names_warmups_as_such(use_cache, tmp_path, capsys):
    """`autotune-cache inspect` labels a warm-up entry instead of printing an empty config."""
    dump = tmp_path / "dump.textproto"
    use_cache(dump_to=dump)
    _compile_event(plain_kernel, _spec([]))
    get_cache().finish_dump()
    capsys.readouterr()
    assert cli_main(["inspect", str(dump)]) == 0
    assert WARMUP_LABEL in capsys.readouterr().out


@pytest.fixture(autouse=True)
def _fresh_state():
    warmups._process = None
    yield
    warmups._process = None
