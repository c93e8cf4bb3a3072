"""The one certification record, `certifications/<lane>/<model>/<class>.json`, `checked` or
`attested` (never advertised), and `overview`, what `lanes` shows (docs/build-and-reports.md,
"Certification", step 7 and "Attested, not checked").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Struct, UnsetType, field, to_builtins

from dgr_forge.attest import dsse, provenance
from dgr_forge.attest import reports as reports_mod
from dgr_forge.attest.keys import PublicKey, Signer
from dgr_forge.certify import trust
from dgr_forge.certify.shapes import BoundInputs, Certified, CertStep, Entry, Evidence, Hardware
from dgr_forge.core.errors import BadInput
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import atomic_write_text, sha256_bytes, sha256_regular
from dgr_forge.core.gitutil import NAME
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import Form, d
from dgr_forge.core.tominput import MAX_BYTES
from dgr_forge.host.doctor import Doctor, ProbeResult
from dgr_forge.host.recipes import Recipe
from dgr_forge.host.worker import WorkerSpec
from dgr_forge.lanes.inputs import report_inputs, tool_versions, worker_identity
from dgr_forge.lanes.state import lane_states
from dgr_forge.lanes.status import BuildShown
from dgr_forge.models.manifest import MODELS_DIR
from dgr_forge.upstream.manifest import UpstreamManifest

CERT_PAYLOAD_TYPE = "application/vnd.dgr-forge.certification+json"
RECORD_TYPE = "https://dgr-forge.invalid/certification/checked/v1"
NO_MODEL = "none"
ATTESTED = "attested"  # the <model> directory of `certify --attested` records
Kind = Literal["checked", "attested"]
OLD_FORM = (
    "invalid: {file} is a record of an older forge (one file per lane), no longer read; "
    "`dgr-forge certify --attested FILE --report R` writes its replacement under "
    "certifications/{lane}/attested/"
)


class UpstreamBound(Struct):
    name: str
    url: str
    commit: str


class ReportBound(Struct):
    name: str
    sha256: str
    keyid: str | None
    subjects: list[dict[str, Any]]  # the report statement's own `subject` (in-toto JSON)


class ModelFile(Struct):
    name: str
    size: int
    sha256: str


class BoundModel(Struct, kw_only=True):
    name: str  # the manifest's: the record's <model> directory
    model_name: str
    manifest: str
    manifest_sha256: str | None
    files: list[ModelFile]
    first_split: str
    tensor_bytes: int | str | None = None


class CertRecord(Struct, kw_only=True, rename="camel"):
    """The signed payload; read back leniently: an older record's missing key lapses it."""

    record_type: str = field(name="_type")
    kind: str = "checked"  # the first checked records had no `kind`
    lane: str
    recipe: provenance.FileRef | None = None
    upstream: UpstreamBound | None = None
    series_digest: str | None = None
    inputs: BoundInputs | None = None
    input_digest: str | None = None
    report: ReportBound | None = None
    model: BoundModel | None = None
    hardware: Hardware
    device: str | None = None
    steps: list[CertStep]
    evidence: Evidence | None = None
    verdict: str | None = None
    certified_on: str | None = None


def manifest_sha256(forge: Forge, model: str) -> str | None:
    """As the checkout has it (None: gone)."""
    if not (path := forge.root / MODELS_DIR / f"{model}.toml").is_file():
        return None
    return sha256_regular(
        path, what="model manifest", hint="restore it", limit=MAX_BYTES,
        shown=forge.rel(path),
    )  # fmt: skip


