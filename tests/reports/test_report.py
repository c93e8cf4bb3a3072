"""Signed reports: the statement's content, `report verify` (and securesystemslib given
only the public key), every tampering case, `report show`, and reproducibility."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest
from cryptography.hazmat.primitives import serialization
from securesystemslib import exceptions as sslib_exceptions
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.signer import SSlibKey
from support.cli import run_forge
from support.git import Upstream
from support.reports import (
    keyid_from_pub,
    lane_build,
    legacy_keyid_of,
    payload_of,
    read_envelope,
    setup_root,
)

from dgr_forge.attest import keys, provenance, reports
from dgr_forge.core.errors import ExitCode
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import sha256_file
from dgr_forge.core.output import Reporter


@pytest.fixture
def signer(tmp_path: Path) -> keys.Signer:
    return keys.generate(tmp_path / "keys" / "signing.pem")


@pytest.fixture
def pub(tmp_path: Path, signer: keys.Signer) -> Path:
    return tmp_path / "keys" / "signing.pem.pub"


@pytest.fixture
def report(forge: Forge, signer: keys.Signer) -> Path:
    return reports.write_report(forge, lane_build(forge), signer, Reporter())


def verify(report: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return run_forge("report", "verify", str(report), *args, env=env)


def rewrite(report: Path, change: Any) -> None:
    env = read_envelope(report)
    change(env)
    report.write_text(json.dumps(env) + "\n")


# ----------------------------------------------------------------------------- content


def test_statement_is_slsa_provenance_with_every_input(forge: Forge, report: Path) -> None:
    env = read_envelope(report)
    assert env["payloadType"] == "application/vnd.in-toto+json"
    assert report.parent == forge.reports_dir and report.name.startswith("cpu-")
    assert report.name.endswith(".intoto.jsonl") and len(report.read_text().splitlines()) == 1
    st = payload_of(env)
    assert st["_type"] == "https://in-toto.io/Statement/v1"
    assert st["predicateType"] == "https://slsa.dev/provenance/v1"
    # every artifact, by its workspace-relative path, with its real hash
    names = {s["name"]: s["digest"]["sha256"] for s in st["subject"]}
    assert names == {
        "build/cpu/bin/dgr-shard-worker": sha256_file(
            forge.workspace / "build/cpu/bin/dgr-shard-worker"
        ),
        "build/cpu/bin/llama-cli": sha256_file(forge.workspace / "build/cpu/bin/llama-cli"),
        "build/cpu/libllama.so": sha256_file(forge.workspace / "build/cpu/libllama.so"),
    }
    bd = st["predicate"]["buildDefinition"]
    assert bd["buildType"] == provenance.BUILD_TYPE
    ext = bd["externalParameters"]
    assert ext["lane"] == "cpu"
    assert ext["recipe"] == {
        "path": "recipes/cpu.toml",
        "sha256": sha256_file(forge.recipes_dir / "cpu.toml"),
    }
    assert ext["manifest"]["sha256"] == sha256_file(forge.upstream_manifest)
    assert ext["worker"]["location"] == "${DGR_ROOT}/worker"
    internal = bd["internalParameters"]
    assert "-DDGR_UPSTREAM_SOURCE_DIR=${DGR_WORKSPACE}/src/llama.cpp" in internal["cmakeArgs"]
    assert "-DCMAKE_MODULE_PATH=${DGR_ROOT}/cmake" in internal["cmakeArgs"]
    assert internal["SOURCE_DATE_EPOCH"] == 1735689600
    deps = bd["resolvedDependencies"]
    from dgr_forge.upstream import manifest

    m = manifest.load(forge.upstream_manifest, forge.root)
    # a file:// upstream is named as the prefix maps name paths, never by its path here
    assert deps[0]["uri"] == f"git+file:///dgr/upstream/{m.name}@{m.commit}"
    assert deps[0]["annotations"]["location"] == "${DGR_UPSTREAM}"
    assert deps[0]["digest"] == {"gitCommit": m.commit, "gitTree": m.tree}
    assert deps[0]["annotations"]["seriesDigest"] == m.series_digest
    patch = forge.root / "patches/llama.cpp/0001-layer-owner.patch"
    assert deps[1] == {
        "name": "patches/llama.cpp/0001-layer-owner.patch",
        "digest": {"sha256": sha256_file(patch)},
    }
    worker = next(d for d in deps if d.get("name") == "worker")
    assert worker["digest"]["gitCommit"]
    # issue 13 #6: an RFC 3986 URI; the placeholder location goes to the annotations
    assert worker["uri"] == "file:///dgr/root/worker"
    assert worker["annotations"] == {"dirty": False, "location": "${DGR_ROOT}/worker"}
    cc = next(d for d in deps if d.get("name") == "c-compiler")
    # no machine path: the compiler is named by a package URL with its exact version
    assert cc["annotations"]["version"] and cc["uri"].startswith("pkg:generic/c-compiler@")
    run = st["predicate"]["runDetails"]
    assert run["builder"]["id"] == provenance.BUILDER_LOCAL
    meta = run["metadata"]
    assert len(meta["invocationId"]) == 36
    assert meta["startedOn"].endswith("Z") and meta["finishedOn"] >= meta["startedOn"]
    byproducts = {b["name"]: b["digest"]["sha256"] for b in run["byproducts"]}
    assert byproducts == {
        "logs/build-cpu.log": sha256_file(forge.logs_dir / "build-cpu.log"),
        "build/cpu/CMakeCache.txt": sha256_file(forge.build_dir("cpu") / "CMakeCache.txt"),
    }
    # no absolute temp path outside runDetails (inputs such as the upstream URL aside)
    outside = json.dumps({k: v for k, v in st.items() if k != "predicate"}) + json.dumps(
        {**bd, "resolvedDependencies": deps[1:]}
    )
    assert str(forge.root) not in outside


def test_ci_runs_get_a_distinct_builder_id(
    forge: Forge, signer: keys.Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_REPOSITORY", "dgr/runtime")
    monkeypatch.setenv("GITHUB_RUN_ID", "42")
    st = provenance.statement(forge, lane_build(forge))
    builder = st["predicate"]["runDetails"]["builder"]
    assert builder["id"] == provenance.BUILDER_GITHUB != provenance.BUILDER_LOCAL
    assert (
        builder["version"]["runUrl"] == "https://github.com/dgr/runtime/actions/runs/42/attempts/1"
    )
    monkeypatch.delenv("GITHUB_ACTIONS")
    monkeypatch.setenv("CI", "true")
    assert (
        provenance.statement(forge, lane_build(forge))["predicate"]["runDetails"]["builder"]["id"]
        == provenance.BUILDER_CI
    )


def test_two_builds_of_the_same_inputs_differ_only_in_run_details(
    tmp_path: Path, upstream: Upstream, patch_text: str, signer: keys.Signer
) -> None:
    # two checkouts at different paths, the same inputs, built at different times
    statements = []
    for name in ("a", "b"):
        root = setup_root(tmp_path / name / "forge", upstream, patch_text)
        f = Forge(root, root / ".dgr")
        path = reports.write_report(f, lane_build(f), signer, Reporter())
        statements.append(payload_of(read_envelope(path)))
    a, b = statements
    run_a, run_b = a["predicate"].pop("runDetails"), b["predicate"].pop("runDetails")
    assert a == b
    assert run_a["metadata"]["invocationId"] != run_b["metadata"]["invocationId"]
    assert run_a["builder"] == run_b["builder"]


# ----------------------------------------------------------------------------- verify


def test_report_verifies_with_the_cli_and_with_securesystemslib(
    report: Path, pub: Path, signer: keys.Signer
) -> None:
    r = verify(report, "--key", str(pub), "--artifacts", "--json")
    assert r.code == 0, r
    assert r.json["verified"] is True and r.json["failures"] == []
    assert r.json["key"] == {"keyid": signer.keyid, "source": str(pub)}
    assert [a["status"] for a in r.json["artifacts"]] == ["ok", "ok", "ok"]
    assert f"keyid {signer.keyid[:16]}" in r.stderr and str(pub) in r.stderr  # which key

    # an independent DSSE implementation, given only the public key file
    public = serialization.load_pem_public_key(pub.read_bytes())
    sslib_key = SSlibKey.from_crypto(public, keyid=keyid_from_pub(pub))  # type: ignore[arg-type]
    envelope = SslibEnvelope.from_dict(read_envelope(report))
    assert list(envelope.verify([sslib_key], threshold=1)) == [keyid_from_pub(pub)]
    assert envelope.payload_type == "application/vnd.in-toto+json"
    assert json.loads(envelope.payload)["predicateType"] == "https://slsa.dev/provenance/v1"


def test_report_verifies_with_securesystemslib_s_own_default_key_id(
    report: Path, pub: Path, signer: keys.Signer
) -> None:
    """What any in-toto verifier does by default: the key id securesystemslib computes
    itself (no keyid given), and `Envelope.verify` given only that key."""
    public = serialization.load_pem_public_key(pub.read_bytes())
    default = SSlibKey.from_crypto(public)  # type: ignore[arg-type]
    assert signer.keyid == default.keyid
    envelope = SslibEnvelope.from_dict(read_envelope(report))
    assert list(envelope.verify([default], threshold=1)) == [default.keyid]


def test_a_report_signed_with_the_old_key_id_still_verifies(
    report: Path, pub: Path, signer: keys.Signer
) -> None:
    """Reports written before the key id became securesystemslib's (sha256 of the public
    key's DER) name that id: `report verify` still accepts them, with the same key."""
    legacy = legacy_keyid_of(signer.key.public_key())
    assert legacy != signer.keyid

    def old_id(env: dict[str, Any]) -> None:
        env["signatures"][0]["keyid"] = legacy

    rewrite(report, old_id)
    r = verify(report, "--key", str(pub), "--json")
    assert r.code == 0, r
    assert r.json["verified"] is True and r.json["key"]["keyid"] == signer.keyid


