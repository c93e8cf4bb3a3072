"""keygen and signing-key lookup: file modes, refusal to overwrite, lookup order, no leaks."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.rsa import generate_private_key
from support.cli import run_forge
from support.reports import keyid_from_pub

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
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(keys, "interactive", lambda: True)  # only a person at a terminal
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


# ----------------------------------------------------------------------------- no throwaway keys


def no_default_key() -> None:
    assert not keys.default_key_path().exists(), "no key may be created by accident"


@pytest.mark.parametrize("value", ["", "   ", "\n"])
def test_empty_signing_key_env_is_exit_2_not_a_throwaway_key(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(keys.SIGNING_KEY_ENV, value)
    monkeypatch.setattr(keys, "interactive", lambda: True)  # even for a person at a terminal
    with pytest.raises(BadInput) as info:
        keys.resolve_signer(None, Reporter())
    assert info.value.exit_code == ExitCode.BAD_INPUT
    assert "DGR_SIGNING_KEY is set but empty" in str(info.value)
    assert "--no-sign" in str(info.value)
    no_default_key()


@pytest.mark.parametrize("ci", ["true", "1", "yes"])
def test_no_key_in_ci_is_exit_2(monkeypatch: pytest.MonkeyPatch, ci: str) -> None:
    monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(keys, "interactive", lambda: True)  # a CI runner with a TTY: still no
    with pytest.raises(BadInput) as info:
        keys.resolve_signer(None, Reporter())
    assert info.value.exit_code == ExitCode.BAD_INPUT
    assert "no signing key in CI" in str(info.value) and "--no-sign" in str(info.value)
    no_default_key()


def test_no_key_without_a_terminal_is_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(keys, "interactive", lambda: False)
    with pytest.raises(BadInput) as info:
        keys.resolve_signer(None, Reporter())
    assert "no signing key" in str(info.value) and "dgr-forge keygen" in str(info.value)
    no_default_key()


def test_default_key_is_created_loudly_only_at_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(keys, "interactive", lambda: True)
    signer = keys.resolve_signer(None, Reporter())
    err = capsys.readouterr().err
    assert err.startswith("warning: created signing key") and "NEW KEY" in err
    assert signer.keyid[:16] in err and mode(keys.default_key_path()) == 0o600


def test_existing_default_key_is_used_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    made = keys.generate(keys.default_key_path())
    monkeypatch.setenv("CI", "true")
    assert keys.resolve_signer(None, Reporter()).keyid == made.keyid


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"DGR_SIGNING_KEY": "", "CI": ""}, "DGR_SIGNING_KEY is set but empty"),
        ({"CI": "true"}, "no signing key in CI"),
        ({"CI": ""}, "no signing key (no --key"),  # not CI, but stdin is not a TTY here
    ],
)
def test_cli_refuses_to_sign_with_a_throwaway_key(
    tmp_path: Path, forge_root: Path, _config_home: Path, env: dict[str, str], words: str
) -> None:
    """Through the real entry point: exit 2 with the reason, no key created, nothing written."""
    keys.generate(tmp_path / "x.pem")
    (tmp_path / "report.json").write_text("{}")
    r = run_forge(
        "certify", "--report", str(tmp_path / "report.json"),
        "--evidence", str(tmp_path / "x.pem.pub"), "--report-key", str(tmp_path / "x.pem.pub"),
        "--root", str(forge_root),
        env={"XDG_CONFIG_HOME": str(_config_home), **env},
    )  # fmt: skip
    assert r.code == ExitCode.BAD_INPUT, r
    assert words in r.stderr and "Traceback" not in r.stderr
    assert not (_config_home / "dgr-forge").exists()
    assert not (forge_root / "certifications").exists()


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("/nonexistent/ci.pem", "(/nonexistent/ci.pem)"),
        ("not a key at all\nMC4CAQAwBQYDK2VwBCIEI", None),  # a damaged secret: never echoed
    ],
)
def test_garbage_signing_key_env_is_exit_2_without_echoing_a_secret(
    monkeypatch: pytest.MonkeyPatch, value: str, shown: str | None
) -> None:
    monkeypatch.setenv(keys.SIGNING_KEY_ENV, value)
    with pytest.raises(BadInput) as info:
        keys.resolve_signer(None, Reporter())
    text = str(info.value)
    assert info.value.exit_code == ExitCode.BAD_INPUT
    assert "DGR_SIGNING_KEY is neither PEM key text nor the path of a key file" in text
    if shown:
        assert shown in text
    else:
        assert "MC4CAQ" not in text and "not a key at all" not in text
    no_default_key()


@pytest.mark.parametrize("bad_mode", [0o644, 0o666, 0o640, 0o604, 0o620])
def test_signing_key_readable_by_others_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad_mode: int
) -> None:
    keys.generate(tmp_path / "k.pem")
    key = tmp_path / "k.pem"
    before = key.read_bytes()
    key.chmod(bad_mode)
    for how in ("--key", "env", "default"):
        if how == "env":
            monkeypatch.setenv(keys.SIGNING_KEY_ENV, str(key))
        elif how == "default":
            monkeypatch.delenv(keys.SIGNING_KEY_ENV)
            keys.default_key_path().parent.mkdir(parents=True, exist_ok=True)
            key = keys.default_key_path()
            key.write_bytes(before)
            key.chmod(bad_mode)
        with pytest.raises(BadInput) as info:
            keys.resolve_signer(str(key) if how == "--key" else None, Reporter())
        assert info.value.exit_code == ExitCode.BAD_INPUT
        assert f"mode {bad_mode:04o}" in str(info.value) and f"chmod 600 {key}" in str(info.value)
        assert key.read_bytes() == before and mode(key) == bad_mode  # nothing changed
    key.chmod(0o600)
    assert keys.resolve_signer(None, Reporter()).keyid  # fixed as told: accepted


def test_signing_key_that_is_not_a_file_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "k.pem"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match="not a regular file"):
        keys.resolve_signer(str(fifo), Reporter())
    with pytest.raises(BadInput, match="NUL"):
        keys.resolve_signer(str(tmp_path / "a\x00b.pem"), Reporter())
    with pytest.raises(BadInput, match="--key: empty"):
        keys.resolve_signer("", Reporter())


@pytest.mark.parametrize(
    ("key", "env", "named"),
    [
        ("", None, "--key: empty"),
        ("  ", None, "--key: empty"),
        (None, "", "DGR_SIGNING_KEY is set but empty"),
        (None, " \n", "DGR_SIGNING_KEY is set but empty"),
    ],
)
def test_one_key_lookup_an_empty_value_is_exit_2_for_both_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str | None, env: str | None, named: str
) -> None:
    """The full load (`resolve_signer`) and a no-op build's cheap fingerprint share one
    lookup: an empty value is refused by both, never a fall-through to another key."""
    from dgr_forge.lanes.signing import SigningKey

    keys.generate(keys.default_key_path())  # a key a fall-through would find
    if env is not None:
        monkeypatch.setenv(keys.SIGNING_KEY_ENV, env)
    with pytest.raises(BadInput, match=named) as full:
        keys.resolve_signer(key, Reporter())
    with pytest.raises(BadInput, match=named) as cheap:
        SigningKey(key, True, Reporter()).fingerprint()
    assert full.value.exit_code == cheap.value.exit_code == ExitCode.BAD_INPUT
