"""End to end with a real CMake + Ninja build of the test upstream: the signed report
verifies (dgr-forge and securesystemslib), a rebuild of the same inputs differs only in run
details, the CI secret never leaks, and `lanes --advertised` follows certification."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.signer import SSlibKey
from support.cli import run_forge
from support.git import Upstream
from support.reports import keyid_from_pub, make_patch, payload_of, read_envelope, write_manifest

from dgr_forge.core.errors import ExitCode
from dgr_forge.core.fsutil import sha256_file

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

ATTESTED = "attested, not checked"


def forge_root(tmp_path: Path, upstream: Upstream, patch_text: str) -> Path:
    """A forge root with the project's real cpu recipe, toolchains and CMake modules."""
    from support.roots import make_forge_root

    root = make_forge_root(tmp_path / "forge", upstream)
    (root / "patches/llama.cpp/0001-layer-owner.patch").write_text(patch_text)
    write_manifest(root, upstream, upstream.head, patch_text)
    shutil.copy(REPO / "recipes/cpu.toml", root / "recipes/cpu.toml")
    for d in ("toolchains", "cmake"):
        shutil.rmtree(root / d)
        shutil.copytree(REPO / d, root / d)
    return root


def test_real_build_report_verifies_certifies_and_lapses(
    tmp_path: Path, upstream: Upstream
) -> None:
    patch_text = make_patch(upstream)
    root = forge_root(tmp_path, upstream, patch_text)
    key = tmp_path / "ci.pem"
    assert run_forge("keygen", "--out", str(key)).code == 0
    pub = tmp_path / "ci.pem.pub"
    pem = key.read_text()
    secret = {"DGR_SIGNING_KEY": pem}  # as a CI secret: the PEM itself

    r = run_forge("build", "--lane", "cpu", "-j", "2", "--root", str(root), "--json", env=secret)
    assert r.code == 0, r
    (lane,) = r.json["lanes"]
    report = Path(lane["report"])
    assert report.parent == root / ".dgr/reports" and report.name.endswith(".intoto.jsonl")

    # the private key appears nowhere: output, report, logs, state
    body_lines = [line for line in pem.splitlines() if "-----" not in line]
    outputs = [r.stdout, r.stderr]
    outputs += [
        p.read_text(errors="replace")
        for p in (root / ".dgr").rglob("*")
        if p.is_file() and p.suffix in {".jsonl", ".log", ".json", ".txt"}
    ]
    for text in outputs:
        assert not any(line in text for line in body_lines)

    # dgr-forge verifies it, artifacts included ...
    r = run_forge("report", "verify", str(report), "--key", str(pub), "--artifacts", "--json")
    assert r.code == 0, r
    assert r.json["key"]["keyid"] == keyid_from_pub(pub)
    built = {
        Path(a["path"]).relative_to(root / ".dgr").as_posix(): a["sha256"]
        for a in lane["artifacts"]
    }
    assert built and {a["name"]: a["expected"] for a in r.json["artifacts"]} == built
    # ... and so does securesystemslib, given only the public key
    sslib_key = SSlibKey.from_crypto(
        serialization.load_pem_public_key(pub.read_bytes()),  # type: ignore[arg-type]
        keyid=keyid_from_pub(pub),
    )
    assert SslibEnvelope.from_dict(read_envelope(report)).verify([sslib_key], threshold=1)
    st = payload_of(read_envelope(report))
    deps = st["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert deps[1]["name"] == "patches/llama.cpp/0001-layer-owner.patch"
    assert {d["name"] for d in deps} >= {"cmake", "ninja", "c-compiler", "cxx-compiler"}

    r = run_forge("report", "show", str(report), "--json")
    assert r.code == 0 and r.json["summary"]["patches"][0]["name"].endswith("layer-owner.patch")

    # lanes: not advertised before certification
    r = run_forge("lanes", "--advertised", "--root", str(root), "--json")
    assert r.code == 0, r
    assert r.json["advertised"] == [] and r.json["lanes"] == []
    r = run_forge("lanes", "--root", str(root), "--json")
    cpu = next(row for row in r.json["lanes"] if row["lane"] == "cpu")
    assert cpu["certified"] is False and cpu["certification"]["reason"] == "none"

    # certify on "hardware"; the key is not trusted by the root yet
    evidence = tmp_path / "evidence.log"
    evidence.write_text("llama-cli: owner(7)=1 ok\n")
    r = run_forge(
        "certify",
        "--report",
        str(report),
        "--evidence",
        str(evidence),
        "--key",
        str(key),
        "--report-key",
        str(pub),
        "--hardware",
        "test host",
        "--root",
        str(root),
        "--json",
    )
    assert r.code == 0, r
    assert r.json["trusted"] is False and r.json["report_sha256"] == sha256_file(report)
    record = Path(r.json["certification"])
    r = run_forge("lanes", "--advertised", "--root", str(root), "--json")
    assert r.code == 0 and r.json["advertised"] == [], r
    # a person's evidence is recorded, valid with the key, and never advertised (issue 30)
    r = run_forge("lanes", "--key", str(pub), "--root", str(root), "--json")
    assert r.code == 0 and r.json["lanes"][0]["certification"]["reason"] == ATTESTED, r
    r = run_forge("lanes", "--advertised", "--key", str(pub), "--root", str(root), "--json")
    assert r.code == 0 and r.json["advertised"] == [], r
    # committed as trusted by the release engineers
    (root / "certifications/trusted-keys").mkdir(parents=True)
    shutil.copy(pub, root / "certifications/trusted-keys/release.pub")
    r = run_forge("lanes", "--root", str(root), "--json")
    assert r.code == 0, r
    assert r.json["lanes"][0]["certification"]["reason"] == ATTESTED
    assert r.json["lanes"][0]["certification"]["record"]["evidence_sha256"] == sha256_file(evidence)
    r = run_forge("lanes", "--advertised", "--root", str(root), "--json")
    assert r.code == 0 and r.json["advertised"] == [], r
    r = run_forge("lanes", "--root", str(root))
    assert "cpu" in r.stdout and ATTESTED in r.stdout  # the table is the answer: stdout

    # a rebuild of the same inputs: the statement differs only in run details
    shutil.rmtree(root / ".dgr/build/cpu")
    (root / ".dgr/state.json").unlink()
    r = run_forge(
        "build", "--lane", "cpu", "-j", "2", "--root", str(root), "--json", "--key", str(key)
    )
    assert r.code == 0, r
    again = Path(r.json["lanes"][0]["report"])
    assert again != report
    a, b = payload_of(read_envelope(report)), payload_of(read_envelope(again))
    run_a, run_b = a["predicate"].pop("runDetails"), b["predicate"].pop("runDetails")
    for p in (a, b):  # what the cache did is this build's own figure (issue 25), not an input
        figures = p["predicate"]["buildDefinition"]["internalParameters"]["compilerCache"]
        assert {"hits", "misses"} <= set(figures), figures
        figures.pop("hits"), figures.pop("misses")
    assert a == b, json.dumps([a, b], indent=1)
    assert run_a["metadata"]["invocationId"] != run_b["metadata"]["invocationId"]

    # an artifact changed on disk: verify --artifacts names it
    exe = root / ".dgr" / next(iter(built))
    exe.write_bytes(exe.read_bytes() + b"\0")
    r = run_forge("report", "verify", str(again), "--key", str(pub), "--artifacts")
    assert r.code == ExitCode.FAILED, r
    assert f"artifact {next(iter(built))} changed" in r.stderr

    # the pin moves (a rebase): the certification lapses, nothing is deleted
    write_manifest(root, upstream, upstream.commits[-2], patch_text)
    r = run_forge("lanes", "--advertised", "--root", str(root), "--json")
    assert r.code == 0, r
    assert r.json["advertised"] == []
    r = run_forge("lanes", "--root", str(root), "--json")
    cpu = next(row for row in r.json["lanes"] if row["lane"] == "cpu")
    assert cpu["certification"]["reason"] == "lapsed: the upstream pin moved since certification"
    assert record.is_file()
