"""DSSE: the spec's PAE test vectors, deterministic Ed25519 vectors, and interop with
securesystemslib's independent implementation in both directions."""

from __future__ import annotations

import base64
import hashlib
import json

import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from securesystemslib import exceptions as sslib_exceptions
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.signer import CryptoSigner, SSlibKey
from support.reports import legacy_keyid_of, spki_der

from dgr_forge.attest import dsse
from dgr_forge.attest.keys import PublicKey, Signer, keyid_of

# secure-systems-lab/dsse: protocol.md "Test Vectors" and testvectors/vectors.json (key "A"
# is RFC 8032's first Ed25519 test key)
SEED_A = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
PUBLIC_A = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
INTOTO = "application/vnd.in-toto+json"
PAYLOAD_B64 = "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEifQ=="
SIG_A = "2WAfaHm5jluo0w+0rk8uVkluELJYWjSmU9x7EUzx+AyteDGJ4/nqyJXfmAUVFIAoQafWm7AxBZNw5M9ixNHiCA=="


def key_a() -> Signer:
    return Signer(Ed25519PrivateKey.from_private_bytes(SEED_A), "vector key A")


def test_pae_matches_the_protocol_test_vector() -> None:
    assert (
        dsse.pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_pae_lengths_are_bytes_and_empty_body_keeps_the_space() -> None:
    body = b'{"_type":"https://in-toto.io/Statement/v1"}'
    assert dsse.pae(INTOTO, body) == b"DSSEv1 28 application/vnd.in-toto+json 43 " + body
    # LEN(type) counts UTF-8 bytes: 29 for 28 characters
    assert dsse.pae("application/vnd.exämple+json", body).startswith(
        "DSSEv1 29 application/vnd.exämple+json 43 ".encode()
    )
    assert dsse.pae(INTOTO, b"") == b"DSSEv1 28 application/vnd.in-toto+json 0 "


def test_ed25519_signature_matches_the_vector_and_verifies() -> None:
    signer = key_a()
    assert signer.public.key.public_bytes_raw().hex() == PUBLIC_A
    env = dsse.sign(base64.b64decode(PAYLOAD_B64), INTOTO, signer)
    assert msgspec.to_builtins(env)["signatures"][0]["sig"] == SIG_A  # Ed25519 is deterministic
    vector = dsse.Envelope.from_dict(
        {"payload": PAYLOAD_B64, "payloadType": INTOTO, "signatures": [{"sig": SIG_A}]}
    )
    assert dsse.verify(vector, [signer.public]) is not None


def test_url_safe_base64_is_accepted() -> None:
    vector = dsse.Envelope.from_dict(
        {
            "payload": "-_-_Pj8=",
            "payloadType": INTOTO,
            "signatures": [
                {
                    "keyid": "A",
                    "sig": "P-_KHICeR7tI6S_YyejJTRtrXhcQyQ2LYPaL8h90KjC9qN8HU_svOQ6TuDOT1HIrsGW88"
                    "6DbWNWcCmX5twLrAw==",
                }
            ],
        }
    )
    assert vector.payload == bytes.fromhex("fbffbf3e3f")
    assert dsse.verify(vector, [key_a().public]) is not None


def test_swapped_payload_type_or_flipped_byte_is_rejected() -> None:
    public = key_a().public
    swapped = dsse.Envelope.from_dict(
        {
            "payload": PAYLOAD_B64,
            "payloadType": "application/vnd.example.other+json",
            "signatures": [{"sig": SIG_A}],
        }
    )
    assert dsse.verify(swapped, [public]) is None
    good = dsse.sign(b"hello world", INTOTO, key_a())
    flipped = dsse.Envelope(b"hello worle", good.payload_type, good.signatures)
    assert dsse.verify(flipped, [public]) is None
    other = PublicKey(Ed25519PrivateKey.generate().public_key(), "other")
    assert dsse.verify(good, [other]) is None
    assert dsse.verify(good, [other, public]) == public  # any trusted key may verify


def test_malformed_envelopes_raise_envelope_error() -> None:
    for text in (
        "[]",
        "{}",
        '{"payload": "!!", "payloadType": "x", "signatures": []}',
        '{"payload": "", "payloadType": "x", "signatures": [{"keyid": "k"}]}',
        "nope",
    ):
        with pytest.raises(dsse.EnvelopeError):
            dsse.Envelope.from_json(text)


def test_interop_with_securesystemslib_both_directions() -> None:
    private = Ed25519PrivateKey.generate()
    ours = Signer(private, "test")
    sslib_key = SSlibKey.from_crypto(private.public_key())  # its own default key id
    keyid = sslib_key.keyid
    assert keyid == keyid_of(private.public_key()) == ours.keyid
    legacy = hashlib.sha256(spki_der(private.public_key())).hexdigest()
    assert legacy_keyid_of(private.public_key()) == legacy != keyid

    # ours -> securesystemslib, from the JSON form only
    env = dsse.sign(b'{"hello": "world"}', INTOTO, ours)
    theirs = SslibEnvelope.from_dict(msgspec.to_builtins(env))
    assert keyid in theirs.verify([sslib_key], threshold=1)
    tampered = msgspec.to_builtins(env)
    tampered["payload"] = base64.b64encode(b'{"hello": "World"}').decode()
    with pytest.raises(sslib_exceptions.VerificationError):
        SslibEnvelope.from_dict(tampered).verify([sslib_key], threshold=1)

    # securesystemslib -> ours
    sslib_signer = CryptoSigner(private, sslib_key)
    made = SslibEnvelope(b"payload bytes", INTOTO, {})
    made.sign(sslib_signer)
    back = dsse.Envelope.from_dict(made.to_dict())
    assert dsse.verify(back, [ours.public]) == ours.public


def test_a_bad_signature_of_any_length_is_no_signature() -> None:
    public = key_a().public
    for sig in (
        "",
        "AA==",
        base64.b64encode(b"x" * 64).decode(),
        base64.b64encode(b"x" * 200).decode(),
    ):
        vector = dsse.Envelope.from_dict(
            {"payload": PAYLOAD_B64, "payloadType": INTOTO, "signatures": [{"sig": sig}]}
        )
        assert dsse.verify(vector, [public]) is None


def test_the_envelope_is_msgspecs_encoding_of_it_byte_for_byte_the_spec_form() -> None:
    """The envelope is a Struct encoded by msgspec: the same bytes the hand-written
    `{"payload", "payloadType", "signatures": [{"keyid", "sig"}]}` gave (standard padded
    base64), one line for a report, indented for a certification record."""
    env = dsse.sign(b'{"x": "\xe9"}', INTOTO, key_a())
    spec = {
        "payload": base64.b64encode(env.payload).decode(),
        "payloadType": INTOTO,
        "signatures": [
            {
                "keyid": env.signatures[0].keyid,
                "sig": base64.b64encode(env.signatures[0].sig).decode(),
            }
        ],
    }
    assert msgspec.json.encode(env) == json.dumps(spec, separators=(",", ":")).encode()
    assert json.dumps(msgspec.to_builtins(env), indent=2) == json.dumps(spec, indent=2)
    assert dsse.Envelope.from_json(msgspec.json.encode(env)) == env
    assert "sig=" not in repr(env)  # a signature's bytes stay out of the repr
