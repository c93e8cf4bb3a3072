"""What `dgr-forge demo` writes: the demo upstream's history, its patch series and a worker.

The texts are this package's files, each at the path it lands at (docs/architecture.md,
`demo/`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from importlib import resources

_FILES = resources.files("dgr_forge.demo")


def text(rel: str) -> str:
    """The package's file `rel` (`upstream/include/gguf-size.h`), as the demo writes it."""
    return _FILES.joinpath(rel).read_text(encoding="utf-8")


def tree(top: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for entry in sorted(_FILES.joinpath(top).iterdir(), key=lambda e: e.name):  # a stable order
        rel = f"{top}/{entry.name}"
        if entry.is_dir():
            found |= {f"{entry.name}/{k}": v for k, v in tree(rel).items()}
        else:
            found[entry.name] = text(rel)
    return found


# The upstream's history, oldest first; its branch is llama.cpp's (`master`).
BRANCH = "master"
UPSTREAM_DIR = "upstream"
WORKER_DIR = "worker"
KEYS_DIR = "keys"
KEY_FILE = "demo-signing-key.pem"
# the demo key is also the certification's trust anchor (`certifications/trusted-keys/`)
TRUSTED_KEY = "certifications/trusted-keys/demo.pub"
# the tiny model `certify` measures, and where it is served from (file://, inside DIR)
MODEL = "demo-tiny"
MODEL_PARTS = 2
MODEL_SOURCE_DIR = "model-source"


@dataclass(frozen=True)
class Commit:
    subject: str
    files: dict[str, str]


# upstream's change after the pin that patch 0002 makes exactly (upstreamed)
MAX_WORKERS = text("upstream-head/include/llama.h")

# upstream history: the pin is PIN_INDEX; later commits are what a rebase moves onto
HISTORY: tuple[Commit, ...] = (
    Commit("initial import", tree(UPSTREAM_DIR)),
    Commit("docs: say who owns a layer", {"README.md": text("upstream-head/README.md")}),
    Commit(
        "llama: validate the layer index", {"src/llama.cpp": text("upstream-head/src/llama.cpp")}
    ),
    Commit("llama: a cap on the number of workers", {"include/llama.h": MAX_WORKERS}),
)
PIN_INDEX = 1

# the forge's patch series on the pin, in order
SERIES: tuple[Commit, ...] = (
    Commit("llama: own layers round-robin", {"src/llama.cpp": text("patched/src/llama.cpp")}),
    Commit("llama: add LLAMA_MAX_WORKERS", {"include/llama.h": MAX_WORKERS}),
    Commit("README: say the tree is patched", {"README.md": text("patched/README.md")}),
)

GITIGNORE = f"""\
# the workspace (deleting it loses nothing)
/.dgr/
/.dgr-root.lock
# the demo upstream is its own repository; the private key never goes into git
/{UPSTREAM_DIR}/
/{KEYS_DIR}/{KEY_FILE}
# the tiny model's source: a stand-in for its download server
/{MODEL_SOURCE_DIR}/
"""


def _identity(name: str, email: str) -> dict[str, str]:
    pairs = (("NAME", name), ("EMAIL", email))
    return {f"GIT_{role}_{k}": v for role in ("AUTHOR", "COMMITTER") for k, v in pairs}


# a fixed identity and clock: the demo's commit ids are the same on every machine
IDENTITY = _identity("Upstream Dev", "dev@upstream.invalid")
ROOT_IDENTITY = _identity("dgr-forge demo", "demo@dgr-forge.invalid")


def date(n: int) -> str:
    return f"2025-03-01T12:{n // 60:02d}:{n % 60:02d}Z"


# The demo's tiny model: a real split GGUF served from a `file://` source inside DIR. Two
# parts, each a GGUF v3 file with the `split.*` keys llama.cpp's gguf-split writes and one
# float32 tensor, hashed into a model manifest by the forge's own writer, so `certify
# --model demo-tiny` provisions, verifies and binds it as it would any model.
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
    return head + b"".join(struct.pack("<f", (no * _ELEMS + i) / 1024.0) for i in range(_ELEMS))


def model_parts() -> dict[str, bytes]:
    """The tiny model's split parts by file name (`demo-tiny-00001-of-00002.gguf`)."""
    n = MODEL_PARTS
    return {f"{MODEL}-{no + 1:05d}-of-{n:05d}.gguf": _part(no, n) for no in range(n)}
