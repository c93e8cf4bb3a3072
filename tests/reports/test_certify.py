"""certify and advertised lanes: a lane is advertised only while a trusted, valid
certification matches the current recipe, pin and series."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
from cryptography.hazmat.primitives import serialization
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.signer import SSlibKey
from support.cli import run_forge
from support.git import Upstream
from support.reports import keyid_from_pub, lane_build, write_manifest
from support.roots import REPO

from dgr_forge.attest import dsse, keys, reports
from dgr_forge.certify import records
from dgr_forge.certify.shapes import Entry
from dgr_forge.core.errors import ExitCode
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import sha256_file
from dgr_forge.core.output import Reporter
from dgr_forge.host import recipes
from dgr_forge.upstream import manifest


@pytest.fixture
def builder_key(tmp_path: Path) -> Path:
    """The CI key that signs build reports."""
    keys.generate(tmp_path / "ci.pem")
    return tmp_path / "ci.pem"


@pytest.fixture
def release_key(tmp_path: Path) -> Path:
    """The release engineer's key that signs certifications."""
    keys.generate(tmp_path / "release.pem")
    return tmp_path / "release.pem"


@pytest.fixture
def report(forge: Forge, builder_key: Path) -> Path:
    return reports.write_report(forge, lane_build(forge), keys.load_signer(builder_key), Reporter())


@pytest.fixture
def evidence(tmp_path: Path) -> Path:
    path = tmp_path / "hw-run.log"
    path.write_text("test-backend-ops: 1234/1234 passed\n")
    return path


def trust(forge: Forge, key: Path) -> None:
    d = forge.root / "certifications/trusted-keys"
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(str(key) + ".pub", d / (key.stem + ".pub"))


def run_certify(forge: Forge, report: Path, evidence: Path, key: Path, *extra: str) -> Any:
    return run_forge(
        "certify", "--report", str(report), "--evidence", str(evidence), "--key", str(key),
        "--report-key", str(forge.root.parent / "ci.pem.pub"),
        "--root", str(forge.root), "--json", *extra,
    )  # fmt: skip


def _entries(forge: Forge, extra: list[keys.PublicKey] | None = None) -> list[Entry]:
    m = manifest.load(forge.upstream_manifest, forge.root)
    return records.entries(forge, recipes.load_all(forge.recipes_dir, forge.root), m, extra)


def advertised(forge: Forge, extra: list[keys.PublicKey] | None = None) -> dict[str, Entry]:
    """The lanes with a valid attested record (recorded, shown, never advertised)."""
    return {e.lane: e for e in _entries(forge, extra) if e.reason == "attested, not checked"}


def status(forge: Forge) -> Entry | SimpleNamespace:
    return next(iter(_entries(forge)), SimpleNamespace(reason="none"))


def record_body(path: Path) -> Any:
    return json.loads(base64.b64decode(json.loads(path.read_text())["payload"]))


def test_certification_binds_the_lane_and_lapses_when_the_pin_moves(
    forge: Forge, upstream: Upstream, patch_text: str, report: Path, evidence: Path,
    release_key: Path,
) -> None:  # fmt: skip
    trust(forge, release_key)
    assert advertised(forge) == {}
    assert status(forge).reason == "none"
    r = run_certify(forge, report, evidence, release_key, "--hardware", "2x RTX 4090, driver 560")
    assert r.code == 0, r
    assert r.json["trusted"] is True
    # the one record format, under the lane's `attested/`, named by the hardware's class
    cert_file = forge.root / "certifications/cpu/attested/described-2x-rtx-4090-driver-560.json"
    assert r.json["certification"] == str(cert_file)
    assert r.json["kind"] == "attested" and r.json["model"] == "attested"
    m = manifest.load(forge.upstream_manifest, forge.root)
    lanes = advertised(forge)
    assert list(lanes) == ["cpu"]
    cert, body = lanes["cpu"], record_body(cert_file)
    assert body["kind"] == "attested" and body["steps"] == [] and body["model"] is None
    assert body["recipe"]["sha256"] == sha256_file(forge.recipes_dir / "cpu.toml")
    assert body["upstream"]["commit"] == m.commit == upstream.head
    assert body["seriesDigest"] == m.series_digest
    assert body["report"]["sha256"] == r.json["report_sha256"] == sha256_file(report)
    assert cert.evidence_sha256 == r.json["evidence_sha256"] == sha256_file(evidence)
    assert body["hardware"] == {
        "class": "described-2x-rtx-4090-driver-560", "identity": None,
        "description": "2x RTX 4090, driver 560",
    }  # fmt: skip
    assert cert.keyid == keyid_from_pub(Path(str(release_key) + ".pub"))
    assert not cert.advertised  # a person's evidence is never advertised

    # a rebase moves the pin: the certification lapses ...
    write_manifest(forge.root, upstream, upstream.commits[-2], patch_text)
    assert advertised(forge) == {}
    assert status(forge).reason == "lapsed: the upstream pin moved since certification"
    assert cert_file.is_file()  # ... but nothing is deleted
    # ... and is valid again at the certified pin
    write_manifest(forge.root, upstream, upstream.head, patch_text)
    assert list(advertised(forge)) == ["cpu"]


