"""Shared fixtures of the XLA format tests: every file under tests/fixtures/xla_h200_jax0.11.2
was written by JAX 0.11.2 on an H200."""

from __future__ import annotations

from pathlib import Path

from autotune_cache.xla.cache_format import XlaCacheFormat
from autotune_cache.xla.legacy_format import XlaLegacyFormat

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "xla_h200_jax0.11.2"
RES, LEGACY, FUSION, FUSION_LEGACY = (FIX / "res.textproto", FIX / "legacy.textproto",
                                      FIX / "fusion", FIX / "fusion_legacy")
DEVICE_FP = "ed0e56ab8b2a0ecb"
H200_MODEL = "CUDA: 9.0, Cores: 132"
NEW, OLD = XlaCacheFormat(), XlaLegacyFormat()


def files_of(root: Path) -> dict[str, bytes]:
    """Relative path -> bytes of every file under root."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}
