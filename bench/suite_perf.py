"""A real library's own pytest suite, routed through the cache, pass by pass (issues 21, 24, 38).

    python bench/suite_perf.py OUT_DIR --suite liger|fla --tests-root DIR [--passes ...]
        [--pass-timeout S] [--redis-server PATH]
    python bench/suite_perf.py OUT_DIR --smoke        # CPU: the in-repo fake library

Every pass is one `python -m pytest` of the same selection of the library's own tests, in a
fresh process tree (its own session) with its own TRITON_CACHE_DIR; third-party kernels are
routed through the cache with the plugin's `--autotune-all-kernels` (the switch of
autotune_cache/triton/routing.py), never with a shim:

  P         plain Triton, empty caches (a fresh CI sandbox today). TRITON_CACHE_AUTOTUNING=1, so
            Triton also writes its own results cache, which W needs; tuning is the same.
  W         plain Triton again, on a copy of P's compile cache, with `cache_results` on: Triton's
            best case, nothing to tune and nothing to compile (the floor).
  S-cold    ours, dumping (`--autotune-dump`), empty caches: the regen.
  S-load    ours, loading S-cold's file with `--autotune-require-complete`, empty compile cache:
            a fresh sandbox with this product. Must benchmark nothing.
  S-fill    S-load plus `--autotune_remote_cache` and `--autotune_remote_compile_cache` on a
            local redis-server: the first machine of a fleet, which fills the shared compile
            cache (reported, not a target).
  S-shared  the same again with another empty local compile cache: the second machine.
  S-regen   a regeneration in place after one kernel's candidate list changed: the ini setup
            (load the committed file, S-cold's dump) plus `--autotune-dump` of that same file,
            empty compile cache. The change is made in the file, not in the library: for one
            tuned kernel (the first by name with two or more candidates) every entry loses the
            timing of one candidate that did not win and gets the fingerprint of the shorter
            list, which is what the file holds after a config is appended to the kernel's
            `configs`. So the run must benchmark exactly that candidate once per entry that its
            tests launch and serve everything else (`regen` in the JSON: the kernel, the entries
            edited, the file's entries before and after; a regen never shrinks the file).
  S-stale   a regeneration in place after a Triton upgrade: S-cold's dump with every entry's
            Triton version replaced by STALE_TRITON, loaded and dumped again in place, empty
            compile cache. Every key is stale, so everything is tuned again, as in S-cold; what
            differs is that the file's plain @triton.jit warm-ups are compiled ahead from the
            start (`stale` in the JSON: the entries before and after, and how many name the
            running Triton after). Its target is S-cold's, against P. A best case: only the
            keys' Triton version is aged, so every recorded specialization is still the running
            Triton's and each warm-up compiled ahead is a hit; after a real upgrade whose
            options changed, fewer are (and from Triton 3.6 to 3.9, whose records differ in
            form, none: their preloads fail at once).
  S-load-B, S-stale-B  S-load and S-stale again, each right after its A, with `--b-flags` added
            to AUTOTUNE_FLAGS: an A/B of a flag inside one run, against the same P and W.

The passes' outcomes must be identical test by test (passed / failed / skipped / error, each
test against P's). The probe plugin (bench/suite_probe.py) records each test's outcome and
time and where the process's time went (start-up, collection, CUDA start, triton.compile,
launcher builds, Triton's benchmarks, our lookups), and our cache's stats. Compiles are counted
as the cubins (or, on the interpreter, none) that appear in the pass's TRITON_CACHE_DIR.

Writes OUT_DIR/suite_perf_<suite>.json and .md (per test and in total, the ratios of this run,
the targets of issue 24, and the profile of S-load against W) and OUT_DIR/suite_perf_<suite>_logs
.txt (every pass's output). --smoke runs the fake library (bench/suite_fake) on the CPU
interpreter (TRITON_INTERPRET=1); CI checks that the runner works, never its numbers.

The libraries' test files come from their repositories at the wheel's tag, e.g.
`git -C Liger-Kernel archive v0.8.2 test | tar -x -C DIR` (see SUITES for what each pass runs);
the wheels (`pip download --no-deps liger-kernel==0.8.2 fla-core==0.5.2 redis==8.1.0`) are
installed where the test processes import them (PYTHONPATH).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
# bench/ is not a package: gpu_perf's py-spy wrapper (--profile) and throwaway redis-server.
from gpu_perf import find_redis_binary, py_spy, py_spy_wrap, redis_server  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
DUMP_NAME = "suite.autotune.textproto"
REGEN_NAME = "suite.regen.autotune.textproto"
STALE_NAME = "suite.stale.autotune.textproto"
STALE_TRITON = "0.0.1"  # the Triton S-stale's file claims its entries were tuned with
PASSES = ("P", "W", "S-cold", "S-load", "S-load-B", "S-fill", "S-shared", "S-regen", "S-stale",
          "S-stale-B")
# (pass, the pass it is compared with, the most the ratio may be): the performance targets.
TARGETS = (("S-cold", "P", 0.30), ("S-load", "W", 1.0), ("S-load-B", "W", 1.0),
           ("S-shared", "W", 0.75), ("S-regen", "W", 1.5), ("S-regen", "S-load", 1.2),
           ("S-stale", "P", 0.30), ("S-stale-B", "P", 0.30))


@dataclass(frozen=True)
class Suite:
    """A library and the part of its own test suite each pass runs."""

    name: str
    library: str  # what was installed, for the record
    source: str  # where the test files come from
    args: tuple[str, ...]  # pytest arguments: files, -k selections (parametrizations cut)
    pythonpath: tuple[str, ...] = (".",)  # relative to the tests root
    env: dict[str, str] = field(default_factory=dict)
    # The variable naming the library's own persistent tuning cache, if it keeps one: each pass
    # gets it inside its TRITON_CACHE_DIR, so W (a copy of P's) has it warm and S-load empty.
    own_cache_env: str = ""


SUITES: dict[str, Suite] = {
    "fake": Suite("fake", "bench/suite_fake/fakelib (in this repo)", "bench/suite_fake/tests",
                  ("tests",)),
    # Liger-Kernel: the DyT and fused-MoE kernels (@triton.autotune over 18, 32 and up to 40
    # configs). Cut to fit one device command with every pass: DyT with beta at hidden size
    # 4096, the MoE routing-metadata tests and two forward edge cases (one (H, I) key).
    "liger": Suite(
        "liger", "liger-kernel==0.8.2 (PyPI wheel)", "linkedin/Liger-Kernel@v0.8.2 test/",
        ("test/transformers/test_dyt.py::test_liger_dyt_correctness",
         "test/transformers/test_fused_moe.py",
         "-k", "(test_liger_dyt_correctness and True and 4096) or routing_metadata or "
               "single_token or K_equals_E")),
    # flash-linear-attention: the activations (sigmoid, swish, SwiGLU: forward and backward
    # kernels, 30 configs each), layer norm, RMS norm and token shift of fla.modules (autotuned
    # over block size / num_warps / num_stages, keyed by the hidden size; FLA itself passes
    # cache_results=True). One shape per kernel family, no torch.compile: the first selection
    # (30 tests) needed over 200 s for P alone.
    # l2norm is tuned by FLA's own `fla_cache_autotune` (a CachedAutotuner(Autotuner) built
    # directly, not through triton.autotune), routed by the switch since issue 35
    # (triton/classroute.py); the census in the report shows what stays on Triton.
    "fla": Suite(
        "fla", "fla-core==0.5.2 (PyPI wheel)", "fla-org/flash-linear-attention@v0.5.2 tests/",
        ("tests/modules/test_activation.py::test_sigmoid[2-500-128-False-False]",
         "tests/modules/test_activation.py::test_swish[2-512-128-False-False]",
         "tests/modules/test_activation.py::test_swiglu[2-512-128-False-False]",
         "tests/modules/test_layernorm.py::test_layernorm[True-True-64-512-2-2]",
         "tests/modules/test_layernorm.py::test_rmsnorm[64-512-2-2]",
         "tests/modules/test_token_shift.py::test_token_shift[dtype0-None-2560-512-4]",
         "tests/modules/test_l2norm.py::test_l2norm[B2-T500-H4-D64-torch.float32]",
         "tests/modules/test_l2norm.py::test_l2norm[B4-T1024-H5-D1024-torch.float16]")),
    # FlagGems: reductions tuned by its LibTuner (a subclass of Triton's Autotuner whose run()
    # never calls Triton's; keys by its own strategies, keeps picks in sqlite), so they are
    # seeded through their memo (triton/seeding.py), not routed. Quick mode.
    "flaggems": Suite(
        "flaggems", "flag_gems==5.0.2 (PyPI wheel; sqlalchemy 2.0.48)",
        "FlagOpen/FlagGems tests/ (its repository's stored snapshot)",
        ("tests/test_general_reduction_ops.py", "--mode", "quick", "-k",
         "sum or mean or max or min or prod or all or any"),
        own_cache_env="FLAGGEMS_CACHE_DIR"),
}


@dataclass
class Pass:
    """One pass's configuration and what it measured."""

    name: str
    options: list[str]
    flags: str = ""
    env: dict[str, str] = field(default_factory=dict)
    wall_s: float | None = None
    rc: int | None = None
    probe: dict[str, Any] = field(default_factory=dict)
    compiles: int = 0
    skipped: str = ""


