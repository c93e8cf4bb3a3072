"""dgr-forge: keep llama.cpp pinned and patched, and build the shard worker against it."""

__version__ = "0.1.0"
