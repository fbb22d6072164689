"""bucketlib: a library whose tuner keeps its own rules (see tuner.py)."""

from bucketlib.ops import halve, scale

__all__ = ["halve", "scale"]