def test_verify_uses_dgr_verify_key_then_the_default_key(
    report: Path, pub: Path, signer: keys.Signer, tmp_path: Path
) -> None:
    r = verify(report, env={"DGR_VERIFY_KEY": str(pub)})
    assert r.code == 0, r
    assert "DGR_VERIFY_KEY" in r.stdout
    r = verify(report, env={"DGR_VERIFY_KEY": pub.read_text()})
    assert r.code == 0, r
    assert "inline PEM" in r.stdout
    # no key anywhere: exit 2, says how to get one
    r = verify(report)
    assert r.code == ExitCode.BAD_INPUT, r
    assert "no public key" in r.stderr and "--key" in r.stderr
    # the default key of this user
    default = tmp_path / "config/dgr-forge/signing-key.pem"
    default.parent.mkdir(parents=True)
    shutil.copy(tmp_path / "keys/signing.pem", default)
    shutil.copy(pub, str(default) + ".pub")
    r = verify(report)
    assert r.code == 0, r
    assert "signing-key.pem.pub" in r.stdout


def flip_payload_byte(env: dict[str, Any]) -> None:
    body = bytearray(base64.b64decode(env["payload"]))
    i = body.index(b"llama-cli")
    body[i] ^= 0x01  # "llama-cli" -> "mlama-cli": still valid JSON
    env["payload"] = base64.b64encode(bytes(body)).decode()


