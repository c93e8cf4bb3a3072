"""Where the signing key comes from: the one lookup, without the cryptography import
(`lanes.signing` fingerprints what it names cheaply for a no-op build). A set but empty
value (what CI passes when a secret is missing) is exit 2, never a fallback.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from msgspec import Struct

from dgr_forge.core.errors import BadInput

SIGNING_KEY_ENV = "DGR_SIGNING_KEY"
PEM_MARKER = "-----BEGIN"


def default_key_path() -> Path:
    """`$XDG_CONFIG_HOME/dgr-forge/signing-key.pem`, else `~/.config/dgr-forge/...`."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "dgr-forge" / "signing-key.pem"


class KeySource(Struct, frozen=True):
    kind: Literal["option", "env-pem", "env-path", "default"]
    value: str  # the option or variable as given (a path, or PEM text for env-pem)
    path: Path | None  # the key file (None for inline PEM)


def signing_key_source(key: str | None) -> KeySource:
    if key is not None:
        if not key.strip():
            raise BadInput("--key: empty", hint="pass the path of a private key (PEM)")
        return KeySource("option", key, Path(key).expanduser())
    if SIGNING_KEY_ENV in os.environ:
        value = os.environ[SIGNING_KEY_ENV]
        if not value.strip():
            raise BadInput(
                f"{SIGNING_KEY_ENV} is set but empty (a CI secret that is not available here?)",
                hint=f"set {SIGNING_KEY_ENV} to the key's PEM text or path, unset it to use "
                "your default key, or pass --no-sign to build without a signed report",
                details={"variable": SIGNING_KEY_ENV},
            )
        if PEM_MARKER in value:
            return KeySource("env-pem", value, None)
        return KeySource("env-path", value, Path(value).expanduser())
    path = default_key_path()
    return KeySource("default", str(path), path)
