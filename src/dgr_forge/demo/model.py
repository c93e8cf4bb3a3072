"""The demo's tiny model: a real split GGUF served from a `file://` source inside DIR.

Two parts (`demo-tiny-0000N-of-00002.gguf`), each a GGUF v3 file with the `split.*` keys
llama.cpp's gguf-split writes and one float32 tensor, hashed into a model manifest by the
forge's own writer (`models.make_manifest`), so `certify --model demo-tiny` provisions,
verifies and binds it as it would any model.
"""

from __future__ import annotations

import struct
from pathlib import Path

from dgr_forge.core.output import Reporter
from dgr_forge.demo import sources
from dgr_forge.models.make_manifest import build_manifest

_U16, _I32, _STRING = 2, 5, 8  # GGUF value types
_F32 = 0  # the tensor type
_ALIGN = 32  # general.alignment's default
_ELEMS = 256


def _str(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _part(no: int, count: int) -> bytes:
    kvs = [
        _str("general.architecture") + struct.pack("<I", _STRING) + _str("llama"),
        _str("split.no") + struct.pack("<IH", _U16, no),
        _str("split.count") + struct.pack("<IH", _U16, count),
        _str("split.tensors.count") + struct.pack("<Ii", _I32, count),
    ]
    tensor = _str(f"blk.{no}.weight") + struct.pack("<IQIQ", 1, _ELEMS, _F32, 0)
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, len(kvs)) + b"".join(kvs) + tensor
    head += b"\0" * (-len(head) % _ALIGN)
    data = b"".join(struct.pack("<f", (no * _ELEMS + i) / 1024.0) for i in range(_ELEMS))
    return head + data


def parts() -> dict[str, bytes]:
    """The split's parts by file name."""
    n = sources.MODEL_PARTS
    return {f"{sources.MODEL}-{no + 1:05d}-of-{n:05d}.gguf": _part(no, n) for no in range(n)}


def manifest(served: Path) -> str:
    """The manifest of the parts in `served` (their file:// URLs there)."""
    out = Reporter(quiet=True)
    return build_manifest(served, sources.MODEL, served.as_uri(), out, jobs=1).text