def flip_signature_byte(env: dict[str, Any]) -> None:
    sig = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
    sig[10] ^= 0x01
    env["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (flip_payload_byte, "does not match the payload"),
        (flip_signature_byte, "does not match the payload"),
        (lambda env: env.update(payloadType="application/json"), "wrong payload type"),
        (lambda env: env.update(signatures=[]), "unsigned"),
    ],
    ids=["payload-byte", "signature-byte", "payload-type", "unsigned"],
)
def test_tampered_reports_fail_naming_the_failure(
    report: Path, pub: Path, change: Any, expected: str
) -> None:
    rewrite(report, change)
    before = report.read_bytes()
    r = verify(report, "--key", str(pub), "--json")
    assert r.code == ExitCode.FAILED, r
    assert any(expected in f for f in r.json["failures"]), r.json["failures"]
    assert expected in r.stderr and "FAILED" in r.stderr
    assert report.read_bytes() == before  # verify changes nothing
    # the independent implementation agrees (an unsigned envelope meets no threshold)
    public = serialization.load_pem_public_key(pub.read_bytes())
    sslib_key = SSlibKey.from_crypto(public, keyid=keyid_from_pub(pub))  # type: ignore[arg-type]
    if expected != "wrong payload type":  # a type change also breaks the signature over PAE
        with pytest.raises(sslib_exceptions.VerificationError):
            SslibEnvelope.from_dict(read_envelope(report)).verify([sslib_key], threshold=1)


