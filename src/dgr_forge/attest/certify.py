"""Hardware certification: compiled is not certified.

`certify` records, signed, that one verified report's lane passed on real hardware: a DSSE
envelope (payload type `CERT_PAYLOAD_TYPE`) in `<root>/certifications/<lane>.json`, which
release engineers commit. The record binds the lane, the recipe's sha256, the upstream
commit, the patch series digest, the report's sha256 and artifacts, the hardware and the
evidence file's sha256.

A lane is *advertised* only while a certification signed by a trusted key
(`<root>/certifications/trusted-keys/*.pub`, or keys passed explicitly) matches the
current recipe, pin and series exactly, and the lane's other inputs (`inputs`: the
toolchain file, the forge's cmake/ modules, the worker's commit or tree): a rebase, a
recipe, toolchain, module or worker edit lapses it, with the reason, until renewed.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from dgr_forge.attest import dsse, provenance
from dgr_forge.attest import reports as reports_mod
from dgr_forge.attest.keys import PublicKey, Signer, load_public
from dgr_forge.core.errors import BadInput, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import (
    MAX_EVIDENCE_BYTES,
    atomic_write_text,
    read_regular,
    sha256_regular,
)
from dgr_forge.core.output import Reporter
from dgr_forge.core.proc import probe
from dgr_forge.upstream.manifest import UpstreamManifest

CERT_PAYLOAD_TYPE = "application/vnd.dgr-forge.certification+json"
CERT_TYPE = "https://dgr-forge.invalid/certification/v1"
CERT_DIR = "certifications"
TRUSTED_KEYS_DIR = "certifications/trusted-keys"
MAX_INPUT_BYTES = 4 << 20  # a toolchain file or CMake module a certification binds
MAX_CERT_BYTES = 1 << 20  # a certification is a few KiB of signed JSON


class Recipe(Protocol):
    """What a certification records of a lane's recipe (`host.recipes.Recipe` is one;
    attest sits below lanes and does not import it)."""

    @property
    def name(self) -> str: ...
    @property
    def path(self) -> Path: ...
    @property
    def sha256(self) -> str: ...
    @property
    def toolchain(self) -> str | None: ...


@dataclass(frozen=True)
class Certification:
    lane: str
    recipe_sha256: str
    upstream_commit: str
    series_digest: str
    report_sha256: str
    evidence_sha256: str
    hardware: dict[str, Any]
    certified_on: str
    keyid: str  # the trusted key that verified it ("" when not verified)
    path: Path
    inputs: dict[str, Any] | None = None  # `bound_inputs` when certified (None: older file)

    def as_dict(self) -> dict[str, Any]:
        return {
            "lane": self.lane,
            "recipe_sha256": self.recipe_sha256,
            "upstream_commit": self.upstream_commit,
            "series_digest": self.series_digest,
            "report_sha256": self.report_sha256,
            "evidence_sha256": self.evidence_sha256,
            "hardware": self.hardware,
            "certified_on": self.certified_on,
            "keyid": self.keyid,
            "file": str(self.path),
            "inputs": self.inputs,
        }


def bound_inputs(
    forge: Forge,
    recipe: Recipe,
    worker: Mapping[str, Any] | None,
    tools: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """What a certification binds beyond recipe, pin and series, as the checkout has it:
    the toolchain file, the `cmake/` modules, the worker (`worker`: its identity, from
    `lanes.inputs.worker_identity`) and the host's tools the lane builds with (`tools`:
    name -> version, from `lanes.inputs.tool_versions`; None where the host was not
    probed). Attest does not read lanes' inputs itself."""
    tc = forge.toolchains_dir / f"{recipe.toolchain}.cmake" if recipe.toolchain else None
    modules = sorted(forge.cmake_dir.glob("*.cmake")) if forge.cmake_dir.is_dir() else []

    def digest(path: Path, what: str) -> str:
        return sha256_regular(
            path,
            what=what,
            hint="restore it from the repository",
            limit=MAX_INPUT_BYTES,
            shown=forge.rel(path),
        )

    return {
        "toolchain": None
        if tc is None
        else {
            "path": forge.rel(tc),
            "sha256": digest(tc, "toolchain file") if tc.exists() else None,
        },
        "cmakeModules": {p.name: digest(p, "CMake module") for p in modules},
        "worker": dict(worker) if worker is not None else None,
        "tools": dict(sorted(tools.items())) if tools is not None else None,
    }


