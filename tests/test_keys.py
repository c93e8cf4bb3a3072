"""keygen and signing-key lookup: file modes, refusal to overwrite, lookup order, no leaks."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.rsa import generate_private_key
from forgetest import run_forge
from reports_support import keyid_from_pub

from dgr_forge.attest import keys
from dgr_forge.core.errors import BadInput, ExitCode
from dgr_forge.core.output import Reporter


@pytest.fixture(autouse=True)
def _config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Never touch the real ~/.config: every test gets its own config directory."""
    config = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    monkeypatch.delenv(keys.SIGNING_KEY_ENV, raising=False)
    monkeypatch.delenv(keys.VERIFY_KEY_ENV, raising=False)
    return config


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_keygen_writes_pkcs8_0600_and_spki_pub(tmp_path: Path) -> None:
    out = tmp_path / "k" / "signing.pem"
    r = run_forge("keygen", "--out", str(out), "--json")
    assert r.code == 0, r
    assert mode(out) == 0o600
    pub = Path(str(out) + ".pub")
    assert mode(pub) == 0o644
    pem = out.read_bytes()
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS#8, unencrypted
    key = serialization.load_pem_private_key(pem, password=None)
    assert isinstance(key, Ed25519PrivateKey)
    assert pub.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    # the keyid is the documented derivation, computed here from the .pub alone
    assert r.json["keyid"] == keyid_from_pub(pub)
    assert r.json["private_key"] == str(out)
    # the private key is never printed
    body = pem.decode().splitlines()[1]
    assert body not in r.stdout and body not in r.stderr
    # no temp files left behind
    assert sorted(p.name for p in out.parent.iterdir()) == ["signing.pem", "signing.pem.pub"]


def test_keygen_mode_is_0600_even_with_a_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        signer = keys.generate(tmp_path / "k.pem")
    finally:
        os.umask(old)
    assert mode(tmp_path / "k.pem") == 0o600
    assert signer.keyid == keyid_from_pub(tmp_path / "k.pem.pub")
    assert "PRIVATE" not in repr(signer)


def test_keygen_default_location_is_the_config_dir(_config_home: Path) -> None:
    r = run_forge("keygen", "--json")
    assert r.code == 0, r
    key = _config_home / "dgr-forge" / "signing-key.pem"
    assert mode(key) == 0o600
    assert mode(key.parent) == 0o700
    assert (_config_home / "dgr-forge" / "signing-key.pem.pub").is_file()
    assert r.json["private_key"] == str(key)


def test_default_location_falls_back_to_home_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert keys.default_key_path() == tmp_path / "home/.config/dgr-forge/signing-key.pem"


def test_keygen_refuses_to_overwrite_then_force_replaces(tmp_path: Path) -> None:
    out = tmp_path / "signing.pem"
    assert run_forge("keygen", "--out", str(out)).code == 0
    before = out.read_bytes(), Path(str(out) + ".pub").read_bytes()
    r = run_forge("keygen", "--out", str(out))
    assert r.code == ExitCode.BAD_INPUT, r
    assert "already exists" in r.stderr and "--force" in r.stderr
    assert (out.read_bytes(), Path(str(out) + ".pub").read_bytes()) == before  # nothing lost
    r = run_forge("keygen", "--out", str(out), "--force")
    assert r.code == 0, r
    assert out.read_bytes() != before[0]
    assert mode(out) == 0o600


def test_resolve_signer_order_key_then_env_then_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    a = keys.generate(tmp_path / "a.pem")
    b = keys.generate(tmp_path / "b.pem")
    out = Reporter()
    monkeypatch.setenv(keys.SIGNING_KEY_ENV, str(tmp_path / "b.pem"))
    assert keys.resolve_signer(str(tmp_path / "a.pem"), out).keyid == a.keyid  # --key wins
    assert keys.resolve_signer(None, out).keyid == b.keyid  # then the env path
    pem = (tmp_path / "a.pem").read_text()
    monkeypatch.setenv(keys.SIGNING_KEY_ENV, pem)  # the PEM itself, as CI secrets are
    signer = keys.resolve_signer(None, out)
    assert signer.keyid == a.keyid
    assert "inline PEM" in signer.source and "BEGIN" not in signer.source
    monkeypatch.delenv(keys.SIGNING_KEY_ENV)
    capsys.readouterr()
    first = keys.resolve_signer(None, out)  # the default key, created on first use ...
    notice = capsys.readouterr().err
    assert "created signing key" in notice and len(notice.strip().splitlines()) == 1
    assert keys.default_key_path().is_file() and mode(keys.default_key_path()) == 0o600
    again = keys.resolve_signer(None, out)  # ... and reused, silently, afterwards
    assert again.keyid == first.keyid
    assert capsys.readouterr().err == ""


def test_bad_signing_keys_are_exit_2_without_leaking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = Reporter()
    enc = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"pw"),
    )
    (tmp_path / "enc.pem").write_bytes(enc)
    with pytest.raises(BadInput, match="encrypted"):
        keys.resolve_signer(str(tmp_path / "enc.pem"), out)
    rsa = generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    (tmp_path / "rsa.pem").write_bytes(rsa)
    with pytest.raises(BadInput, match="not an Ed25519 key"):
        keys.resolve_signer(str(tmp_path / "rsa.pem"), out)
    with pytest.raises(BadInput, match="no such private key"):
        keys.resolve_signer(str(tmp_path / "missing.pem"), out)
    # a damaged inline secret: the error names the variable, never the content
    good = keys.generate(tmp_path / "g.pem")
    pem = (tmp_path / "g.pem").read_text()
    damaged = pem.replace(pem.splitlines()[1], pem.splitlines()[1][:-4] + "AAAA")
    monkeypatch.setenv(keys.SIGNING_KEY_ENV, damaged[:-30])
    with pytest.raises(BadInput) as info:
        keys.resolve_signer(None, out)
    assert keys.SIGNING_KEY_ENV in str(info.value)
    assert pem.splitlines()[1][:20] not in str(info.value)
    assert good.keyid  # the good key file itself was left alone
    assert (tmp_path / "g.pem").read_text() == pem


def test_resolve_verifier_order_and_missing_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = keys.generate(tmp_path / "a.pem")
    b = keys.generate(tmp_path / "b.pem")
    with pytest.raises(BadInput, match="no public key"):
        keys.resolve_verifier(None)
    monkeypatch.setenv(keys.VERIFY_KEY_ENV, str(tmp_path / "b.pem.pub"))
    assert keys.resolve_verifier(str(tmp_path / "a.pem.pub")).keyid == a.keyid
    v = keys.resolve_verifier(None)
    assert v.keyid == b.keyid and keys.VERIFY_KEY_ENV in v.source
    monkeypatch.setenv(keys.VERIFY_KEY_ENV, (tmp_path / "a.pem.pub").read_text())
    assert keys.resolve_verifier(None).keyid == a.keyid
    monkeypatch.delenv(keys.VERIFY_KEY_ENV)
    default = keys.generate(keys.default_key_path())
    v = keys.resolve_verifier(None)
    assert v.keyid == default.keyid and v.source.endswith("signing-key.pem.pub")


def test_keygen_into_an_unwritable_place_is_exit_2(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory\n")
    r = run_forge("keygen", "--out", str(blocker / "k.pem"))
    assert r.code == ExitCode.BAD_INPUT, r
    assert "cannot write the key" in r.stderr and "--out" in r.stderr
    assert blocker.read_text() == "not a directory\n"
