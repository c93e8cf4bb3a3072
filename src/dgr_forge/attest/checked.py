"""Certifications the forge ran itself: `certifications/<lane>/<model>/<class>.json`.

The record (a DSSE envelope, payload type `certify.CERT_PAYLOAD_TYPE`, `_type`
`CHECKED_TYPE`) binds the lane's inputs as a `certify --attested` record does (recipe, pin,
series, toolchain file, `cmake/`, worker, tool versions; and the whole input digest of the
build that wrote the report), the report's sha256 and subjects, the model manifest's
sha256 and every model file's, the hardware identity and class, and per step the
program's path and sha256, its arguments, the parsed figures, thresholds, verdict and the
sha256 of its log (`certshapes.CertStep`, the shape `certify --json` gives too). It is
written only when every step passed.

An entry is *advertised* while its record is signed by a trusted key and every bound
input is still the checkout's: any change lapses it with the reason, the model manifest
(`manifests/models/<model>.toml`) included. `<model>` is `none` for a suite that takes
no model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from dgr_forge.attest import certify, dsse, provenance
from dgr_forge.attest.certshapes import CertStep, Identity
from dgr_forge.attest.keys import PublicKey, Signer
from dgr_forge.core.errors import BadInput
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import atomic_write_text, read_regular, sha256_regular
from dgr_forge.core.gitutil import NAME
from dgr_forge.core.output import Reporter
from dgr_forge.upstream.manifest import UpstreamManifest

CHECKED_TYPE = "https://dgr-forge.invalid/certification/checked/v1"
NO_MODEL = "none"
MODELS_DIR = "manifests/models"
MAX_MANIFEST_BYTES = 4 << 20


def checked_path(forge: Forge, lane: str, model: str, hardware_class: str) -> Path:
    return forge.root / certify.CERT_DIR / lane / model / f"{hardware_class}.json"


def manifest_sha256(forge: Forge, model: str) -> str | None:
    """The sha256 of `manifests/models/<model>.toml` as the checkout has it (None: gone)."""
    path = forge.root / MODELS_DIR / f"{model}.toml"
    if not path.is_file():
        return None
    return sha256_regular(
        path, what="model manifest", hint="restore it", limit=MAX_MANIFEST_BYTES,
        shown=forge.rel(path),
    )  # fmt: skip


def write(
    forge: Forge,
    checked: certify.CheckedReport,
    m: UpstreamManifest,
    *,
    report: Path,
    input_digest: str | None,
    model: dict[str, Any] | None,
    hardware: Identity,
    hardware_class: str,
    device: str,
    steps: list[CertStep],
    signer: Signer,
    out: Reporter,
) -> tuple[Path, dict[str, Any]]:
    """Sign and write the record of a run whose every step passed; (its path, its body)."""
    lane, recipe = checked.lane, checked.recipe
    stmt = checked.check.report.statement or {}
    body: dict[str, Any] = {
        "_type": CHECKED_TYPE,
        "lane": lane,
        "recipe": {"path": forge.rel(recipe.path), "sha256": recipe.sha256},
        "upstream": {"name": m.name, "url": m.url, "commit": m.commit},
        "seriesDigest": m.series_digest,
        "inputs": checked.inputs,
        "inputDigest": input_digest,
        "report": {
            "name": report.name,
            "sha256": checked.check.report.sha256,
            "keyid": checked.check.verified_by,
            "subjects": stmt.get("subject", []),
        },
        "model": model,
        "hardware": {"class": hardware_class, "identity": msgspec.to_builtins(hardware)},
        "device": device,
        "steps": msgspec.to_builtins(steps),
        "verdict": "pass",
        "certifiedOn": provenance.rfc3339(datetime.now(UTC)),
    }
    trusted = {k.keyid for k in certify.trusted_keys(forge)}  # a hostile anchor: exit 2 first
    payload = json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")
    envelope = dsse.sign(payload, certify.CERT_PAYLOAD_TYPE, signer)
    name = model["name"] if model else NO_MODEL
    path = checked_path(forge, lane, name, hardware_class)
    for rel in (f"{certify.CERT_DIR}/{lane}", f"{certify.CERT_DIR}/{lane}/{name}"):
        if (forge.root / rel).is_symlink():  # never written through a planted link
            raise BadInput(f"{rel}: a symlink", hint=f"make {rel} a plain directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(envelope.to_dict(), indent=2) + "\n")
    out.answer(f"certified {lane} / {name} / {hardware_class}: {forge.rel(path)}")
    if signer.keyid not in trusted:
        out.warn(
            f"keyid {signer.keyid[:16]} is not in {certify.TRUSTED_KEYS_DIR}/: `lanes "
            "--advertised` will not list it until its public key is committed there"
        )
    return path, body


# ----------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Entry:
    """One (lane, model, hardware class) record and whether it is advertised now."""

    lane: str
    model: str
    hardware_class: str
    advertised: bool
    reason: str  # "certified", or why not
    path: Path
    keyid: str = ""
    body: dict[str, Any] | None = None
    steps: tuple[CertStep, ...] = ()  # the body's, typed

    def as_dict(self, forge: Forge) -> dict[str, Any]:
        body = self.body or {}
        return {
            "lane": self.lane,
            "model": self.model,
            "hardware_class": self.hardware_class,
            "advertised": self.advertised,
            "reason": self.reason,
            "file": forge.rel(self.path),
            "keyid": self.keyid,
            "certified_on": body.get("certifiedOn"),
            "figures": {s.name: msgspec.to_builtins(s.figures) for s in self.steps},
        }


def entries(
    forge: Forge,
    recipes: Mapping[str, certify.Recipe],
    m: UpstreamManifest,
    keys: list[PublicKey] | None = None,
    worker: Mapping[str, Any] | None = None,
    tools: Mapping[str, Mapping[str, str]] | None = None,
) -> list[Entry]:
    """Every checked record under certifications/<lane>/ of a lane with a recipe."""
    trusted = certify.trusted_keys(forge, keys)
    found: list[Entry] = []
    for lane, recipe in recipes.items():
        lane_dir = forge.root / certify.CERT_DIR / lane
        if lane_dir.is_symlink() or not lane_dir.is_dir():
            continue
        for model_dir in sorted(lane_dir.iterdir()):
            if model_dir.is_symlink() or not model_dir.is_dir() or not NAME.match(model_dir.name):
                continue
            for path in sorted(model_dir.glob("*.json")):
                found.append(
                    _entry(forge, recipe, m, trusted, worker, (tools or {}).get(lane), path)
                )
    return found


def _entry(
    forge: Forge,
    recipe: certify.Recipe,
    m: UpstreamManifest,
    keys: list[PublicKey],
    worker: Mapping[str, Any] | None,
    tools: Mapping[str, str] | None,
    path: Path,
) -> Entry:
    lane, model, cls = recipe.name, path.parent.name, path.stem

    steps: tuple[CertStep, ...] = ()

    def no(reason: str, keyid: str = "", body: dict[str, Any] | None = None) -> Entry:
        return Entry(lane, model, cls, False, reason, path, keyid, body, steps if body else ())

    try:
        raw = read_regular(
            path, what="certification", hint="", limit=certify.MAX_CERT_BYTES, follow=False
        )
        envelope = dsse.Envelope.from_json(raw)
    except BadInput as err:
        return no(f"invalid: {err.message}")
    except (OSError, dsse.EnvelopeError) as err:
        return no(f"invalid: not a DSSE envelope ({err})")
    if envelope.payload_type != certify.CERT_PAYLOAD_TYPE:
        return no(f"invalid: payload type {envelope.payload_type[:80]!r}")
    accepted = dsse.verify(envelope, keys) if keys else None
    if accepted is None:
        why = "no trusted keys" if not keys else "signature does not verify with a trusted key"
        return no(f"untrusted: {why} ({certify.TRUSTED_KEYS_DIR}/*.pub)")
    try:
        body = json.loads(envelope.payload)
    except (ValueError, RecursionError):
        return no("invalid: payload is not JSON", accepted.keyid)
    if not isinstance(body, dict) or body.get("_type") != CHECKED_TYPE:
        return no("invalid: not a certification the forge ran", accepted.keyid)
    try:  # the figures `lanes` shows are the shapes `certify` wrote, or the record is invalid
        steps = tuple(msgspec.convert(body.get("steps"), list[CertStep]))
    except msgspec.ValidationError as err:
        why = str(err)[:200]
        return no(f"invalid: its steps are not a certification's ({why})", accepted.keyid)
    hw_value, model_value = body.get("hardware"), body.get("model")
    hw: dict[str, Any] = hw_value if isinstance(hw_value, dict) else {}
    bound_model: dict[str, Any] | None = model_value if isinstance(model_value, dict) else None
    claims = (body.get("lane"), (bound_model or {}).get("name", NO_MODEL), hw.get("class"))
    if claims != (lane, model, cls) or body.get("verdict") != "pass":
        return no(f"invalid: the record certifies {claims!r}, not its path", accepted.keyid)
    if (body.get("recipe") or {}).get("sha256") != recipe.sha256:
        return no("lapsed: the recipe changed since certification", accepted.keyid, body)
    if (body.get("upstream") or {}).get("commit") != m.commit:
        return no("lapsed: the upstream pin moved since certification", accepted.keyid, body)
    if body.get("seriesDigest") != m.series_digest:
        return no("lapsed: the patch series changed since certification", accepted.keyid, body)
    current = certify.bound_inputs(forge, recipe, worker, tools)
    lapse = certify.inputs_lapse(body.get("inputs"), current)
    if lapse is not None:
        return no(f"lapsed: {lapse}", accepted.keyid, body)
    if bound_model is not None:
        now = manifest_sha256(forge, model)
        if now is None:
            return no(f"lapsed: {MODELS_DIR}/{model}.toml is gone", accepted.keyid, body)
        if now != bound_model.get("manifest_sha256"):
            return no(
                f"lapsed: the model manifest {MODELS_DIR}/{model}.toml changed since certification",
                accepted.keyid,
                body,
            )
    return Entry(lane, model, cls, True, "certified", path, accepted.keyid, body, steps)