def test_wrong_payload_type_is_named_even_when_validly_signed(
    forge: Forge, signer: keys.Signer, pub: Path
) -> None:
    from dgr_forge.attest import dsse

    path = forge.reports_dir / "cpu-other.intoto.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(
        msgspec.json.encode(dsse.sign(b"{}", "application/vnd.other+json", signer)) + b"\n"
    )
    r = verify(path, "--key", str(pub), "--json")
    assert r.code == ExitCode.FAILED, r
    failures = r.json["failures"]
    assert any("wrong payload type: 'application/vnd.other+json'" in f for f in failures)
    assert not any("signature" in f for f in failures)  # the signature itself is fine
    assert any("wrong statement type" in f for f in failures)


def test_wrong_key_fails_naming_both_keys(
    report: Path, tmp_path: Path, signer: keys.Signer
) -> None:
    other = keys.generate(tmp_path / "other.pem")
    r = verify(report, "--key", str(tmp_path / "other.pem.pub"), "--json")
    assert r.code == ExitCode.FAILED, r
    (failure,) = r.json["failures"]
    assert "signed by a different key" in failure
    assert signer.keyid in failure and other.keyid in failure


def test_changed_or_missing_artifact_fails_with_expected_and_actual(
    forge: Forge, report: Path, pub: Path
) -> None:
    cli = forge.workspace / "build/cpu/bin/llama-cli"
    expected = sha256_file(cli)
    cli.write_bytes(cli.read_bytes() + b"\x00")
    (forge.workspace / "build/cpu/libllama.so").unlink()
    r = verify(report, "--key", str(pub), "--json")  # without --artifacts: not checked
    assert r.code == 0, r
    r = verify(report, "--key", str(pub), "--artifacts", "--json")
    assert r.code == ExitCode.FAILED, r
    failures = r.json["failures"]
    assert (
        f"artifact build/cpu/bin/llama-cli changed: expected sha256 {expected}, "
        f"actual {sha256_file(cli)}"
    ) in failures
    assert any(f.startswith("artifact build/cpu/libllama.so missing") for f in failures)
    status = {a["name"]: a["status"] for a in r.json["artifacts"]}
    assert status == {
        "build/cpu/bin/dgr-shard-worker": "ok",
        "build/cpu/bin/llama-cli": "changed",
        "build/cpu/libllama.so": "missing",
    }
    assert "llama-cli changed" in r.stderr


def test_artifacts_resolve_from_a_copied_workspace(
    forge: Forge, report: Path, pub: Path, tmp_path: Path
) -> None:
    # a report moved with its workspace still finds its artifacts (names are relative)
    moved = tmp_path / "moved-ws"
    shutil.copytree(forge.workspace, moved)
    r = verify(moved / "reports" / report.name, "--key", str(pub), "--artifacts")
    assert r.code == 0, r
    # an explicit --workspace without the artifacts: missing
    lone = tmp_path / "lone" / report.name
    lone.parent.mkdir()
    shutil.copy(report, lone)
    empty = tmp_path / "empty-ws"
    empty.mkdir()
    r = run_forge(
        "report",
        "verify",
        str(lone),
        "--key",
        str(pub),
        "--artifacts",
        "--workspace",
        str(empty),
        "--root",
        str(forge.root),
    )
    assert r.code == ExitCode.FAILED and "missing" in r.stderr, r


