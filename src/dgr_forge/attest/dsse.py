"""DSSE v1 (Dead Simple Signing Envelope): the pre-authentication encoding, sign, verify.

The keyid is only a hint: every signature is tried against every trusted key
(docs/build-and-reports.md, "Signed reports", the envelope).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from msgspec import Struct, field

from dgr_forge.attest.keys import PublicKey, Signer
from dgr_forge.core.structs import repr_without


class EnvelopeError(ValueError):
    """The bytes are not a DSSE envelope."""


def pae(payload_type: str, body: bytes) -> bytes:
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(t), t, len(body), body)


def b64decode(text: str) -> bytes:
    """Standard or URL-safe base64, padded or not (DSSE verifiers MUST accept either)."""
    cleaned = text.strip().replace("-", "+").replace("_", "/")
    cleaned += "=" * (-len(cleaned) % 4)
    try:
        return base64.b64decode(cleaned, validate=True)
    except (binascii.Error, ValueError) as err:
        raise EnvelopeError(f"invalid base64: {err}") from None


class Signature(Struct, frozen=True):
    keyid: str
    sig: bytes  # base64 in the JSON form (msgspec's encoding of bytes)

    def __repr__(self) -> str:
        return repr_without(self, frozenset({"sig"}))


class Envelope(Struct, frozen=True):
    """Its JSON form is msgspec's encoding of it (one line, the `.intoto.jsonl` convention)."""

    payload: bytes
    payload_type: str = field(name="payloadType")
    signatures: tuple[Signature, ...]

    @classmethod
    def from_dict(cls, data: Any) -> Envelope:
        if not isinstance(data, dict):
            raise EnvelopeError("not a JSON object")
        for key in ("payload", "payloadType", "signatures"):
            if key not in data:
                raise EnvelopeError(f"missing field {key!r}")
        payload_b64, payload_type, sigs = data["payload"], data["payloadType"], data["signatures"]
        if not isinstance(payload_b64, str) or not isinstance(payload_type, str):
            raise EnvelopeError("payload and payloadType must be strings")
        if not isinstance(sigs, list):
            raise EnvelopeError("signatures must be an array")
        signatures: list[Signature] = []
        for i, s in enumerate(sigs):
            if not isinstance(s, dict) or not isinstance(s.get("sig"), str):
                raise EnvelopeError(f"signatures[{i}] has no 'sig' string")
            keyid = s.get("keyid", "")
            if not isinstance(keyid, str):
                raise EnvelopeError(f"signatures[{i}].keyid must be a string")
            signatures.append(Signature(keyid, b64decode(s["sig"])))
        return cls(b64decode(payload_b64), payload_type, tuple(signatures))

    @classmethod
    def from_json(cls, text: str | bytes) -> Envelope:
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise EnvelopeError(f"not JSON: {err}") from None
        except RecursionError:
            raise EnvelopeError("JSON nested too deeply") from None
        return cls.from_dict(data)


def sign(body: bytes, payload_type: str, signer: Signer | None) -> Envelope:
    if signer is None:
        return Envelope(body, payload_type, ())
    from securesystemslib.dsse import Envelope as SslibEnvelope
    from securesystemslib.signer import CryptoSigner, SSlibKey

    public = SSlibKey.from_crypto(signer.key.public_key())
    sig = SslibEnvelope(body, payload_type, {}).sign(CryptoSigner(signer.key, public))
    return Envelope(body, payload_type, (Signature(sig.keyid, bytes.fromhex(sig.signature)),))


def verify(envelope: Envelope, keys: list[PublicKey]) -> PublicKey | None:
    """The first of `keys` that verifies some signature over the PAE, else None."""
    from securesystemslib.exceptions import UnverifiedSignatureError
    from securesystemslib.signer import Signature as SslibSignature
    from securesystemslib.signer import SSlibKey

    message = pae(envelope.payload_type, envelope.payload)
    # try the key the keyid names first (a hint only), then every other key
    for sig in envelope.signatures:
        for key in sorted(keys, key=lambda k: k.keyid != sig.keyid):
            # the key under the id this signature names: the id is not what is checked
            theirs = SSlibKey.from_crypto(key.key, keyid=sig.keyid or None)
            try:
                theirs.verify_signature(SslibSignature(theirs.keyid, sig.sig.hex()), message)
            except UnverifiedSignatureError:
                continue
            return key
    return None