def test_recipe_or_series_change_lapses_the_certification(
    forge: Forge, upstream: Upstream, patch_text: str, report: Path, evidence: Path,
    release_key: Path,
) -> None:  # fmt: skip
    trust(forge, release_key)
    assert run_certify(forge, report, evidence, release_key, "--hardware", "rig").code == 0
    recipe = forge.recipes_dir / "cpu.toml"
    original = recipe.read_text()
    recipe.write_text(original.replace('"OFF"', '"ON"'))
    assert advertised(forge) == {}
    assert status(forge).reason == "lapsed: the recipe changed since certification"
    recipe.write_text(original)
    assert list(advertised(forge)) == ["cpu"]
    changed = patch_text.replace("add layer range ownership", "own layer ranges")
    (forge.root / "patches/llama.cpp/0001-layer-owner.patch").write_text(changed)
    write_manifest(forge.root, upstream, upstream.head, changed)
    assert advertised(forge) == {}
    assert status(forge).reason == "lapsed: the patch series changed since certification"


def test_untrusted_or_tampered_certifications_are_not_advertised(
    forge: Forge, report: Path, evidence: Path, release_key: Path, tmp_path: Path
) -> None:
    r = run_certify(forge, report, evidence, release_key, "--hardware", "rig")
    assert r.code == 0, r
    assert r.json["trusted"] is False
    assert "trusted-keys" in r.stderr  # says how to make it count
    assert advertised(forge) == {}
    assert status(forge).reason.startswith("untrusted: no trusted keys")
    keys.generate(tmp_path / "someone-else.pem")
    trust(forge, tmp_path / "someone-else.pem")
    assert status(forge).reason.startswith("untrusted: signature does not verify")
    # an explicitly passed key counts too (lanes --advertised --key PUB)
    extra = [keys.load_public_file(Path(str(release_key) + ".pub"))]
    assert list(advertised(forge, extra)) == ["cpu"]
    # flip one byte of the signed record: no longer valid
    trust(forge, release_key)
    cert_file = Path(r.json["certification"])
    env = json.loads(cert_file.read_text())
    body = json.loads(base64.b64decode(env["payload"]))
    body["recipe"]["sha256"] = body["recipe"]["sha256"][::-1]
    env["payload"] = base64.b64encode(json.dumps(body).encode()).decode()
    cert_file.write_text(json.dumps(env))
    assert advertised(forge) == {}
    assert "signature does not verify" in status(forge).reason


def test_certification_verifies_with_securesystemslib(
    forge: Forge, report: Path, evidence: Path, release_key: Path
) -> None:
    r = run_certify(forge, report, evidence, release_key, "--hardware", "rig")
    assert r.code == 0, r
    env = json.loads(Path(r.json["certification"]).read_text())
    assert env["payloadType"] == records.CERT_PAYLOAD_TYPE
    pub = Path(str(release_key) + ".pub")
    key = SSlibKey.from_crypto(
        serialization.load_pem_public_key(pub.read_bytes()),  # type: ignore[arg-type]
        keyid=keyid_from_pub(pub),
    )
    assert list(SslibEnvelope.from_dict(env).verify([key], threshold=1)) == [keyid_from_pub(pub)]


