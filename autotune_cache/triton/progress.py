"""Progress lines while a key is being tuned (through autotune_cache.foundation.console:
pytest's terminal under the plugin, else logging or stderr).

Quick tunings stay quiet. Once a tuning has run for `QUIET_SECONDS`, or always when
AUTOTUNE_PROGRESS=1 (or Triton's TRITON_PRINT_AUTOTUNING=1) is set, every benchmarked config gets a
line; AUTOTUNE_PROGRESS=0 silences them entirely. A process nobody configured (no flags, no
configure()) stays silent unless AUTOTUNE_PROGRESS=1 asks, as `triton.autotune` does: kernels a
library ships with our decorator print nothing in its users' processes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from autotune_cache.foundation import console, env

PROGRESS_ENV = env.AUTOTUNE_PROGRESS
QUIET_SECONDS = 1.0


@dataclass
class Progress:
    """Reports one key's tuning: a header, one line per benchmarked config, a summary."""

    kernel: str
    problem: str
    device: str
    total: int
    reused: int
    say: Callable[[str], None] = field(default=console.say)
    configured: bool = True  # the process has flags (or configure()): long tunings may speak

    def __post_init__(self) -> None:
        self.mode = env.progress_mode()
        if self.mode == "auto" and not self.configured:
            self.mode = "never"
        self.started = time.perf_counter()
        self.header_printed = False
        self.done_count = 0
        # Where the tuning's time went, in order: (what, seconds), e.g. ("timed 48 at 10 ms",
        # 0.9). The last line says it, so that a slow tuning's log is its own profile.
        self.phases: list[tuple[str, float]] = []

    def phase(self, what: str, seconds: float) -> None:
        """Record one part of the tuning (a compile wait, a benchmark stage, the decision)."""
        self.phases.append((what, seconds))

    def _active(self) -> bool:
        if self.mode == "never":
            return False
        return self.mode == "always" or time.perf_counter() - self.started >= QUIET_SECONDS

    def _print(self, line: str) -> None:
        self.say(f"autotune_cache: {line}")

    def _header(self) -> None:
        if not self.header_printed:
            self.header_printed = True
            todo = self.total - self.reused
            self._print(f"tuning {self.kernel} [{self.problem}] on {self.device}: "
                        f"{todo} configs to benchmark, {self.reused} timings reused")

    def compiled(self, count: int, failed: int, seconds: float,
                 slowest: tuple[str, float] | None = None) -> None:
        """Once the compiles of `count` configs have all finished, before any benchmark,
        with the slowest compile: the compiles cannot end before it does."""
        if count and self._active():
            self._header()
            line = f"  compiled {count} configs in {seconds:.1f} s ({failed} failed)"
            if slowest is not None:
                line += f"; slowest {slowest[0]}: {slowest[1]:.1f} s"
            self._print(line)

    def step(self, config: str, time_ms: float | None, failure: str = "") -> None:
        """After one config is benchmarked (time_ms None when it failed)."""
        self.done_count += 1
        if not self._active():
            return
        self._header()
        todo = self.total - self.reused
        outcome = f"{time_ms:.4f} ms" if time_ms is not None else f"failed: {failure[:120]}"
        self._print(f"  [{self.done_count}/{todo}] {config}: {outcome}")

    def decided(self, kept: str, leaders: int, margin: float, short_ms: dict[str, float]
                ) -> None:
        """After the leaders the configured benchmark could not separate were timed again in
        the short regime (bench.decide)."""
        if self._active():
            self._header()
            times = ", ".join(f"{c} {t:.4f} ms" for c, t in short_ms.items())
            self._print(f"  {leaders} leaders within {margin * 100:g} %, timed again in short "
                        f"bursts ({times}): kept {kept}")

    def finished(self, winner: str, time_ms: float, seconds: float,
                 tie: tuple[int, float] | None = None) -> None:
        """After the winner is chosen; `tie`: (how many configs, the noise band) when the winner
        was one of several within the timing method's noise band of the fastest, so the tie rule
        (store/tuning.pick_winner: the earliest in the list) chose it."""
        # A tuning that took long says so even when every stage was quiet (its time went to
        # stages that print no line per config: the later benchmark stages, the decision).
        if self.header_printed or self._active():
            self._header()
            parts = "; ".join(f"{what} {secs:.1f} s" for what, secs in self.phases)
            how = ""
            if tie is not None:
                how = (f"; a tie of {tie[0]} configs within {tie[1] * 100:g} % of the fastest, "
                       "decided by the rule: the earliest in the list")
            self._print(f"  best {winner} ({time_ms:.4f} ms{how}), tuned in {seconds:.1f} s"
                        + (f" ({parts})" if parts else ""))
