"""What the cache tells a user whose committed cache lacks a result: the require-complete error
(what is missing, what is stale and why, which candidates are new) and how to regenerate.

Worded here, apart from the cache (cache.py), which composes the tiers and runs the tuning
protocol: the cache hands over what it searched and found. The words follow the summary's
(store/stats.py): a changed candidate list is not "stale", and the regen command is the one
the runner gives (the Bazel macro's `.regen` target) when there is one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol

from autotune_cache.foundation.key import CacheKey
from autotune_cache.proto import autotune_results_pb2 as pb
from autotune_cache.store.tuning import config_text

# How many near misses and new candidates a message lists.
SHOWN_NEAR = 10
SHOWN_NEW = 5


class NearMiss(Protocol):
    """An entry for the same kernel and problem under another key, and where it was found
    (tiers/base.py's Found)."""

    key: CacheKey
    entry: pb.Entry
    origin: str


def _below_cwd(text: str) -> str:
    """A searched place as the user would type it here: a path below the working directory is
    shown relative to it (a CI runner's absolute paths mean nothing to whoever reads the log)."""
    here = os.getcwd() + os.sep
    return text[len(here):] if text.startswith(here) else text


def missing_message(key: CacheKey, near: Sequence[NearMiss],
                    candidates: Sequence[pb.Config] | None, *, searched: Sequence[str],
                    require_flag: str, regen: str) -> str:
    """The require-complete error for `key`: what is missing, what is stale (a changed
    candidate list is not "stale"), which candidates are new, and `regen` (regen_line)."""
    stale = [f for f in near if key.is_stale(f.key)]
    why = (" (the cache is stale)" if stale
           else " (the kernel's candidate list changed)" if near else "")
    lines = [
        f"autotune_cache: no tuned result for {key.kernel} [{key.problem}]{why}",
        f"  kernel:    {key.kernel}",
        f"  problem:   {key.problem}",
        f"  device:    {key.device}",
        f"  toolchain: {key.toolchain_str}",
        f"and {require_flag} forbids tuning it here.",
        f"Searched: {', '.join(map(_below_cwd, searched)) or 'nothing (no results loaded)'}.",
    ]
    if stale:
        lines.append("The cache is stale: it has this kernel and problem only for")
        for f in near[:SHOWN_NEAR]:
            lines.append(f"  - {'; '.join(key.stale_reasons(f.key))}  (in {_below_cwd(f.origin)})")
    elif near:
        lines.append("The cache has this kernel and problem only under another candidate "
                     "list, in:")
        for f in near[:SHOWN_NEAR]:
            lines.append(f"  - {_below_cwd(f.origin)}")
    added = new_candidates(candidates, [f for f in near if f not in stale])
    if added:
        shown = ", ".join(added[:SHOWN_NEW]) + (f" and {len(added) - SHOWN_NEW} more"
                                                 if len(added) > SHOWN_NEW else "")
        lines.append(f"New candidate(s) since it was tuned: {shown}; a regen benchmarks "
                     "only these, reusing the recorded timings of the others.")
    lines.append(regen)
    return "\n".join(lines)


def regen_line(hint: str, dump_advice: str) -> str:
    """How to regenerate the cache: the runner's command `hint` (the Bazel macro's regen
    target) when there is one, else `dump_advice`. A regen replaces a broken committed file
    (dumpfile.py)."""
    if hint:
        return f"Regenerate the cache with:\n  {hint}"
    return f"Regenerate the cache by {dump_advice}."


def new_candidates(candidates: Sequence[pb.Config] | None, near: Sequence[NearMiss]
                   ) -> list[str]:
    """The candidates (as config text) that none of the near misses with the same source,
    device and toolchain recorded a timing for: what a candidate-list change added."""
    if not candidates or not near:
        return []
    recorded = {config_text(t.config) for f in near for t in f.entry.result.candidates}
    return [text for text in dict.fromkeys(config_text(c) for c in candidates)
            if text not in recorded]