def inputs_lapse(bound: Any, current: dict[str, Any]) -> str | None:
    """Why the bound inputs are not the current ones (None: they are)."""
    if not isinstance(bound, dict):
        return "the certification does not bind the toolchain file, cmake/ or the worker"
    if bound.get("toolchain") != current["toolchain"]:
        tc = current["toolchain"] or bound.get("toolchain") or {}
        return f"the toolchain file {tc.get('path', '(none)')} changed since certification"
    if bound.get("cmakeModules") != current["cmakeModules"]:
        old, new = bound.get("cmakeModules") or {}, current["cmakeModules"]
        names = sorted(n for n in set(old) | set(new) if old.get(n) != new.get(n))
        return f"cmake/ modules changed since certification: {', '.join(names)}"
    if bound.get("worker") != current["worker"]:
        return "the worker changed since certification"
    old_tools, new_tools = bound.get("tools"), current.get("tools")
    if isinstance(old_tools, dict) and new_tools is not None and old_tools != new_tools:
        names = sorted(
            n for n in set(old_tools) | set(new_tools) if old_tools.get(n) != new_tools.get(n)
        )
        changes = ", ".join(
            f"{n} {old_tools.get(n) or '(none)'} -> {new_tools.get(n) or '(none)'}" for n in names
        )
        return f"tools changed since certification: {changes}"
    return None


def cert_path(forge: Forge, lane: str) -> Path:
    return forge.root / CERT_DIR / f"{lane}.json"


# ----------------------------------------------------------------------------- hardware


def _command(args: list[str]) -> str | None:
    if shutil.which(args[0]) is None:
        return None
    proc = probe(args)
    return proc.stdout if proc is not None and proc.returncode == 0 else None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    brand = _command(["sysctl", "-n", "machdep.cpu.brand_string"])
    return (brand or platform.processor() or platform.machine()).strip()


def _gpus() -> list[str]:
    gpus: list[str] = []
    smi = _command(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    )
    if smi:
        gpus += [f"NVIDIA {line.strip()}" for line in smi.splitlines() if line.strip()]
    rocm = _command(["rocminfo"])
    if rocm:
        # rocminfo lists agents; keep the marketing names of GPU agents only
        name = None
        for line in rocm.splitlines():
            key, _, value = line.strip().partition(":")
            if key == "Marketing Name":
                name = value.strip()
            elif key == "Device Type" and value.strip() == "GPU" and name:
                gpus.append(f"AMD {name}")
    return gpus


def probe_hardware() -> dict[str, Any]:
    """What this host is: CPU model, GPUs (nvidia-smi / rocminfo when present), OS."""
    return {
        "cpu": _cpu_model(),
        "gpus": _gpus(),
        "os": platform.platform(),
        "machine": platform.machine(),
        "probed": True,
    }


# ----------------------------------------------------------------------------- certify