def _has_entry_point_plugin() -> bool:
    try:
        eps = importlib.metadata.entry_points(group="pytest11")
    except Exception:  # noqa: BLE001 - broken metadata: load the plugin explicitly
        return False
    return any(ep.value == "autotune_cache.pytest_plugin" for ep in eps)


def count_compiles(cache_dir: Path, interpret: bool) -> int:
    """Kernels compiled into a Triton cache directory: its cubins (none on the interpreter)."""
    if interpret or not cache_dir.is_dir():
        return 0
    return sum(1 for _ in cache_dir.rglob("*.cubin"))


class Runner:
    def __init__(self, suite: Suite, tests_root: Path, out: Path, work: Path, smoke: bool,
                 timeout: float, deadline: float) -> None:
        self.suite, self.tests_root, self.out, self.work = suite, tests_root, out, work
        self.smoke, self.timeout, self.deadline = smoke, timeout, deadline
        self.log = out / f"suite_perf_{suite.name}_logs.txt"
        self.log.write_text("")
        self.plugin_args = ([] if _has_entry_point_plugin()
                            else ["-p", "autotune_cache.pytest_plugin"])
        # --profile: the passes to run under py-spy (gpu_perf's py_spy_wrap), and its binary.
        self.profile: set[str] = set()
        self.py_spy = ""
        # --autotune-flags: AUTOTUNE_FLAGS every S pass gets after its own (an A/B of a flag).
        self.extra_flags = ""
        # --b-flags: AUTOTUNE_FLAGS the B passes (S-load-B, S-stale-B) get after their own.
        self.b_flags = ""

    def env(self, p: Pass, cache_dir: Path) -> dict[str, str]:
        drop = ("AUTOTUNE_FLAGS", "TRITON_CACHE_DIR", "TRITON_CACHE_AUTOTUNING", "PYTEST_ADDOPTS")
        env = {k: v for k, v in os.environ.items() if k not in drop}
        paths = [str(ROOT), str(BENCH), *(str(self.tests_root / p) for p in self.suite.pythonpath),
                 *filter(None, [os.environ.get("PYTHONPATH")])]
        env.update(self.suite.env)
        # AUTOTUNE_PROGRESS as a user has it (unset: a tuning over a second says so, and its
        # last line says where its time went), so the log is the tunings' profile.
        env.pop("AUTOTUNE_PROGRESS", None)
        env.update(PYTHONPATH=os.pathsep.join(paths),
                   TRITON_CACHE_DIR=str(cache_dir), PYTHONUNBUFFERED="1",
                   SUITE_PROBE_OUT=str(self.work / f"probe-{p.name}.json"))
        if self.suite.own_cache_env:
            env[self.suite.own_cache_env] = str(cache_dir / "library-own-cache")
        if p.flags:
            env["AUTOTUNE_FLAGS"] = p.flags
        if self.smoke:
            env["TRITON_INTERPRET"] = "1"
        env.update(p.env)
        return env

    def run(self, p: Pass, cache_dir: Path) -> Pass:
        timeout = min(self.timeout, self.deadline - time.monotonic())
        if timeout < 10:
            p.skipped = "not started: the run's --deadline would pass"
            print(f"[suite_perf] {self.suite.name} {p.name}: {p.skipped}", flush=True)
            return p
        cmd = [sys.executable, "-m", "pytest", "-p", "suite_probe", *self.plugin_args, "-q",
               "-p", "no:cacheprovider", "-o", "addopts=", "-o", "log_cli=false",
               "--rootdir", str(self.tests_root), *self.suite.args, *p.options]
        if self.extra_flags and p.name.startswith("S-"):
            p.flags = " ".join(filter(None, [p.flags, self.extra_flags]))  # in the raw record
        env = self.env(p, cache_dir)
        if p.name in self.profile:
            cmd = py_spy_wrap(self.py_spy, cmd, self.out / f"profile-{p.name}.txt")
        env["SUITE_PROBE_T0"] = repr(time.time())
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=self.tests_root, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            output += f"\n[suite_perf: killed after {timeout:.0f} s]\n"
        p.wall_s = round(time.perf_counter() - start, 3)
        p.rc = proc.returncode
        with contextlib.suppress(ProcessLookupError):  # the fresh tree ends with its pass
            os.killpg(proc.pid, signal.SIGKILL)
        probe = self.work / f"probe-{p.name}.json"
        p.probe = json.loads(probe.read_text()) if probe.exists() else {}
        p.probe.setdefault("marks", {})["t0"] = float(env["SUITE_PROBE_T0"])
        with self.log.open("a") as f:
            shown = {k: v for k, v in env.items() if k in ("AUTOTUNE_FLAGS", "TRITON_CACHE_DIR",
                                                            "TRITON_CACHE_AUTOTUNING",
                                                            "TRITON_INTERPRET")}
            f.write(f"===== {p.name}\n$ {' '.join(cmd)}\n{json.dumps(shown)}\n"
                    f"rc={p.rc} wall={p.wall_s}s\n{output}\n")
        print(f"[suite_perf] {self.suite.name} {p.name}: rc={p.rc} wall={p.wall_s:.1f}s "
              f"tests={len(p.probe.get('tests', {}))}", flush=True)
        return p


