"""Hardened trust anchors (issue 12 #4): a trusted key must be a regular file, not writable
by others, a public key only, in a directory that is not world-writable; otherwise exit 2
naming the file, and nothing is trusted. Signing-key permissions are in tests/test_keys.py."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
from support.cli import run_forge
from support.roots import REPO

from dgr_forge.attest import keys
from dgr_forge.certify import trust as certify
from dgr_forge.core.errors import BadInput, ExitCode
from dgr_forge.core.forge import Forge

TRUSTED = "certifications/trusted-keys"


@pytest.fixture
def forge(tmp_path: Path) -> Forge:
    root = tmp_path / "root"
    (root / TRUSTED).mkdir(parents=True)
    (root / "manifests").mkdir()
    return Forge(root=root, workspace=root / ".dgr")


@pytest.fixture
def key(tmp_path: Path) -> Path:
    keys.generate(tmp_path / "release.pem")
    return tmp_path / "release.pem"


def pub_bytes(key: Path) -> bytes:
    return Path(str(key) + ".pub").read_bytes()


def refused(forge: Forge, *words: str) -> str:
    with pytest.raises(BadInput) as info:
        certify.trusted_keys(forge)
    assert info.value.exit_code == ExitCode.BAD_INPUT
    text = str(info.value)
    for word in words:
        assert word in text, text
    assert info.value.hint
    return text


def test_a_plain_public_key_is_trusted(forge: Forge, key: Path) -> None:
    (forge.root / TRUSTED / "release.pub").write_bytes(pub_bytes(key))
    (forge.root / TRUSTED / "release.pub").chmod(0o644)
    assert [k.keyid for k in certify.trusted_keys(forge)] == [keys.load_signer(key).keyid]


def test_a_symlinked_trusted_key_is_refused(forge: Forge, key: Path, tmp_path: Path) -> None:
    outside = tmp_path / "planted.pub"
    outside.write_bytes(pub_bytes(key))
    (forge.root / TRUSTED / "planted.pub").symlink_to(outside)
    refused(forge, f"{TRUSTED}/planted.pub", "symlink")
    assert outside.read_bytes() == pub_bytes(key)  # nothing touched


@pytest.mark.parametrize("bad_mode", [0o664, 0o646, 0o666, 0o777])
def test_a_trusted_key_writable_by_others_is_refused(
    forge: Forge, key: Path, bad_mode: int
) -> None:
    path = forge.root / TRUSTED / "release.pub"
    path.write_bytes(pub_bytes(key))
    path.chmod(bad_mode)
    text = refused(forge, f"{TRUSTED}/release.pub", "writable by others", f"{bad_mode:04o}")
    assert "chmod go-w" in text
    path.chmod(0o644)  # fixed as told: trusted
    assert len(certify.trusted_keys(forge)) == 1


def test_a_private_key_among_trusted_keys_is_refused(forge: Forge, key: Path) -> None:
    path = forge.root / TRUSTED / "oops.pub"
    path.write_bytes(key.read_bytes())  # the private key committed by mistake
    path.chmod(0o644)
    text = refused(forge, f"{TRUSTED}/oops.pub", "PRIVATE key")
    assert "BEGIN" not in text  # the key material is never echoed


def test_a_world_writable_trusted_keys_directory_is_refused(forge: Forge, key: Path) -> None:
    d = forge.root / TRUSTED
    (d / "release.pub").write_bytes(pub_bytes(key))
    for bad in (0o777, 0o1777):  # the sticky bit does not stop anyone adding a key
        d.chmod(bad)
        refused(forge, TRUSTED, "world-writable", "chmod o-w")
    d.chmod(0o755)
    assert len(certify.trusted_keys(forge)) == 1


def test_a_symlinked_trusted_keys_directory_is_refused(forge: Forge, tmp_path: Path) -> None:
    d = forge.root / TRUSTED
    d.rmdir()
    (tmp_path / "elsewhere").mkdir()
    d.symlink_to(tmp_path / "elsewhere")
    refused(forge, TRUSTED, "not a directory")


def test_a_fifo_among_trusted_keys_is_refused_without_blocking(forge: Forge) -> None:
    os.mkfifo(forge.root / TRUSTED / "pipe.pub")
    refused(forge, f"{TRUSTED}/pipe.pub", "not a regular file")


def test_lanes_with_a_hostile_trust_anchor_exits_2_naming_it(
    forge_root: Path, key: Path, tmp_path: Path
) -> None:
    (forge_root / "recipes" / "cpu.toml").write_text(
        'schema = 1\n[lane]\nbackend = "CPU"\n[cmake]\noptions = { GGML_NATIVE = "OFF" }\n'
    )
    # every input `lanes` reads is loaded first (the command context): a complete root
    (forge_root / "toolchains").mkdir(exist_ok=True)
    shutil.copyfile(REPO / "toolchains" / "probes.toml", forge_root / "toolchains" / "probes.toml")
    d = forge_root / TRUSTED
    d.mkdir(parents=True)
    (d / "release.pub").write_bytes(pub_bytes(key))
    (d / "release.pub").chmod(0o666)
    r = run_forge("--root", str(forge_root), "--json", "lanes", "--advertised")
    assert r.code == ExitCode.BAD_INPUT, r
    assert f"{TRUSTED}/release.pub" in r.stderr and "writable by others" in r.stderr
    assert r.json["ok"] is False and "Traceback" not in r.stderr
    assert stat.S_IMODE((d / "release.pub").stat().st_mode) == 0o666  # nothing changed


# ----------------------------------------------------------------------------- owners (issue 21 #5)

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="simulating other owners needs root")
OTHER = 54321


@as_root
def test_a_trusted_key_owned_by_another_user_is_refused(forge: Forge, key: Path) -> None:
    path = forge.root / TRUSTED / "release.pub"
    path.write_bytes(pub_bytes(key))
    path.chmod(0o644)
    os.chown(path, OTHER, OTHER)
    refused(forge, f"{TRUSTED}/release.pub", f"uid {OTHER}", "owner")
    os.chown(path, 0, 0)  # root may own an anchor
    assert len(certify.trusted_keys(forge)) == 1


@as_root
def test_the_checkouts_owner_may_own_the_anchors(forge: Forge, key: Path) -> None:
    path = forge.root / TRUSTED / "release.pub"
    path.write_bytes(pub_bytes(key))
    path.chmod(0o644)
    for p in (forge.root, forge.root / "certifications", forge.root / TRUSTED, path):
        os.chown(p, 1000, 1000)
    assert len(certify.trusted_keys(forge)) == 1
    os.chown(path, OTHER, OTHER)
    refused(forge, f"{TRUSTED}/release.pub", f"uid {OTHER}")


@as_root
@pytest.mark.parametrize("rel", ["certifications", TRUSTED])
def test_a_group_writable_anchor_directory_is_refused(forge: Forge, rel: str) -> None:
    (forge.root / rel).chmod(0o775)
    assert len(certify.trusted_keys(forge)) == 0  # the owner's private group: only the owner
    os.chown(forge.root / rel, 0, OTHER)  # a shared group
    refused(forge, rel, "group-writable", "chmod g-w")


@as_root
@pytest.mark.parametrize("rel", ["certifications", TRUSTED])
def test_an_anchor_directory_owned_by_another_user_is_refused(forge: Forge, rel: str) -> None:
    os.chown(forge.root / rel, OTHER, OTHER)
    refused(forge, rel, f"uid {OTHER}")


def test_a_certifications_directory_symlinked_out_of_the_checkout_is_refused(
    forge_root: Path, key: Path, tmp_path: Path
) -> None:
    (forge_root / "recipes" / "cpu.toml").write_text(
        'schema = 1\n[lane]\nbackend = "CPU"\n[cmake]\noptions = { GGML_NATIVE = "OFF" }\n'
    )
    (forge_root / "toolchains").mkdir(exist_ok=True)  # `lanes` reads the probes first
    shutil.copyfile(REPO / "toolchains" / "probes.toml", forge_root / "toolchains" / "probes.toml")
    outside = tmp_path / "outside-certs"
    (outside / "trusted-keys").mkdir(parents=True)
    (outside / "trusted-keys" / "release.pub").write_bytes(pub_bytes(key))
    (forge_root / "certifications").symlink_to(outside)
    r = run_forge("--root", str(forge_root), "--json", "lanes", "--advertised")
    assert r.code == ExitCode.BAD_INPUT, r
    assert "certifications: not a directory" in r.stderr, r
