"""autotune_cache's copy of XLA's autotune schema (see docs/xla.md); *_pb2.py are generated."""
