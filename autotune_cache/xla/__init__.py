"""XLA's autotune files in the CLI's reader layer, and a helper for JAX tests.

`formats()` is what autotune_cache.resultsets.registry registers: XLA's newer AutotuneCache format
(`--xla_gpu_dump_autotune_results_to` with JAX 0.11.x, and its `<device>/<hlo>.pb` per-fusion
directories) and the legacy `version: 3` AutotuneResults format (and its
`<base64 sha256>.textproto` per-fusion directories). See docs/xla.md.

The JAX test helper lives in autotune_cache.xla.jax_test_helper and needs neither jax nor the
protobuf schema, so importing this package stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune_cache.resultsets.base import Format


def formats() -> list[Format]:
    """The XLA formats, newer format first (the one JAX 0.11.x writes by default)."""
    from autotune_cache.xla.cache_format import XlaCacheFormat
    from autotune_cache.xla.legacy_format import XlaLegacyFormat

    return [XlaCacheFormat(), XlaLegacyFormat()]
