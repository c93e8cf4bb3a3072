"""Which key a build signs with, checked on every build, up to date or not.

Loading the key costs ~0.1 s, too much for a no-op build: a no-op whose cheap fingerprint
of the key material matches the last report's skips the load. No key anywhere, no person
at a terminal and not in CI: the report is written unsigned, and said so on every run.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from dgr_forge.attest.records import SIGNING_KEY_ENV, default_key_path, signing_key_source
from dgr_forge.core.output import Reporter

if TYPE_CHECKING:
    from dgr_forge.attest.keys import Signer


def _nonblocking(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NONBLOCK | os.O_NOFOLLOW)


def _file_fingerprint(kind: str, path: Path) -> str | None:
    try:
        st = os.stat(path, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode) or st.st_size > 64 << 10:
            return None  # a FIFO or device is never read here; the full path refuses it
        with open(path, "rb", opener=_nonblocking) as f:
            data = f.read(64 << 10)
    except OSError:
        return None  # the full path reports what is wrong
    h = hashlib.sha256(f"{kind}\0{path}\0{st.st_mode}\0{st.st_uid}\0".encode())
    h.update(data)
    return h.hexdigest()


class SigningKey:
    """The key asked for now (`--key`, else the environment), loaded only when needed."""

    def __init__(self, key: str | None, sign: bool, out: Reporter) -> None:
        self.key, self.sign, self.out = key, sign, out
        self._signer: Signer | None = None
        self._fallback: bool | None = None
        self._warned = False

    def unsigned_fallback(self) -> bool:
        """No key was asked for or exists, and nobody could be asked (see the module doc)."""
        if self._fallback is None:
            self._fallback = False
            # the one lookup: nothing given (no --key, no variable) leaves the default key
            source = signing_key_source(self.key) if self.sign else None
            default = source.path if source is not None and source.kind == "default" else None
            if default is not None and not default.exists():
                from dgr_forge.attest import keys  # only on a machine without any key

                self._fallback = not keys.in_ci() and not keys.interactive()
        return self._fallback

    def warn_unsigned(self) -> None:
        """Said once, where a report is written or handed back unsigned for want of a key."""
        if self.sign and self.unsigned_fallback() and not self._warned:
            self._warned = True
            self.out.warn(
                f"no signing key (no --key, no {SIGNING_KEY_ENV}, no default key "
                f"{default_key_path()}) and no terminal to create one: the report is written "
                "UNSIGNED (`report verify` fails it as unsigned); to sign, run "
                "`dgr-forge keygen` once and build again, or pass --key PATH"
            )

    def unsigned_reason(self) -> str | None:
        """Why a report is written unsigned, in the words the warning gives."""
        if not self.sign:
            return "--no-sign given"
        if self.unsigned_fallback():
            self.warn_unsigned()
            return "no signing key found and no terminal to create one"
        return None

    def fingerprint(self) -> str | None:
        """Cheap identity of the key material, or None when only a full load can tell."""
        if not self.sign or self.unsigned_fallback():
            return "unsigned"
        source = signing_key_source(self.key)  # the one lookup: an empty value is exit 2
        if source.kind == "env-pem":
            return hashlib.sha256(b"pem\0" + source.value.encode()).hexdigest()
        assert source.path is not None
        kind = {"option": "--key", "env-path": "env", "default": "default"}[source.kind]
        return _file_fingerprint(kind, source.path)

    def signer(self) -> Signer | None:
        """The signer (None with --no-sign); a bad key is the loader's exit 2."""
        if not self.sign or self.unsigned_fallback():
            return None
        if self._signer is None:
            # imported here: a no-op rebuild with an unchanged key never pays for it
            from dgr_forge.attest import keys

            self._signer = keys.resolve_signer(self.key, self.out)
        return self._signer