def write(
    forge: Forge,
    checked: trust.CheckedReport,
    m: UpstreamManifest,
    *,
    kind: Kind,
    hardware: Hardware,
    signer: Signer,
    out: Reporter,
    input_digest: str | None = None,
    model: BoundModel | None = None,
    device: str | None = None,
    steps: list[CertStep] | None = None,
    evidence: Evidence | None = None,
) -> Certified:
    lane, recipe = checked.lane, checked.recipe
    certified_on = provenance.rfc3339(datetime.now(UTC))
    body = CertRecord(
        record_type=RECORD_TYPE,
        kind=kind,
        lane=lane,
        recipe=provenance.FileRef(forge.rel(recipe.path), recipe.sha256),
        upstream=UpstreamBound(m.name, m.url, m.commit),
        series_digest=m.series_digest,
        inputs=checked.inputs,
        input_digest=input_digest,
        report=ReportBound(
            checked.check.report.path.name,
            checked.check.report.sha256,
            checked.check.verified_by,
            (checked.check.report.statement or {}).get("subject", []),
        ),
        model=model,
        hardware=hardware,
        device=device,
        steps=steps or [],
        evidence=evidence,
        verdict="pass",
        certified_on=certified_on,
    )
    trusted = {k.keyid for k in trust.trusted_keys(forge)}  # a hostile anchor: exit 2 first
    payload = json.dumps(msgspec.to_builtins(body), sort_keys=True, separators=(",", ":")).encode()
    envelope = dsse.sign(payload, CERT_PAYLOAD_TYPE, signer)
    name = ATTESTED if kind == "attested" else model.name if model else NO_MODEL
    path = forge.root / trust.CERT_DIR / lane / name / f"{hardware.hardware_class}.json"
    for rel in (trust.CERT_DIR, f"{trust.CERT_DIR}/{lane}", f"{trust.CERT_DIR}/{lane}/{name}"):
        if (forge.root / rel).is_symlink():  # never written through a planted link
            raise BadInput(f"{rel}: a symlink", hint=f"make {rel} a plain directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(msgspec.to_builtins(envelope), indent=2) + "\n")
    out.answer(f"certified {lane} / {name} / {hardware.hardware_class}: {forge.rel(path)}")
    if signer.keyid not in trusted:
        out.warn(
            f"keyid {signer.keyid[:16]} is not in {trust.TRUSTED_KEYS_DIR}/: `lanes "
            "--advertised` will not list it until its public key is committed there"
        )
    return Certified(
        certification=str(path),
        trusted=signer.keyid in trusted,
        kind=kind,
        lane=lane,
        model=name,
        hardware_class=hardware.hardware_class,
        report_sha256=checked.check.report.sha256,
        keyid=signer.keyid,
        steps=body.steps,
        hardware=hardware,
        evidence_sha256=evidence.sha256 if evidence else None,
        inputs=checked.inputs,
        certified_on=certified_on,
    )


@dataclass(frozen=True)
class _Bound:  # what lapses a record: the checkout's inputs now
    recipe: Recipe
    m: UpstreamManifest
    keys: list[PublicKey]
    inputs: BoundInputs


def entries(
    forge: Forge,
    recipes: Mapping[str, Recipe],
    m: UpstreamManifest,
    keys: list[PublicKey] | None = None,
    worker: Mapping[str, str] | None = None,
    tools: Mapping[str, Mapping[str, str]] | None = None,
) -> list[Entry]:
    """Every record of a lane with a recipe; a lane's old-form record is refused."""
    trusted = trust.trusted_keys(forge, keys)
    found: list[Entry] = []
    for lane, recipe in recipes.items():
        old = forge.root / trust.CERT_DIR / f"{lane}.json"
        if old.is_file() or old.is_symlink():
            reason = OLD_FORM.format(file=forge.rel(old), lane=lane)
            found.append(_refused(forge, lane, ATTESTED, "unknown", reason, old))
        lane_dir = forge.root / trust.CERT_DIR / lane
        if lane_dir.is_symlink() or not lane_dir.is_dir():
            continue
        paths = [
            path
            for model_dir in sorted(lane_dir.iterdir())
            if not model_dir.is_symlink() and model_dir.is_dir() and NAME.match(model_dir.name)
            for path in sorted(model_dir.glob("*.json"))
        ]
        if paths:  # the checkout's inputs, read only for a lane with a record
            inputs = trust.bound_inputs(forge, recipe, worker, (tools or {}).get(lane))
            found += [_entry(forge, _Bound(recipe, m, trusted, inputs), path) for path in paths]
    return found


def _refused(forge: Forge, lane: str, model: str, cls: str, reason: str, path: Path) -> Entry:
    kind = "attested" if model == ATTESTED else "checked"
    return Entry(
        lane=lane, kind=kind, model=model, hardware_class=cls, advertised=False,
        reason=reason, file=forge.rel(path), keyid="", certified_on=None, figures={},
    )  # fmt: skip


def _entry(forge: Forge, now: _Bound, path: Path) -> Entry:
    lane, model, cls = now.recipe.name, path.parent.name, path.stem
    keyid = ""  # the trusted key's, once one verified the envelope

    def entry(reason: str) -> Entry:  # the path's, not advertised
        return msgspec.structs.replace(_refused(forge, lane, model, cls, reason, path), keyid=keyid)

    try:
        envelope = reports_mod.read_certification(path)
    except BadInput as err:
        return entry(f"invalid: {err.message}")
    except (OSError, dsse.EnvelopeError) as err:
        return entry(f"invalid: not a DSSE envelope ({err})")
    if envelope.payload_type != CERT_PAYLOAD_TYPE:
        return entry(f"invalid: payload type {envelope.payload_type[:80]!r}")
    accepted = dsse.verify(envelope, now.keys) if now.keys else None
    if accepted is None:
        why = "no trusted keys" if not now.keys else "signature does not verify with a trusted key"
        return entry(f"untrusted: {why} ({trust.TRUSTED_KEYS_DIR}/*.pub)")
    keyid = accepted.keyid
    try:
        raw_body = json.loads(envelope.payload)
    except (ValueError, RecursionError):
        return entry("invalid: payload is not JSON")
    if not isinstance(raw_body, dict) or raw_body.get("_type") != RECORD_TYPE:
        return entry("invalid: not a dgr-forge certification record")
    try:  # the figures `lanes` shows are the shapes `certify` wrote, or the record is invalid
        body = msgspec.convert(raw_body, CertRecord)
    except msgspec.ValidationError as err:
        what = "its steps are not a certification's"
        what = what if "steps" in str(err) else "not a certification record's shape"
        return entry(f"invalid: {what} ({str(err)[:200]})")
    kind, hw, evidence = body.kind, body.hardware, body.evidence
    name = ATTESTED if kind == "attested" else body.model.name if body.model else NO_MODEL
    claims = (body.lane, name, hw.hardware_class)
    if kind not in ("checked", "attested") or claims != (lane, model, cls):
        return entry(f"invalid: the record certifies {claims!r}, not its path")
    if body.verdict != "pass" or (kind == "attested") != (evidence is not None):
        return entry("invalid: not a passed certification")
    moved = lapses(forge, now, body, model)
    steps = {s.name: s for s in now.recipe.certify.steps} if now.recipe.certify else {}
    for s in [s for s in body.steps if s.text_sha256]:
        step = steps.get(s.name)
        try:  # the text as the checkout has it (gone or unreadable: moved)
            text = trust.step_text(forge, step, step.text) if step and step.text else None
        except BadInput:
            text = None
        if text is None or sha256_bytes(text) != s.text_sha256:
            moved.append(f"the step {s.name}'s text changed since certification")
    reason = "certified" if kind == "checked" else "attested, not checked"
    return msgspec.structs.replace(
        entry(f"lapsed: {'; '.join(moved)}" if moved else reason),
        kind=kind,
        advertised=not moved and kind == "checked",
        certified_on=str(body.certified_on),
        figures={s.name: s.figures for s in body.steps},
        evidence_sha256=evidence.sha256 if evidence else None,
    )


def _changed(old: Mapping[str, str | None], new: Mapping[str, str | None]) -> list[str]:
    return sorted(n for n in set(old) | set(new) if old.get(n) != new.get(n))


def lapses(forge: Forge, now: _Bound, body: CertRecord, model: str) -> list[str]:
    moved = []
    if body.recipe is None or body.recipe.sha256 != now.recipe.sha256:
        moved.append("the recipe changed since certification")
    if body.upstream is None or body.upstream.commit != now.m.commit:
        moved.append("the upstream pin moved since certification")
    if body.series_digest != now.m.series_digest:
        moved.append("the patch series changed since certification")
    bound, current = body.inputs or now.inputs, now.inputs  # unbound: that reason alone
    if body.inputs is None:
        moved.append("the certification does not bind the toolchain file, cmake/ or the worker")
    if bound.toolchain != current.toolchain:
        tc = current.toolchain or bound.toolchain or {}
        moved.append(f"the toolchain file {tc.get('path', '(none)')} changed since certification")
    if names := _changed(bound.cmakeModules, current.cmakeModules):
        moved.append(f"cmake/ modules changed since certification: {', '.join(names)}")
    if bound.worker != current.worker:
        moved.append("the worker changed since certification")
    old, new = bound.tools, current.tools
    if old is not None and new is not None and (names := _changed(old, new)):
        changes = ", ".join(
            f"{n} {old.get(n) or '(none)'} -> {new.get(n) or '(none)'}" for n in names
        )
        moved.append(f"tools changed since certification: {changes}")
    if body.model is not None:
        if (sha := manifest_sha256(forge, model)) is None:
            moved.append(f"{MODELS_DIR}/{model}.toml is gone")
        elif sha != body.model.manifest_sha256:
            moved.append(f"the model manifest {MODELS_DIR}/{model}.toml changed")
    return moved


class LaneCertification(Struct, kw_only=True):
    """the lane's certification status"""

    reason: Annotated[
        str,
        d(
            "`certified`, `attested, not checked` for a valid record of a person's evidence, "
            "or why not: `none`, `untrusted: ...`, `lapsed: ...`: recipe, pin, series, "
            "toolchain file, `cmake/` modules, worker, the host's tool versions, the model "
            "manifest"
        ),
    ]
    attested: Annotated[str, d("the `--attested` record's own status")]
    record: Annotated[Entry | None, d("that record (null: none)")]


class LaneRow(Struct, kw_only=True):
    """a lane"""

    lane: Annotated[str, d("the lane")]
    backend: Annotated[str, d("the recipe's backend")]
    host_os: Annotated[list[str], d("the OSes it builds on")]
    buildable: Annotated[bool, d("it can build on this host")]
    missing: Annotated[list[ProbeResult], d("what is missing (the same rows as `doctor`'s)")]
    summary: Annotated[str, d("one line: `buildable`, or what is missing")]
    last_build: BuildShown | None
    certified: Annotated[
        bool,
        d(
            "a certification the forge ran (`certify --lane`), signed by a trusted key and "
            "matching every input"
        ),
    ]
    certification: LaneCertification
    certifications: Annotated[list[Entry], d("the lane's checked records")]


class Lanes(Form, kw_only=True):
    """`lanes`' result."""

    title = "lanes [--advertised]"

    lanes: Annotated[list[LaneRow], d("per lane")]
    advertised: Annotated[
        list[str] | UnsetType, d("with `--advertised`: the lanes of `entries`")
    ] = UNSET
    entries: Annotated[
        list[Entry] | UnsetType,
        d("with `--advertised`: the (lane, model, hardware class) entries advertised"),
    ] = UNSET


def overview(
    forge: Forge,
    m: UpstreamManifest,
    recipes: dict[str, Recipe],
    doctor: Doctor,
    trusted: list[PublicKey] | None = None,
    spec: WorkerSpec | None = None,
    *,
    advertised: bool = False,
) -> Lanes:
    # the host's tool versions, asked only of lanes that have a certification to check
    tools = tool_versions(
        doctor, {n: r for n, r in recipes.items() if (forge.root / trust.CERT_DIR / n).is_dir()}
    )
    runs = entries(forge, recipes, m, trusted, to_builtins(worker_identity(spec)), tools)
    state = lane_states(forge)
    rows: list[LaneRow] = []
    for name, recipe in recipes.items():
        check = doctor.check_lane(recipe)
        entry = state.get(name)
        last = entry.state.last_build if entry is not None else None  # this workspace's
        mine = [e for e in runs if e.lane == name and e.kind == "checked"]
        atts = [e for e in runs if e.lane == name and e.kind == "attested"]
        valid = [e for e in atts if e.reason == "attested, not checked"]
        attested = next(iter(valid or atts), None)
        certified = any(e.advertised for e in mine)
        reason = next((e.reason for e in mine), attested.reason if attested else "none")
        reason = "certified" if certified else "attested, not checked" if valid else reason
        rows.append(
            LaneRow(
                lane=name,
                backend=recipe.lane.backend,
                host_os=list(recipe.lane.host_os),
                buildable=check.buildable,
                missing=list(check.missing),
                summary=check.summary,
                last_build=(BuildShown.of(last, report_inputs(m, recipe, spec)) if last else None),
                certified=certified,
                certification=LaneCertification(
                    reason=reason, attested=attested.reason if attested else "none", record=attested
                ),
                certifications=mine,
            )
        )
    if not advertised:
        return Lanes(lanes=rows)
    rows = [r for r in rows if r.certified]
    listed = [e for r in rows for e in r.certifications if e.advertised]
    return Lanes(lanes=rows, advertised=sorted({e.lane for e in listed}), entries=listed)