def test_certify_probes_the_hardware_when_not_told(
    forge: Forge, report: Path, evidence: Path, release_key: Path
) -> None:
    r = run_certify(forge, report, evidence, release_key)
    assert r.code == 0, r
    hw = r.json["hardware"]["identity"]  # the one probe `certify --lane` uses too
    assert hw["probed"] is True and hw["cpu"]["model"] and hw["os"]["system"]
    assert r.json["hardware_class"] == Path(r.json["certification"]).stem
    assert r.json["hardware_class"].startswith("cpu-")
    if shutil.which("nvidia-smi"):
        assert any(g["vendor"] == "nvidia" for g in hw["gpus"])


def test_certify_refuses_a_report_that_fails_verification(
    forge: Forge, report: Path, evidence: Path, release_key: Path
) -> None:
    env = json.loads(report.read_text())
    body = bytearray(base64.b64decode(env["payload"]))
    body[body.index(b"llama-cli")] ^= 1
    env["payload"] = base64.b64encode(bytes(body)).decode()
    report.write_text(json.dumps(env) + "\n")
    r = run_certify(forge, report, evidence, release_key, "--hardware", "rig")
    assert r.code == ExitCode.FAILED, r
    assert "failed verification" in r.stderr and "bad signature" in r.stderr
    assert not (forge.root / "certifications").exists()


def test_certify_refuses_a_report_of_other_inputs(
    forge: Forge, upstream: Upstream, patch_text: str, report: Path, evidence: Path,
    release_key: Path,
) -> None:  # fmt: skip
    write_manifest(forge.root, upstream, upstream.commits[-2], patch_text)
    manifest_before = forge.upstream_manifest.read_text()
    r = run_certify(forge, report, evidence, release_key, "--hardware", "rig")
    assert r.code == ExitCode.BAD_INPUT, r
    assert "upstream commit" in r.stderr and "rebuild the lane" in r.stderr
    assert not (forge.root / "certifications").exists()
    assert forge.upstream_manifest.read_text() == manifest_before


def test_certify_missing_evidence_is_exit_2(
    forge: Forge, report: Path, release_key: Path, tmp_path: Path
) -> None:
    r = run_certify(forge, report, tmp_path / "no-such.log", release_key, "--hardware", "rig")
    assert r.code == ExitCode.BAD_INPUT, r
    assert "no such evidence file" in r.stderr
    assert not (forge.root / "certifications").exists()


def test_certify_refuses_a_signing_key_readable_by_others(
    forge: Forge, report: Path, evidence: Path, release_key: Path
) -> None:
    release_key.chmod(0o644)
    r = run_certify(forge, report, evidence, release_key, "--hardware", "rig")
    assert r.code == ExitCode.BAD_INPUT, r
    assert "mode 0644" in r.stderr and f"chmod 600 {release_key}" in r.stderr
    assert not (forge.root / "certifications").exists()  # nothing signed, nothing written
    release_key.chmod(0o600)
    assert run_certify(forge, report, evidence, release_key, "--hardware", "rig").code == 0


def test_certify_refuses_a_symlinked_trust_anchor(
    forge: Forge, report: Path, evidence: Path, release_key: Path
) -> None:
    d = forge.root / "certifications/trusted-keys"
    d.mkdir(parents=True)
    (d / "release.pub").symlink_to(str(release_key) + ".pub")
    r = run_certify(forge, report, evidence, release_key, "--hardware", "rig")
    assert r.code == ExitCode.BAD_INPUT, r
    assert "certifications/trusted-keys/release.pub" in r.stderr and "symlink" in r.stderr
    assert r.json["exit_code"] == 2 and "Traceback" not in r.stderr
    assert not (forge.root / "certifications/cpu.json").exists()  # refused before writing