def test_unreadable_reports_are_exit_2(tmp_path: Path, pub: Path) -> None:
    r = verify(tmp_path / "nope.intoto.jsonl", "--key", str(pub))
    assert r.code == ExitCode.BAD_INPUT and "no such report" in r.stderr, r
    junk = tmp_path / "junk.intoto.jsonl"
    junk.write_text("this is not json\n")
    r = verify(junk, "--key", str(pub))
    assert r.code == ExitCode.BAD_INPUT and "not a DSSE envelope" in r.stderr, r
    assert junk.read_text() == "this is not json\n"


def test_unsigned_report_says_so_when_written_and_verified(
    forge: Forge, pub: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = reports.write_report(forge, lane_build(forge), None, Reporter())
    assert "UNSIGNED" in capsys.readouterr().err
    env = read_envelope(path)
    assert env["signatures"] == [] and payload_of(env)["_type"] == provenance.STATEMENT_TYPE
    r = verify(path, "--key", str(pub))
    assert r.code == ExitCode.FAILED and "unsigned" in r.stderr, r
    r = verify(path)  # no key anywhere: still "unsigned", not "no key"
    assert r.code == ExitCode.FAILED and "unsigned" in r.stderr, r


# ----------------------------------------------------------------------------- show


def test_report_show_summarises_and_json_gives_the_statement(
    forge: Forge, report: Path, signer: keys.Signer
) -> None:
    r = run_forge("report", "show", str(report))
    assert r.code == 0, r
    st = payload_of(read_envelope(report))
    commit = st["predicate"]["buildDefinition"]["resolvedDependencies"][0]["digest"]["gitCommit"]
    for text in (
        "lane       cpu",
        commit,
        "0001-layer-owner.patch",
        "build/cpu/bin/llama-cli",
        signer.keyid[:16],
        "started",
        "finished",
    ):
        assert text in r.stdout, text
    r = run_forge("report", "show", str(report), "--json")
    assert r.code == 0, r
    assert r.json["statement"] == st
    assert r.json["summary"]["signed_by"] == [signer.keyid]
    assert r.json["summary"]["upstream"]["commit"] == commit


# a statement's build definition in shapes no forge writes (`report show` does not verify)
ODD_DEPENDENCIES = {
    "a number": {"resolvedDependencies": 7},
    "a string": {"resolvedDependencies": "0001-x.patch"},
    "an object": {"resolvedDependencies": {"name": "0001-x.patch"}},
    "no list": {},
    "not an object": ["resolvedDependencies"],
}


@pytest.mark.parametrize("shape", sorted(ODD_DEPENDENCIES))
def test_report_show_reads_odd_dependencies_as_none(
    forge: Forge, report: Path, signer: keys.Signer, shape: str
) -> None:
    env = json.loads(report.read_text())
    st = payload_of(read_envelope(report))
    st["predicate"]["buildDefinition"] = ODD_DEPENDENCIES[shape]
    env["payload"] = base64.b64encode(json.dumps(st).encode()).decode()
    report.write_text(json.dumps(env) + "\n")
    r = run_forge("report", "show", str(report), "--json")
    assert r.code == 0, r
    summary = r.json["summary"]
    assert summary["patches"] == summary["toolchain"] == [], summary
    assert summary["upstream"]["commit"] is None and summary["lane"] is None, summary


def test_latest_report_picks_the_newest_of_a_lane(forge: Forge, signer: keys.Signer) -> None:
    first = reports.write_report(forge, lane_build(forge), signer, Reporter())
    build = lane_build(forge, tag="2")
    from datetime import timedelta

    build.finished_on += timedelta(seconds=5)
    second = reports.write_report(forge, build, signer, Reporter())
    assert first != second
    assert reports.latest_report(forge, "cpu") == second
    assert reports.latest_report(forge, "cuda") is None


def test_report_show_lane_shows_that_lane_s_latest(forge: Forge, signer: keys.Signer) -> None:
    reports.write_report(forge, lane_build(forge), signer, Reporter())
    build = lane_build(forge, tag="2")
    from datetime import timedelta

    build.finished_on += timedelta(seconds=5)
    second = reports.write_report(forge, build, signer, Reporter())
    r = run_forge("-C", str(forge.root), "report", "show", "--lane", "cpu")
    assert r.code == 0, r
    assert r.stdout.startswith(f"report     {forge.rel(second)}\n"), r.stdout
    assert (
        run_forge("-C", str(forge.root), "report", "show", "--lane", "cpu", "--json").json[
            "summary"
        ]
        == run_forge("report", "show", str(second), "--json").json["summary"]
    )
    # no report of that lane, a hostile lane name, both or neither: exit 2 saying which
    for args, said in (
        (["--lane", "cuda"], "no report of lane cuda"),
        (["--lane", "../cpu"], "../cpu"),
        (["--lane", "cpu", str(second)], "not both"),
        ([], "--lane"),
    ):
        r = run_forge("-C", str(forge.root), "report", "show", *args)
        assert r.code == 2 and said in r.stderr, (args, r)


# ----------------------------------------------------------------------------- secrets


def test_private_key_from_env_never_appears_in_output_or_files(
    forge: Forge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys.generate(tmp_path / "ci.pem")
    pem = (tmp_path / "ci.pem").read_text()
    (tmp_path / "ci.pem").unlink()  # only the env var holds it now, as in CI
    monkeypatch.setenv("DGR_SIGNING_KEY", pem)
    signer = keys.resolve_signer(None, Reporter())
    path = reports.write_report(forge, lane_build(forge), signer, Reporter())
    evidence = tmp_path / "evidence.txt"
    evidence.write_text("all tests passed\n")
    r = run_forge(
        "certify",
        "--report",
        str(path),
        "--evidence",
        str(evidence),
        "--hardware",
        "test rig",
        "--report-key",
        str(tmp_path / "ci.pem.pub"),
        "--root",
        str(forge.root),
        "--json",
        env={"DGR_SIGNING_KEY": pem},
    )
    assert r.code == 0, r
    secret_lines = [line for line in pem.splitlines() if "-----" not in line]
    haystacks = [r.stdout, r.stderr, path.read_text()]
    haystacks += [
        p.read_text(errors="replace")
        for p in forge.root.rglob("*")
        if p.is_file() and ".git" not in p.parts
    ]
    for hay in haystacks:
        for line in secret_lines:
            assert line not in hay
        assert "PRIVATE KEY" not in hay


def test_worker_descriptor_for_paths_and_urls(forge: Forge) -> None:
    from msgspec.structs import replace

    from dgr_forge.attest.records import WorkerSource

    def worker_dep(source: WorkerSource | None) -> Any:
        st = provenance.statement(forge, replace(lane_build(forge), worker=source))
        deps = st["predicate"]["buildDefinition"]["resolvedDependencies"]
        return next((d for d in deps if d.get("name") == "worker"), None)

    commit = "c" * 40
    assert worker_dep(WorkerSource("worker", commit, True)) == {
        "name": "worker",
        "uri": "file:///dgr/root/worker",  # RFC 3986 (issue 13 #6), as the prefix maps name it
        "digest": {"gitCommit": commit},
        "annotations": {"dirty": True, "location": "${DGR_ROOT}/worker"},
    }
    url = "https://example.invalid/dgr-shard-worker.git"
    assert worker_dep(WorkerSource(url, commit, False))["uri"] == f"git+{url}@{commit}"
    plain = worker_dep(WorkerSource("/opt/src/worker", None, False))
    assert plain == {
        "name": "worker",
        "uri": "file:///dgr/worker",  # no absolute machine path (issue 13 #6)
        "annotations": {"dirty": False, "location": "${DGR_WORKER}"},
    }
    assert worker_dep(None) is None