def certify(
    forge: Forge,
    recipes: Mapping[str, Recipe],
    m: UpstreamManifest,
    *,
    report: Path,
    evidence: Path,
    signer: Signer,
    report_key: PublicKey,
    hardware: str | None,
    out: Reporter,
    worker: Mapping[str, Any] | None = None,
    tools: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[Path, Certification]:
    """Verify `report`, check it matches the current recipe/pin/series, write the record
    of a person's evidence (`certify --attested`: recorded, shown "attested, not checked",
    never advertised)."""
    _anchor_dir(forge, CERT_DIR, _allowed_owners(forge))  # never written through a link
    evidence_sha = sha256_regular(  # first: a FIFO or /dev/zero is refused, never hashed
        evidence,
        what="evidence file",
        hint="pass --attested with the test log or benchmark output from the hardware run "
        f"(one regular file of at most {MAX_EVIDENCE_BYTES >> 30} GiB; tar a directory)",
        limit=MAX_EVIDENCE_BYTES,
    )
    checked = check_report(forge, recipes, m, report, report_key, worker, tools)
    lane, recipe, check, current = checked.lane, checked.recipe, checked.check, checked.inputs
    stmt = check.report.statement or {}
    hw: dict[str, Any] = (
        {"description": hardware, "probed": False} if hardware else probe_hardware()
    )
    body = {
        "_type": CERT_TYPE,
        "lane": lane,
        "recipe": {"path": forge.rel(recipe.path), "sha256": recipe.sha256},
        "upstream": {"name": m.name, "url": m.url, "commit": m.commit},
        "seriesDigest": m.series_digest,
        "inputs": current,
        "report": {
            "name": report.name,
            "sha256": check.report.sha256,
            "keyid": check.verified_by,
            "subjects": stmt.get("subject", []),
        },
        "hardware": hw,
        "evidence": {"name": evidence.name, "sha256": evidence_sha},
        "certifiedOn": provenance.rfc3339(datetime.now(UTC)),
    }
    # the trust anchors are checked before anything is written: a hostile one is exit 2
    trusted = {k.keyid for k in trusted_keys(forge)}
    payload = json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")
    envelope = dsse.sign(payload, CERT_PAYLOAD_TYPE, signer)
    path = cert_path(forge, lane)
    atomic_write_text(path, json.dumps(envelope.to_dict(), indent=2) + "\n")
    cert = _from_body(body, signer.keyid, path)
    out.answer(f"certified lane {lane}: {forge.rel(path)} (keyid {signer.keyid[:16]})")
    if signer.keyid not in trusted:
        out.warn(
            f"keyid {signer.keyid[:16]} is not in {TRUSTED_KEYS_DIR}/: `lanes --advertised` will "
            f"not list {lane} until its public key is committed there"
        )
    return path, cert


@dataclass(frozen=True)
class CheckedReport:
    """A report `check_report` accepted: its lane, recipe, verification and the inputs a
    certification binds as the checkout has them now."""

    lane: str
    recipe: Recipe
    check: reports_mod.Verification
    inputs: dict[str, Any]


def check_report(
    forge: Forge,
    recipes: Mapping[str, Recipe],
    m: UpstreamManifest,
    report: Path,
    report_key: PublicKey,
    worker: Mapping[str, Any] | None = None,
    tools: Mapping[str, Mapping[str, str]] | None = None,
    *,
    artifacts_base: Path | None = None,
) -> CheckedReport:
    """Verify `report` (signature, statement; with `artifacts_base`, every subject re-hashed
    there): exit 1 when it fails; check it was built from this checkout's recipe, pin,
    series and toolchain file: exit 2 naming what differs."""
    check = reports_mod.verify_report(report, report_key, artifacts_base=artifacts_base)
    if not check.ok:
        raise OperationFailed(
            f"{report}: the report failed verification, refusing to certify it:\n  "
            + "\n  ".join(check.failures),
            hint="certify a report that `dgr-forge report verify` accepts",
            details={"failures": check.failures},
        )
    stmt = check.report.statement or {}
    ext = stmt["predicate"]["buildDefinition"]["externalParameters"]
    lane = str(ext.get("lane"))
    if lane not in recipes:
        raise BadInput(
            f"{report}: lane {lane!r} has no recipe in this forge root",
            hint="certify in the checkout whose recipes/ built the report",
        )
    recipe = recipes[lane]
    up = reports_mod.upstream_of(stmt)
    rep_recipe = str((ext.get("recipe") or {}).get("sha256"))
    rep_commit = str((up.get("digest") or {}).get("gitCommit"))
    rep_series = str((up.get("annotations") or {}).get("seriesDigest"))
    current = bound_inputs(forge, recipe, worker, (tools or {}).get(lane))
    checks = [
        (f"recipe {forge.rel(recipe.path)} sha256", rep_recipe, recipe.sha256),
        ("upstream commit", rep_commit, m.commit),
        ("patch series digest", rep_series, m.series_digest),
    ]
    if current["toolchain"] is not None:
        tc = current["toolchain"]
        deps = stmt["predicate"]["buildDefinition"].get("resolvedDependencies", [])
        got = next(
            (
                str((d.get("digest") or {}).get("sha256"))
                for d in deps
                if d.get("name") == tc["path"]
            ),
            "none",
        )
        checks.append((f"toolchain file {tc['path']} sha256", got, str(tc["sha256"])))
    stale = [(what, got, want) for what, got, want in checks if got != want]
    if stale:
        raise BadInput(
            f"{report}: the report does not match this checkout: "
            + "; ".join(
                f"{what} is {want} here but {got} in the report" for what, got, want in stale
            ),
            hint="rebuild the lane (`dgr-forge build --lane "
            f"{lane}`), run it on the hardware, and certify the new report",
            details={"stale": [w for w, _, _ in stale]},
        )
    return CheckedReport(lane, recipe, check, current)


# ----------------------------------------------------------------------------- reading


def _from_body(body: dict[str, Any], keyid: str, path: Path) -> Certification:
    return Certification(
        lane=str(body.get("lane")),
        recipe_sha256=str((body.get("recipe") or {}).get("sha256")),
        upstream_commit=str((body.get("upstream") or {}).get("commit")),
        series_digest=str(body.get("seriesDigest")),
        report_sha256=str((body.get("report") or {}).get("sha256")),
        evidence_sha256=str((body.get("evidence") or {}).get("sha256")),
        hardware=dict(body.get("hardware") or {}),
        certified_on=str(body.get("certifiedOn")),
        keyid=keyid,
        path=path,
        inputs=body.get("inputs") if isinstance(body.get("inputs"), dict) else None,
    )


def trusted_keys(forge: Forge, extra: list[PublicKey] | None = None) -> list[PublicKey]:
    """The explicitly passed keys plus `certifications/trusted-keys/*.pub`, each checked as a
    trust anchor must be (see `_anchor_dir`, `_trusted_key`): any doubt is exit 2 naming
    the path."""
    keys = list(extra or [])
    owners = _allowed_owners(forge)
    if _anchor_dir(forge, CERT_DIR, owners) is None:
        return keys
    directory = forge.root / TRUSTED_KEYS_DIR
    if _anchor_dir(forge, TRUSTED_KEYS_DIR, owners) is None:
        return keys
    return keys + [_trusted_key(p, owners) for p in sorted(directory.glob("*.pub"))]


def _allowed_owners(forge: Forge) -> set[int]:
    """Who may own a trust anchor: the checkout's owner, or root."""
    try:
        return {0, os.stat(forge.root).st_uid}
    except OSError:
        return {0, os.getuid()}


def _private_group(st: os.stat_result) -> bool:
    """Whether the file's group is its owner's own private group (the user-private-group
    scheme of umask 002 hosts): group-writable then means writable by the owner alone."""
    try:
        import grp
        import pwd

        return pwd.getpwuid(st.st_uid).pw_gid == st.st_gid and not grp.getgrgid(st.st_gid).gr_mem
    except (ImportError, KeyError):
        return False


def _anchor_dir(forge: Forge, rel: str, owners: set[int]) -> os.stat_result | None:
    """`rel` (certifications/ or its trusted-keys/) as a trust anchor's directory must be:
    a real directory (no symlink out of the checkout), owned by the checkout's owner or
    root, writable by nobody else. None when it does not exist; exit 2 naming it else."""
    try:
        st = (forge.root / rel).lstat()
    except FileNotFoundError:
        return None
    shown = rel  # not resolved: a symlink must be named as itself

    def refuse(problem: str, fix: str) -> BadInput:
        return BadInput(f"{shown}: {problem}", hint=fix, details={"path": shown})

    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise refuse(
            "not a directory (a symlink or a file): trust anchors must live in the checkout itself",
            f"make {rel} a plain directory holding the trusted .pub files",
        )
    if st.st_mode & stat.S_IWOTH:
        raise refuse(
            f"the directory is world-writable (mode {mode:04o}): anyone here could add a "
            "trusted key or certification",
            f"chmod o-w {forge.root / rel}",
        )
    if st.st_mode & stat.S_IWGRP and not _private_group(st):
        raise refuse(
            f"the directory is group-writable (mode {mode:04o}): the group could add a "
            "trusted key or certification",
            f"chmod g-w {forge.root / rel}",
        )
    if st.st_uid not in owners:
        raise refuse(
            f"owned by uid {st.st_uid}, not by the checkout's owner or root: its owner "
            "could add a trusted key or certification",
            f"chown it to the checkout's owner (chown -R $(stat -c %u {forge.root}) "
            f"{forge.root / rel}) or remove it",
        )
    return st


def _trusted_key(path: Path, owners: set[int]) -> PublicKey:
    """One trust anchor: a regular file (no symlink), owned by the checkout's owner or
    root, not group/world-writable, holding a public key only. Read through one
    descriptor opened with O_NOFOLLOW."""
    shown = f"{TRUSTED_KEYS_DIR}/{path.name}"

    def refuse(problem: str, fix: str) -> BadInput:
        return BadInput(f"{shown}: {problem}", hint=fix, details={"path": shown})

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise refuse(
                "a symlink in trusted-keys: a trust anchor must be the key file itself",
                f"replace the link with a copy of the public key (cp --remove-destination "
                f"$(readlink -f {shown}) {shown})",
            ) from None
        raise refuse(f"cannot read the trusted key: {err.strerror}", "check the file") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise refuse("not a regular file", "keep only .pub files in trusted-keys")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise refuse(
                f"the trusted key is writable by others (mode {stat.S_IMODE(st.st_mode):04o})",
                f"chmod go-w {shown}",
            )
        if st.st_uid not in owners:
            raise refuse(
                f"the trusted key is owned by uid {st.st_uid}, not by the checkout's owner "
                "or root: its owner could replace it",
                f"chown $(stat -c %u .) {shown}, after checking the key is the one you trust",
            )
        if st.st_size > 64 << 10:
            raise refuse("over 64 KiB: not a public key", "keep only .pub files in trusted-keys")
        data = f.read(64 << 10)
    if b"PRIVATE KEY" in data:
        raise refuse(
            "a PRIVATE key in trusted-keys (it is committed for everyone to read)",
            "remove it, commit only the .pub file, and replace the exposed key "
            "(`dgr-forge keygen --force`): anyone may have copied it",
        )
    return load_public(data, shown)


@dataclass(frozen=True)
class CertStatus:
    lane: str
    certified: bool
    reason: str  # "certified", "none", or why it lapsed / is invalid
    certification: Certification | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "lane": self.lane,
            "certified": self.certified,
            "reason": self.reason,
            "certification": self.certification.as_dict() if self.certification else None,
        }


