"""Ed25519 signing keys: generate, find, load. A private key is never printed or logged.

It is created with mode 0600 (never readable by others, not even for an instant); the key
id is securesystemslib's default (docs/build-and-reports.md, "Signed reports", Keys).
"""

from __future__ import annotations

import base64
import contextlib
import os
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from dgr_forge.attest.records import PEM_MARKER, signing_key_source
from dgr_forge.attest.records import SIGNING_KEY_ENV as SIGNING_KEY_ENV
from dgr_forge.attest.records import default_key_path as default_key_path
from dgr_forge.core.errors import BadInput
from dgr_forge.core.fsutil import atomic_write_bytes, read_regular
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import Form, d

VERIFY_KEY_ENV = "DGR_VERIFY_KEY"
MAX_KEY_BYTES = 64 << 10  # a PEM key is a few hundred bytes


def public_path(private_path: Path) -> Path:
    return private_path.with_name(private_path.name + ".pub")


def keyid_of(public_key: Ed25519PublicKey) -> str:
    """securesystemslib is imported here (~20 ms), only where a key id is needed."""
    from securesystemslib.signer import SSlibKey

    return str(SSlibKey.from_crypto(public_key).keyid)


@dataclass(frozen=True)
class PublicKey:
    """`source`: so messages can say which key was used."""

    key: Ed25519PublicKey = field(repr=False)
    source: str

    @property
    def keyid(self) -> str:
        return keyid_of(self.key)


@dataclass(frozen=True)
class Signer:
    """`repr`/`str` never show key material."""

    key: Ed25519PrivateKey = field(repr=False)
    source: str  # e.g. "--key ci.pem", "DGR_SIGNING_KEY (inline PEM)": never the PEM itself

    @property
    def public(self) -> PublicKey:
        return PublicKey(self.key.public_key(), self.source)

    @property
    def keyid(self) -> str:
        return keyid_of(self.key.public_key())


def _write_private(path: Path, pem: bytes, force: bool) -> None:
    """0600 from its first byte (O_EXCL temp + rename), never world-readable."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o600)  # mkstemp already creates 0600; say so explicitly
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
            f.flush()
            os.fsync(f.fileno())
        if force:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails if `path` appeared meanwhile: never overwrite
            os.unlink(tmp)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


class Keygen(Form, kw_only=True):
    """`keygen`'s result (its `--json` object)."""

    title = "keygen"

    private_key: Annotated[Path, d("its path")]
    public_key: Annotated[Path, d("the `.pub` path")]
    keyid: Annotated[str, d("the key id: securesystemslib's default for the public key")]


def keygen(path: Path | None, *, force: bool = False) -> Keygen:
    path = (path or default_key_path()).expanduser()
    signer = generate(path, force=force)
    return Keygen(private_key=path, public_key=public_path(path), keyid=signer.keyid)


def generate(path: Path, *, force: bool = False) -> Signer:
    pub = public_path(path)
    if not force:
        for existing in (path, pub):
            if existing.exists():
                raise BadInput(
                    f"{existing}: a key already exists; refusing to overwrite it",
                    hint="keep using it, choose another --out PATH, or pass --force to replace "
                    "it (reports signed with the old key then verify only with the old .pub)",
                    details={"path": str(existing)},
                )
    if path.is_dir():
        raise BadInput(f"{path}: is a directory", hint="pass a file path to --out")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    try:
        created_dir = not path.parent.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        if created_dir:
            os.chmod(path.parent, 0o700)
        try:
            _write_private(path, pem, force)
        except FileExistsError:
            raise BadInput(
                f"{path}: a key already exists; refusing to overwrite it",
                hint="pass --force to replace it",
            ) from None
        spki = serialization.PublicFormat.SubjectPublicKeyInfo
        public_pem = key.public_key().public_bytes(serialization.Encoding.PEM, spki)
        atomic_write_bytes(pub, public_pem, 0o644)
    except OSError as err:
        raise BadInput(
            f"{path}: cannot write the key: {err.strerror}",
            hint="choose a writable location with --out",
            details={"path": str(path)},
        ) from None
    return Signer(key, str(path))