def run_passes(runner: Runner, names: list[str], redis_binary: str | None) -> dict[str, Pass]:
    work = runner.work
    dump = runner.out / DUMP_NAME
    caches = {n: work / f"triton-cache-{n}" for n in PASSES}
    load = ["--autotune-all-kernels", f"--autotune-load={dump}", "--autotune-require-complete"]
    passes: dict[str, Pass] = {}
    if "P" in names or "W" in names:
        passes["P"] = runner.run(Pass("P", [], env={"TRITON_CACHE_AUTOTUNING": "1"}), caches["P"])
    if "W" in names:
        before = count_compiles(caches["P"], runner.smoke)
        caches["P"].mkdir(parents=True, exist_ok=True)  # the interpreter writes nothing
        shutil.copytree(caches["P"], caches["W"], dirs_exist_ok=True)
        w = runner.run(Pass("W", [], env={"TRITON_CACHE_AUTOTUNING": "1"}), caches["W"])
        w.compiles = count_compiles(caches["W"], runner.smoke) - before
        passes["W"] = w
    if "P" in passes:
        passes["P"].compiles = count_compiles(caches["P"], runner.smoke)
    if any(n.startswith("S-") for n in names):
        dump.unlink(missing_ok=True)
        passes["S-cold"] = runner.run(
            Pass("S-cold", ["--autotune-all-kernels", f"--autotune-dump={dump}"]),
            caches["S-cold"])
    if "S-load" in names:
        passes["S-load"] = runner.run(Pass("S-load", list(load)), caches["S-load"])
    if "S-load-B" in names:
        passes["S-load-B"] = runner.run(Pass("S-load-B", list(load), flags=runner.b_flags),
                                        caches["S-load-B"])
    if "S-shared" in names or "S-fill" in names:
        if redis_binary is None:
            for n in ("S-fill", "S-shared"):
                passes[n] = Pass(n, [], skipped="no redis-server (--redis-server, PATH or .whl/)")
        else:
            with redis_server(redis_binary, work) as url:
                flags = f"--autotune_remote_cache={url} --autotune_remote_compile_cache"
                for n in ("S-fill", "S-shared"):
                    passes[n] = runner.run(Pass(n, list(load), flags=flags), caches[n])
    if "S-regen" in names:
        passes["S-regen"] = regen_pass(runner, dump, caches["S-regen"])
    if "S-stale" in names:
        passes["S-stale"] = stale_pass(runner, dump, caches["S-stale"])
    if "S-stale-B" in names:
        passes["S-stale-B"] = stale_pass(runner, dump, caches["S-stale-B"], "S-stale-B",
                                         runner.b_flags)
    for n, p in passes.items():
        if n != "W" and not p.skipped:
            p.compiles = count_compiles(caches[n], runner.smoke)
    return passes