def _status(
    forge: Forge,
    recipe: Recipe,
    m: UpstreamManifest,
    keys: list[PublicKey],
    worker: Mapping[str, Any] | None,
    tools: Mapping[str, str] | None = None,
) -> CertStatus:
    lane = recipe.name
    path = cert_path(forge, lane)
    if not path.is_file():
        return CertStatus(lane, False, "none", None)
    try:
        raw = read_regular(  # committed by anyone: never a FIFO, never followed out
            path, what="certification", hint="", limit=MAX_CERT_BYTES, follow=False
        )
        envelope = dsse.Envelope.from_json(raw)
    except BadInput as err:
        return CertStatus(lane, False, f"invalid: {err.message}", None)
    except (OSError, dsse.EnvelopeError) as err:
        return CertStatus(
            lane, False, f"invalid: {forge.rel(path)} is not a DSSE envelope ({err})", None
        )
    if envelope.payload_type != CERT_PAYLOAD_TYPE:
        return CertStatus(lane, False, f"invalid: payload type {envelope.payload_type!r}", None)
    accepted = dsse.verify(envelope, keys) if keys else None
    if accepted is None:
        why = "no trusted keys" if not keys else "signature does not verify with a trusted key"
        return CertStatus(lane, False, f"untrusted: {why} ({TRUSTED_KEYS_DIR}/*.pub)", None)
    try:
        body = json.loads(envelope.payload)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return CertStatus(lane, False, "invalid: payload is not JSON", None)
    if not isinstance(body, dict) or body.get("_type") != CERT_TYPE:
        return CertStatus(lane, False, "invalid: not a dgr-forge certification", None)
    cert = _from_body(body, accepted.keyid, path)
    if cert.lane != lane:
        return CertStatus(lane, False, f"invalid: the file certifies lane {cert.lane!r}", cert)
    if cert.recipe_sha256 != recipe.sha256:
        return CertStatus(lane, False, "lapsed: the recipe changed since certification", cert)
    if cert.upstream_commit != m.commit:
        return CertStatus(lane, False, "lapsed: the upstream pin moved since certification", cert)
    if cert.series_digest != m.series_digest:
        return CertStatus(lane, False, "lapsed: the patch series changed since certification", cert)
    lapse = inputs_lapse(cert.inputs, bound_inputs(forge, recipe, worker, tools))
    if lapse is not None:
        return CertStatus(lane, False, f"lapsed: {lapse}", cert)
    return CertStatus(lane, True, "certified", cert)


def certification_status(
    forge: Forge,
    recipes: Mapping[str, Recipe],
    m: UpstreamManifest,
    keys: list[PublicKey] | None = None,
    worker: Mapping[str, Any] | None = None,
    tools: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, CertStatus]:
    """Per lane: certified or not, and why (for the `lanes` table); `worker` is the
    configured worker's identity (`lanes.inputs.worker_identity`), None for none; `tools`
    per lane the host's tool versions (`lanes.inputs.tool_versions`)."""
    trusted = trusted_keys(forge, keys)
    return {
        lane: _status(forge, recipe, m, trusted, worker, (tools or {}).get(lane))
        for lane, recipe in recipes.items()
    }


def advertised_lanes(
    forge: Forge,
    recipes: Mapping[str, Recipe],
    m: UpstreamManifest,
    keys: list[PublicKey] | None = None,
    worker: Mapping[str, Any] | None = None,
    tools: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Certification]:
    """Only lanes whose current recipe, pin, series and other bound inputs match a validly
    signed certification."""
    return {
        lane: status.certification
        for lane, status in certification_status(forge, recipes, m, keys, worker, tools).items()
        if status.certified and status.certification is not None
    }