def _private_from_pem(data: bytes, source: str) -> Signer:
    """Parse a private key; errors name the source only, never the content."""
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise BadInput(
            f"{source}: the private key is encrypted",
            hint="dgr-forge reads unencrypted PKCS#8 PEM keys (`dgr-forge keygen` writes one); "
            "keep it safe with file mode 0600 or a CI secret instead",
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise BadInput(
            f"{source}: not a PEM private key",
            hint="pass the PKCS#8 PEM file written by `dgr-forge keygen` (not the .pub file)",
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise BadInput(
            f"{source}: not an Ed25519 key ({type(key).__name__})",
            hint="generate one with `dgr-forge keygen`",
        )
    return Signer(key, source)


def _read(path: Path, what: str) -> bytes:
    return read_regular(
        path,
        what=f"{what} file",
        hint="check the path, or create a key with `dgr-forge keygen`",
        limit=MAX_KEY_BYTES,
    )


def load_signer(path: Path) -> Signer:
    """Refused (exit 2) when others may read or write the file; its bytes and mode come from
    one descriptor (a swap between the check and the read cannot slip another file in)."""
    shown = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (OSError, ValueError):
        _read(path, "private key")  # raises the usual exit-2 message (missing, NUL, ...)
        raise BadInput(
            f"{shown}: cannot open the private key file", hint="check the path"
        ) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(
                f"{shown}: not a regular file",
                hint="pass the private key file written by `dgr-forge keygen`",
                details={"path": shown},
            )
        data, mode = f.read(MAX_KEY_BYTES), stat.S_IMODE(st.st_mode)
    signer = _private_from_pem(data, shown)
    if mode & 0o077:
        raise BadInput(
            f"{path}: the signing key has mode {mode:04o}: others may read or replace it",
            hint=f"chmod 600 {path}  (if others could read it, also replace the key: "
            "`dgr-forge keygen --force`)",
            details={"path": shown, "mode": f"{mode:04o}"},
        )
    return signer


def load_public(data: bytes, source: str) -> PublicKey:
    """A private key PEM is accepted too (its public half)."""
    if b"PRIVATE KEY" in data:
        return _private_from_pem(data, source).public
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise BadInput(
            f"{source}: not a PEM public key",
            hint="pass the .pub file written next to the key by `dgr-forge keygen`",
        ) from None
    if not isinstance(key, Ed25519PublicKey):
        raise BadInput(
            f"{source}: not an Ed25519 public key ({type(key).__name__})",
            hint="reports are signed with Ed25519 keys from `dgr-forge keygen`",
        )
    return PublicKey(key, source)


def load_public_file(path: Path) -> PublicKey:
    return load_public(_read(path, "public key"), str(path))


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def interactive() -> bool:
    """A person at a terminal: only then may a default key be created."""
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def _env_refusal(variable: str, env: str, kind: str) -> BadInput:
    """A key variable that is neither PEM text nor an existing file: exit 2 that names the
    variable and the shapes expected, never the value (it may be the secret itself, e.g.
    base64-encoded PEM)."""
    encoded = ""
    with contextlib.suppress(ValueError):
        if PEM_MARKER.encode() in base64.b64decode(env.strip(), validate=True)[:64]:
            encoded = " (it looks base64-encoded: store the PEM text itself, or decode it)"
    shown = f"; its value ({len(env)} characters) is not shown: it may be a secret{encoded}"
    shown = f" ({env})" if _path_shaped(env) else shown
    return BadInput(
        f"{variable} is neither PEM key text nor the path of a key file{shown}; expected "
        f"the {kind} key's PEM text (starting {PEM_MARKER}) or the path of that file",
        hint=f"set {variable} to the {kind} key's PEM text (as written by `dgr-forge "
        "keygen`) or to the path of that file",
        details={"variable": variable, "expected": "PEM text or a key file path"},
    )


def _path_shaped(env: str) -> bool:
    """A value safe to echo: an absolute, home or relative path whose file name has an
    extension (no base64 text holds a '.'; a JWT or hex secret does not start with '/')."""
    return (
        env.startswith(("/", "~/", "./", "../"))
        and len(env) < 256
        and env.isprintable()
        and not any(c.isspace() for c in env)
        and "." in env.rsplit("/", 1)[-1]
    )


def _refuse_secret_shaped_option(value: str) -> None:
    """`--key` takes a path: a value that names no file and does not look like a path
    (key text pasted in, `--key "$SECRET"`) is refused without being echoed."""
    if "\x00" in value or _env_is_file(value) or _path_shaped(value):
        return  # a path (or no path at all): the loader names it (missing, NUL, ...)
    if any(c.isspace() for c in value.strip()) or len(value) >= 40:  # no short file name
        raise BadInput(
            f"--key: not the path of an existing key file; its value ({len(value)} "
            "characters) is not shown: it may be a secret",
            hint="pass the path of the key file (key text goes in DGR_SIGNING_KEY)",
            details={"option": "--key", "expected": "a key file path"},
        )


def _env_is_file(env: str) -> bool:
    try:
        return Path(env).expanduser().is_file()
    except (OSError, ValueError):
        return False


def resolve_signer(key: str | None, out: Reporter) -> Signer:
    """Exit 2 instead of a throwaway key; the default key is created only interactively,
    with a warning."""
    source = signing_key_source(key)
    if source.kind == "option":
        _refuse_secret_shaped_option(source.value)
        return load_signer(Path(source.value).expanduser())
    if source.kind == "env-pem":
        return _private_from_pem(source.value.encode("utf-8"), f"{SIGNING_KEY_ENV} (inline PEM)")
    if source.kind == "env-path":
        env = source.value
        if not _env_is_file(env):
            raise _env_refusal(SIGNING_KEY_ENV, env, "private")
        return Signer(load_signer(Path(env).expanduser()).key, f"{SIGNING_KEY_ENV}={env}")
    if (path := default_key_path()).exists():
        return load_signer(path)
    how = (
        f"pass --key PATH, set {SIGNING_KEY_ENV} (PEM text or path), "
        "or pass --no-sign to build without a signed report"
    )
    if in_ci():
        raise BadInput(
            "no signing key in CI: refusing to sign with a throwaway key",
            hint=f"{how}; a fork's pull request has no secrets, so sign only on trusted runs",
            details={"variable": SIGNING_KEY_ENV},
        )
    if not interactive():
        raise BadInput(
            f"no signing key (no --key, no {SIGNING_KEY_ENV}, no default key {path})",
            hint=f"{how}, or create the default key with `dgr-forge keygen`",
            details={"variable": SIGNING_KEY_ENV},
        )
    signer = generate(path)
    out.warn(
        f"created signing key {path} (NEW KEY: public key {public_path(path)}, keyid "
        f"{signer.keyid[:16]}); reports are signed with it from now on: keep the private "
        "file secret and give the .pub to whoever verifies your reports"
    )
    return signer


def resolve_verifier(key: str | None, option: str = "--key") -> PublicKey:
    if key:
        _refuse_secret_shaped_option(key)
        return load_public_file(Path(key).expanduser())
    if (env := os.environ.get(VERIFY_KEY_ENV, "")).strip():
        if PEM_MARKER in env:
            return load_public(env.encode("utf-8"), f"{VERIFY_KEY_ENV} (inline PEM)")
        if not _env_is_file(env):
            raise _env_refusal(VERIFY_KEY_ENV, env, "public")
        return PublicKey(load_public_file(Path(env).expanduser()).key, f"{VERIFY_KEY_ENV}={env}")
    default = default_key_path()
    if (pub_path := public_path(default)).exists():
        return load_public_file(pub_path)
    if default.exists():
        return load_signer(default).public
    raise BadInput(
        "no public key to verify with",
        hint=f"pass {option} PUB, set {VERIFY_KEY_ENV}, or create the default key with "
        f"`dgr-forge keygen` ({default})",
    )