def regen_pass(runner: Runner, dump: Path, cache_dir: Path) -> Pass:
    """S-regen: S-cold's dump, one kernel's candidate list changed in it (`edit_candidates`),
    loaded and dumped again in place."""
    if not dump.is_file():
        return Pass("S-regen", [], skipped="S-cold wrote no dump")
    regen = runner.out / REGEN_NAME
    edit = edit_candidates(dump, regen)
    if edit is None:
        return Pass("S-regen", [], skipped="no tuned kernel in the dump has two candidates")
    p, after = _in_place(runner, "S-regen", regen, cache_dir, edit)
    edit["edited_restored"] = sum(
        1 for e in after if e.key.kernel == edit["kernel"]
        and len(e.result.candidates) == edit["candidates"])
    return p


def stale_pass(runner: Runner, dump: Path, cache_dir: Path, name: str = "S-stale",
               flags: str = "") -> Pass:
    """S-stale (or S-stale-B, with `flags`): S-cold's dump as an older Triton would have
    written it (`age_toolchain`), loaded and dumped again in place."""
    if not dump.is_file():
        return Pass(name, [], skipped="S-cold wrote no dump")
    stale = runner.out / STALE_NAME.replace("stale", name.removeprefix("S-").lower())
    edit = age_toolchain(dump, stale)
    p, after = _in_place(runner, name, stale, cache_dir, edit, flags)
    edit["entries_still_old"] = sum(1 for e in after for v in e.key.toolchain
                                    if v.name == "triton" and v.version == STALE_TRITON)
    return p


def _in_place(runner: Runner, name: str, results: Path, cache_dir: Path,
              edit: dict[str, Any], flags: str = "") -> tuple[Pass, list[Any]]:
    """Pass `name`: `results` loaded and dumped again in place (the ini setup plus
    `--autotune-dump` of the same file), empty compile cache. Returns the pass and the file's
    entries after it; `edit` (what was changed in the file, and `entries_after`) is the pass's
    record under its name without `S-` (summarize reads it there)."""
    p = runner.run(Pass(name, ["--autotune-all-kernels", f"--autotune-load={results}",
                               f"--autotune-dump={results}"], flags=flags), cache_dir)
    from autotune_cache.formats import load_results

    after = load_results(results) if results.is_file() else []
    edit["entries_after"] = len(after)
    p.probe[name.removeprefix("S-").removesuffix("-B").lower()] = edit
    return p, after


def age_toolchain(source: Path, target: Path) -> dict[str, Any]:
    """Write `source`'s entries to `target` with the Triton version of every key replaced by
    STALE_TRITON: the committed file as it stands when a repository upgrades Triton."""
    from autotune_cache.formats import load_results, save_results

    entries = load_results(source)
    for entry in entries:
        for version in entry.key.toolchain:
            if version.name == "triton":
                version.version = STALE_TRITON
    save_results(target, entries)
    return {"entries_before": len(entries)}


