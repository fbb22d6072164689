"""A tiny stand-in for a third-party kernel library (bench/suite_perf.py's CPU smoke suite).

Its kernels are decorated with plain Triton decorators, two spellings, as installed libraries
do; they carry a wall-clock `do_bench` so that Triton's own autotuner can tune them on the CPU
interpreter too (Triton's default benchmark needs a GPU)."""

from fakelib.ops import add, scale

__all__ = ["add", "scale"]
