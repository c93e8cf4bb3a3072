"""Re-exports `support.server` (the loopback HTTP server with faults, split GGUF files,
hostile GGUF headers)."""

from __future__ import annotations

from support.server import (
    Faults,
    FaultyServer,
    Request,
    flip_byte,
    hostile_gguf,
    layered_tensors,
    split_by_count,
    split_names,
    write_layered_gguf,
    write_split_gguf,
)

__all__ = [
    "Faults",
    "FaultyServer",
    "Request",
    "flip_byte",
    "hostile_gguf",
    "layered_tensors",
    "split_by_count",
    "split_names",
    "write_layered_gguf",
    "write_split_gguf",
]