def edit_candidates(source: Path, target: Path) -> dict[str, Any] | None:
    """Write `source`'s entries to `target` as they would be had one tuned kernel's candidate
    list been one config shorter when they were tuned (so that the kernel's current list has
    one new config): the first kernel by name whose entries time two or more candidates loses,
    in each of its entries, the timing of its last candidate that is not the winner, and its
    candidate-list fingerprint becomes that of the shorter list. None when no kernel has two."""
    import hashlib

    from autotune_cache.formats import load_results, save_results
    from autotune_cache.foundation.key import CacheKey, is_warmup
    from autotune_cache.triton.configs import canonical_proto_config

    entries = load_results(source)
    tuned = sorted({e.key.kernel for e in entries if len(e.result.candidates) >= 2
                    and not is_warmup(CacheKey.from_proto(e.key))})
    if not tuned:
        return None
    kernel, edited, candidates = tuned[0], 0, 0
    for entry in entries:
        if entry.key.kernel != kernel:
            continue
        winner = canonical_proto_config(entry.result.config)
        losers = [i for i, t in enumerate(entry.result.candidates)
                  if canonical_proto_config(t.config) != winner]
        if not losers:  # one candidate (a pruned list): nothing to take away
            continue
        candidates = max(candidates, len(entry.result.candidates))
        del entry.result.candidates[losers[-1]]
        texts = sorted(canonical_proto_config(t.config) for t in entry.result.candidates)
        entry.key.configs_fingerprint = hashlib.sha256("\n".join(texts).encode()).hexdigest()
        edited += 1
    save_results(target, entries)
    return {"kernel": kernel, "entries_edited": edited, "candidates": candidates,
            "entries_before": len(entries)}


def _num(value: Any, key: str, default: float = 0.0) -> float:
    return float((value or {}).get(key, default) or 0.0)


def complete(p: Pass) -> bool:
    """The pass ran its pytest session to the end (a killed pass has no probe record)."""
    return not p.skipped and p.wall_s is not None and bool(p.probe.get("tests"))


def summarize(passes: dict[str, Pass]) -> dict[str, Any]:
    """Totals, ratios, the outcome check and the profile, from the passes' records."""
    ran = {n: p for n, p in passes.items() if complete(p)}
    reference = ran.get("P") or next(iter(ran.values()), None)
    ref_outcomes = {t: v.get("outcome") for t, v in (reference.probe.get("tests", {})
                                                      if reference else {}).items()}
    totals: dict[str, Any] = {}
    for n, p in passes.items():
        if n not in ran:
            totals[n] = {"skipped": p.skipped or f"killed or crashed (rc={p.rc}) after "
                                                  f"{p.wall_s:.0f} s, before its session ended"}
            continue
        tests = p.probe.get("tests", {})
        outcomes = {t: v.get("outcome") for t, v in tests.items()}
        counts: dict[str, int] = {}
        for o in outcomes.values():
            counts[o or "unknown"] = counts.get(o or "unknown", 0) + 1
        differ = sorted(t for t in set(ref_outcomes) | set(outcomes)
                        if ref_outcomes.get(t) != outcomes.get(t))
        timers = p.probe.get("timers", {})
        ours = p.probe.get("ours") or {}
        marks = p.probe.get("marks", {})
        totals[n] = {
            "wall_s": p.wall_s, "rc": p.rc,
            "inside_pytest_s": round(_num(marks, "collection_s") + _num(marks, "tests_s"), 3),
            "outcomes": counts, "outcomes_differ_from_P": differ,
            "benchmarks_triton": int(_num(timers.get("triton_autotuner_bench"), "calls")),
            "benchmarks_ours": int(ours.get("benchmarks", 0)),
            "hits": int(ours.get("hits", 0)), "misses": int(ours.get("misses", 0)),
            "tuned": int(ours.get("tuned", 0)), "compiles": p.compiles,
            "triton_compile_calls": int(_num(timers.get("triton_compile"), "calls")),
            "launcher_builds": int(_num(timers.get("launcher_build"), "calls")),
            "kernels_served": ours.get("kernels_served"),
            "kernels_on_triton": ours.get("kernels_on_triton"),
            "census": census_summary(p.probe.get("census") or []),
        }
    ratios: dict[str, Any] = {}
    for n, base, target in TARGETS:
        a, b = ran.get(n), ran.get(base)
        if a and b and b.wall_s:
            value = a.wall_s / b.wall_s
            ratios[f"{n} vs {base}"] = {"pass": n, "vs": base, "ratio": round(value, 3),
                                        "target": target, "met": value <= target}
    return {"totals": totals, "ratios": ratios, "profile": profile(ran),
            "identical_outcomes": all(not t.get("outcomes_differ_from_P")
                                      for t in totals.values() if "wall_s" in t),
            "s_load_benchmarks": (totals.get("S-load", {}).get("benchmarks_ours", 0)
                                  + totals.get("S-load", {}).get("benchmarks_triton", 0))
            if "S-load" in ran else None,
            "regen": ran["S-regen"].probe.get("regen") if "S-regen" in ran else None,
            "stale": ran["S-stale"].probe.get("stale") if "S-stale" in ran else None}


def census_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A pass's census (suite_probe._census): tuners by owner, how many of each ran, by class,
    and the ones left on Triton's autotuner that ran (the kernels that bypassed the cache)."""
    by_owner: dict[str, dict[str, int]] = {}
    by_class: dict[str, dict[str, int]] = {}
    for row in rows:
        for table, name in ((by_owner, row["owner"]), (by_class, f"{row['kind']} "
                                                                  f"({row['owner']})")):
            counts = table.setdefault(name, {"alive": 0, "ran": 0})
            counts["alive"] += 1
            counts["ran"] += bool(row["ran"])
    return {"tuners": len(rows), "by_owner": by_owner, "by_class": by_class,
            "triton_ran": sorted(r["kernel"] for r in rows
                                 if r["owner"] == "triton" and r["ran"])}