def test_a_record_of_the_old_form_is_refused_naming_its_replacement(
    forge: Forge, report: Path, evidence: Path, release_key: Path
) -> None:
    """`certifications/<lane>.json` (one attested file per lane, before the one record
    format) is not read: `lanes` shows it invalid, with the command that replaces it."""
    trust(forge, release_key)
    shutil.copy(REPO / "toolchains" / "probes.toml", forge.toolchains_dir / "probes.toml")
    r = run_certify(forge, report, evidence, release_key, "--hardware", "rig")
    assert r.code == 0, r
    old = forge.root / "certifications/cpu.json"
    shutil.copy(r.json["certification"], old)
    Path(r.json["certification"]).unlink()
    (entry,) = _entries(forge)
    assert entry.reason.startswith("invalid: certifications/cpu.json is a record of an older")
    assert "certify --attested FILE --report R" in entry.reason and not entry.advertised
    shown = run_forge("lanes", "--root", str(forge.root), "--json")
    assert shown.code == 0, shown
    cpu = shown.json["lanes"][0]["certification"]
    assert cpu["attested"] == entry.reason and cpu["reason"] == entry.reason


def test_a_missing_report_key_names_certifys_own_option(
    forge: Forge, report: Path, evidence: Path, release_key: Path
) -> None:
    """The hint names the option certify has (`--report-key`), not `--key` (its signer)."""
    r = run_forge(
        "certify", "--report", str(report), "--evidence", str(evidence), "--key",
        str(release_key), "--hardware", "rig", "--root", str(forge.root),
    )  # fmt: skip
    assert r.code == ExitCode.BAD_INPUT, r
    assert "pass --report-key PUB" in r.stderr and "pass --key" not in r.stderr, r.stderr


def test_a_lapse_names_every_input_that_moved(
    forge: Forge, upstream: Upstream, patch_text: str, report: Path, evidence: Path,
    release_key: Path,
) -> None:  # fmt: skip
    """Issue 43 #4: the pin and the series both moved, and the recipe: all three named."""
    trust(forge, release_key)
    assert run_certify(forge, report, evidence, release_key, "--hardware", "rig").code == 0
    recipe = forge.recipes_dir / "cpu.toml"
    recipe.write_text(recipe.read_text().replace('"OFF"', '"ON"'))
    changed = patch_text.replace("add layer range ownership", "own layer ranges")
    (forge.root / "patches/llama.cpp/0001-layer-owner.patch").write_text(changed)
    write_manifest(forge.root, upstream, upstream.commits[-2], changed)
    reason = status(forge).reason
    assert reason.startswith("lapsed: "), reason
    for moved in ("the recipe changed", "the upstream pin moved", "the patch series changed"):
        assert moved in reason, reason


def test_a_record_written_before_the_typed_record_is_still_read(
    forge: Forge, report: Path, evidence: Path, release_key: Path
) -> None:
    """A record is its typed payload (`records.CertRecord`), written with the keys the
    hand-built dict had, and one an older forge signed (inputs without `tools`, before the
    host's tools were bound) is read as it was: valid, attested, not checked."""
    trust(forge, release_key)
    r = run_certify(forge, report, evidence, release_key, "--hardware", "rig")
    assert r.code == 0, r
    cert_file = Path(r.json["certification"])
    env = json.loads(cert_file.read_text())
    body = json.loads(base64.b64decode(env["payload"]))
    assert set(body) == {
        "_type", "kind", "lane", "recipe", "upstream", "seriesDigest", "inputs",
        "inputDigest", "report", "model", "hardware", "device", "steps", "evidence",
        "verdict", "certifiedOn",
    }  # fmt: skip
    assert set(body["report"]) == {"name", "sha256", "keyid", "subjects"}
    del body["inputs"]["tools"]
    payload = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    signed = dsse.sign(payload, env["payloadType"], keys.load_signer(release_key))
    cert_file.write_text(json.dumps(msgspec.to_builtins(signed), indent=2) + "\n")
    (entry,) = _entries(forge)
    assert entry.reason == "attested, not checked", entry
    assert entry.evidence_sha256 == sha256_file(evidence)