def _mark(name: str) -> Any:
    return lambda p: _num(p.probe.get("marks"), name)


def _timer(name: str) -> Any:
    return lambda p: _num(p.probe.get("timers", {}).get(name), "seconds")


def _exit_s(p: Pass) -> float:
    marks = p.probe.get("marks") or {}
    if "finished_at" not in marks or "t0" not in marks or p.wall_s is None:
        return 0.0
    return max(0.0, marks["t0"] + p.wall_s - marks["finished_at"])


def _events(p: Pass, kind: str, main_only: bool = False) -> list[list[Any]]:
    """The probe's timeline events of one kind ("job", "wait"): [kind, label, thread, queued,
    start, end], seconds since the pass's start; `main_only`: on the main thread."""
    return [e for e in p.probe.get("events") or []
            if e[0] == kind and (not main_only or e[2] == "MainThread")]


def _jobs(main_only: bool = False) -> Any:
    return lambda p: len(_events(p, "job", main_only))


def _last_job_end(p: Pass) -> float:
    return max((e[5] for e in _events(p, "job")), default=0.0)


def _waited_within(p: Pass, lo: float, hi: float) -> float:
    """Seconds the main thread waited on our compile jobs between `lo` and `hi` (seconds
    since the pass's start)."""
    return sum(max(0.0, min(e[5], hi) - max(e[4], lo))
               for e in _events(p, "wait", main_only=True))


def _waited(after_collection: bool = False) -> Any:
    def read(p: Pass) -> float:
        marks = p.probe.get("marks") or {}
        since = (marks.get("collected_at", 0.0) - marks.get("t0", 0.0)) if after_collection \
            else float("-inf")
        return _waited_within(p, since, float("inf"))
    return read


def test_waits(p: Pass, test: dict[str, Any]) -> float:
    """Seconds the main thread waited on our compile jobs during one test."""
    if "start" not in test:
        return 0.0
    return _waited_within(p, test["start"], test["start"] + test.get("seconds", 0.0))


PROFILE_ROWS = (  # (label, how it is read from a pass); the first six add up to the wall time
    ("start-up: interpreter, pytest, until plugins load", _mark("startup_s")),
    ("plugins and their configure (our routing install, imports)", _mark("plugins_configure_s")),
    ("CUDA driver start-up", _mark("cuda_init_s")),
    ("collection: imports of the library, kernels decorated", _mark("collection_s")),
    ("tests", _mark("tests_s")),
    ("exit: session end, dump write, interpreter shutdown", _exit_s),
    ("  inside: triton.compile (compiles, and loads from the compile cache)",
     _timer("triton_compile")),
    ("  inside: launcher builds (compile_module_from_src)", _timer("launcher_build")),
    ("  inside: Triton's autotuner benchmarks", _timer("triton_autotuner_bench")),
    ("  inside: our cache lookups (Cache.lookup)", _timer("ours_lookup")),
    ("  inside: our tunings (a key's compiles and benchmarks)", _timer("ours_tuning")),
    ("  inside: a dump run's deferred tunings, at its end (queued compiles awaited, then "
     "benchmarks)", _timer("ours_deferred_end")),
    ("    their compiles, first start to last finish (benchmarks start after)",
     _timer("ours_compile_wall")),
    ("    each key's slowest compile, summed (no tuning ends before it)",
     _timer("ours_slowest_compile")),
    ("  our compile jobs run (count; the timeline is in the raw JSON's probe events)", _jobs()),
    ("    of them run on the main thread (it needed one no worker had started)",
     _jobs(main_only=True)),
    ("    the last one's end, seconds after the process started", _last_job_end),
    ("  the main thread waiting on our compile jobs", _waited()),
    ("    of it after collection (in tests)", _waited(after_collection=True)),
)


def profile(ran: dict[str, Pass]) -> list[dict[str, Any]]:
    rows = []
    for label, read in PROFILE_ROWS:
        rows.append({"what": label, **{n: round(read(p), 3) for n, p in ran.items()}})
    rows.append({"what": "process wall", **{n: p.wall_s for n, p in ran.items()}})
    rows.append({"what": "  calls: triton.compile / launcher builds / Triton benchmarks / "
                 "our lookups", **{n: "{} / {} / {} / {}".format(*(
                     int(_num(p.probe.get("timers", {}).get(k), "calls")) for k in (
                         "triton_compile", "launcher_build", "triton_autotuner_bench",
                         "ours_lookup"))) for n, p in ran.items()}})
    rows.append({"what": "  compiles split into compile processes / processes started / left "
                 "on the thread (declined, failed, none free)", **{
                     n: _split_counts(p) for n, p in ran.items()}})
    return rows


def _split_counts(p: Pass) -> str:
    """The pass's offload statistics (autotune_cache/triton/offload.py), '' without any."""
    found = (p.probe.get("ours") or {}).get("offload") or {}
    if not found:
        return ""
    return "{split} / {started} / {declined}, {failed}, {no_process}".format(**found)


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def markdown(suite: Suite, passes: dict[str, Pass], summary: dict[str, Any],
             meta: dict[str, Any]) -> str:
    lines = [f"# suite_perf: {suite.name}", "",
             f"Library: {suite.library}; tests: {suite.source}; selection: "
             f"`{' '.join(suite.args)}`", "",
             f"Machine: {meta.get('device')}; torch {meta.get('torch')}, triton "
             f"{meta.get('triton')}; {meta.get('when')}", "",
             "| pass | wall s | inside pytest s | vs P | vs W | outcomes | identical to P | "
             "benchmarks (Triton / ours) | hits | tuned | compiles | triton.compile calls | "
             "launcher builds |", "|" + " --- |" * 13]
    totals = summary["totals"]
    p_wall = totals.get("P", {}).get("wall_s")
    w_wall = totals.get("W", {}).get("wall_s")
    for n in PASSES:
        t = totals.get(n)
        if t is None:
            continue
        if "skipped" in t:
            lines.append(f"| {n} | skipped: {t['skipped']} |" + " |" * 11)
            continue
        vs_p = t["wall_s"] / p_wall if p_wall else None
        vs_w = t["wall_s"] / w_wall if w_wall else None
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(t["outcomes"].items()))
        same = "yes" if not t["outcomes_differ_from_P"] else \
            f"**no** ({len(t['outcomes_differ_from_P'])})"
        lines.append(
            f"| {n} | {t['wall_s']:.2f} | {t['inside_pytest_s']:.2f} | {_fmt(vs_p)} | "
            f"{_fmt(vs_w)} | {outcomes} | {same} | {t['benchmarks_triton']} / "
            f"{t['benchmarks_ours']} | {t['hits']} | {t['tuned']} | {t['compiles']} | "
            f"{t['triton_compile_calls']} | {t['launcher_builds']} |")
    lines += ["", "| target | ratio | target | met |", "| --- | --- | --- | --- |"]
    for n, r in summary["ratios"].items():
        lines.append(f"| {n} | {r['ratio']:.3f} | <= {r['target']} | "
                     f"{'yes' if r['met'] else '**no**'} |")
    regen = summary.get("regen")
    if regen:
        lines += ["", f"S-regen: `{regen['kernel']}`'s candidate list edited in "
                  f"{regen['entries_edited']} entries (of {regen['entries_before']}; "
                  f"{regen['candidates']} candidates, one dropped); the file held "
                  f"{regen['entries_after']} entries after the run, "
                  f"{regen['edited_restored']} of the edited ones with every candidate again; "
                  f"{totals['S-regen']['benchmarks_ours']} benchmarks."]
    stale = summary.get("stale")
    if stale:
        lines += ["", f"S-stale: {stale['entries_before']} entries aged to Triton "
                  f"{STALE_TRITON}; the file held {stale['entries_after']} entries after the "
                  f"run, {stale['entries_still_old']} of them still of that Triton; "
                  f"{totals['S-stale']['tuned']} keys tuned again."]
    ran = [n for n in PASSES if n in totals and "wall_s" in totals[n]]
    lines += ["", "## Where the time goes (seconds; the rows above 'inside' add up to the wall "
              "time; the timers inside sum calls on every thread, background compiles too)", "",
              "| | " + " | ".join(ran) + " |", "| --- |" + " --- |" * len(ran)]
    for row in summary["profile"]:
        lines.append(f"| {row['what']} | " + " | ".join(_fmt(row.get(n)) for n in ran) + " |")
    lines += ["", "## Census: every autotuner alive at the end of each pass", "",
              "| pass | tuners | by owner (alive / ran) | by class | left on Triton and ran |",
              "| --- | --- | --- | --- | --- |"]
    for n in ran:
        c = totals[n].get("census") or {}
        owners = ", ".join(f"{k} {v['alive']} / {v['ran']}"
                           for k, v in sorted(c.get("by_owner", {}).items()))
        classes = ", ".join(f"`{k}` {v['alive']} / {v['ran']}"
                            for k, v in sorted(c.get("by_class", {}).items()))
        left = c.get("triton_ran", [])
        shown = ", ".join(f"`{k}`" for k in left[:5]) + (f" and {len(left) - 5} more"
                                                         if len(left) > 5 else "")
        lines.append(f"| {n} | {c.get('tuners', 0)} | {owners} | {classes} | "
                     f"{len(left)}{': ' + shown if left else ''} |")
    lines += ["", "## Per test (seconds, outcome; waited: on our compile jobs)", "",
              "| test | " + " | ".join(ran) + " |", "| --- |" + " --- |" * len(ran)]
    names = sorted({t for n in ran for t in passes[n].probe.get("tests", {})})
    for t in names:
        cells = []
        for n in ran:
            rec = passes[n].probe.get("tests", {}).get(t)
            wait = 0.0 if rec is None else test_waits(passes[n], rec)
            cells.append("missing" if rec is None else
                         f"{rec.get('seconds', 0):.2f} {rec.get('outcome', '?')}"
                         + (f" (waited {wait:.2f})" if wait >= 0.01 else ""))
        lines.append(f"| `{t}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def machine() -> dict[str, Any]:
    meta: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    with contextlib.suppress(Exception):
        import torch
        import triton

        meta.update(torch=torch.__version__, triton=triton.__version__,
                    device=torch.cuda.get_device_name() if torch.cuda.is_available()
                    else "CPU (Triton interpreter)")
    return meta


def write(out: Path, suite: Suite, passes: dict[str, Pass], meta: dict[str, Any],
          smoke: bool) -> str:
    summary = summarize(passes)
    result = {"suite": suite.name, "library": suite.library, "source": suite.source,
              "args": list(suite.args), "smoke": smoke, "meta": meta, **summary,
              "raw": {n: {"wall_s": p.wall_s, "rc": p.rc, "skipped": p.skipped, "flags": p.flags,
                          "options": p.options, "env": p.env, "compiles": p.compiles,
                          "probe": p.probe} for n, p in passes.items()}}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"suite_perf_{suite.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    md = markdown(suite, passes, summary, meta)
    (out / f"suite_perf_{suite.name}.md").write_text(md)
    return md


def resummarize(path: Path, out: Path) -> int:
    """The summary and table again from an earlier JSON's raw records (same suite)."""
    data = json.loads(path.read_text())
    suite = Suite(data["suite"], data["library"], data["source"], tuple(data["args"]))
    passes = {n: Pass(n, r.get("options", []), r.get("flags", ""), r.get("env", {}),
                      r.get("wall_s"), r.get("rc"), r.get("probe") or {}, r.get("compiles", 0),
                      r.get("skipped", ""))
              for n, r in data["raw"].items()}
    print(write(out, suite, passes, data["meta"], data.get("smoke", False)))
    return 0


def main(argv: list[str] | None = None) -> int:
    # The shared compile cache's passes: the fleet's key, made up for this run (every pass's
    # processes inherit it), as a CI secret store would hand it out.
    os.environ.setdefault("AUTOTUNE_REMOTE_COMPILE_KEY", secrets.token_hex(32))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--suite", choices=sorted(SUITES), default=None)
    parser.add_argument("--tests-root", type=Path, default=None,
                        help="the library's checkout of its tests (default: the fake suite)")
    parser.add_argument("--passes", default=",".join(PASSES))
    parser.add_argument("--pass-timeout", type=float, default=300.0)
    parser.add_argument("--deadline", type=float, default=3600.0,
                        help="seconds for the whole run: a pass that would end later is cut to "
                             "fit, and passes not started are reported as skipped")
    parser.add_argument("--profile", default="", metavar="PASSES",
                        help="comma-separated passes to run under py-spy (gpu_perf.py's "
                        "py_spy_wrap)")
    parser.add_argument("--redis-server", default=None,
                        help="redis-server binary (default: PATH, then .whl/); a lib/ beside "
                        "it is used")
    parser.add_argument("--autotune-flags", default="", metavar="FLAGS",
                        help="AUTOTUNE_FLAGS every S pass gets after its own: an A/B of a flag "
                             "(two runs on one lease, one with it)")
    parser.add_argument("--b-flags", default="", metavar="FLAGS",
                        help="AUTOTUNE_FLAGS of the B passes (S-load-B, S-stale-B), which run "
                             "each right after its A: an A/B of a flag inside one run")
    parser.add_argument("--work", type=Path, default=None,
                        help="scratch directory for the Triton caches (default OUT/work)")
    parser.add_argument("--resummarize", type=Path, default=None, metavar="JSON",
                        help="rebuild the summary and table of an earlier run's JSON from its "
                             "raw records, into OUT")
    parser.add_argument("--smoke", action="store_true",
                        help="the fake library on the CPU interpreter (TRITON_INTERPRET=1)")
    args = parser.parse_args(argv)
    if args.resummarize is not None:
        return resummarize(args.resummarize, args.out)
    suite = SUITES["fake" if args.smoke or args.suite is None else args.suite]
    tests_root = (args.tests_root or BENCH / "suite_fake").resolve()
    names = [n.strip() for n in args.passes.split(",") if n.strip()]
    unknown = sorted(set(names) - set(PASSES))
    if unknown:
        parser.error(f"unknown passes {unknown}; valid: {', '.join(PASSES)}")
    if any(n.endswith("-B") for n in names) and not args.b_flags.strip():
        parser.error("the B passes (S-load-B, S-stale-B) need --b-flags: the AUTOTUNE_FLAGS "
                     "that make them differ from S-load and S-stale")
    if "S-shared" in names and "S-fill" not in names:
        names.append("S-fill")
    args.out.mkdir(parents=True, exist_ok=True)
    work = (args.work or args.out / "work").resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    runner = Runner(suite, tests_root, args.out.resolve(), work, args.smoke, args.pass_timeout,
                    time.monotonic() + args.deadline)
    runner.profile = {n.strip() for n in args.profile.split(",") if n.strip()}
    runner.extra_flags = args.autotune_flags.strip()
    runner.b_flags = args.b_flags.strip()
    if runner.profile:
        runner.py_spy = py_spy(work)
    redis_binary = find_redis_binary(args.redis_server, work)
    passes = run_passes(runner, names, redis_binary)
    print(write(args.out, suite, passes, machine(), args.smoke))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
