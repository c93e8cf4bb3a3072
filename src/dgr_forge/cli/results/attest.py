"""The `--json` forms of keys, reports and certification: keygen, report show/verify/compare,
certify.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import UNSET, UnsetType

from dgr_forge.attest.certshapes import CertStep, Identity
from dgr_forge.cli.results.base import COMMIT, SHA, Form, Nested, Obj, Strs, Verification, d

# --- keys, reports, certification -----------------------------------------------


class Keygen(Form, kw_only=True):
    title = "keygen"

    private_key: Annotated[str, d("its path")]
    public_key: Annotated[str, d("the `.pub` path")]
    keyid: Annotated[str, d("the key id: securesystemslib's default for the public key")]


class ReportShow(Form, kw_only=True):
    title = "report show"

    summary: Annotated[
        Obj,
        d(
            "the report at a glance: `report`, `payload_type`, `lane`, `recipe`, `upstream`, "
            "`patches`, `toolchain`, `artifacts`, `signed_by`, `builder`, `invocation_id`, "
            "`started_on`, `finished_on`"
        ),
    ]
    statement: Annotated[Obj, d("the in-toto statement (SLSA provenance v1)")]


class ReportVerify(Form, kw_only=True):
    title = "report verify"
    may_fail = True
    note = "exit 1 when not verified"

    report: Annotated[str, d("the report's path")]
    verified: Annotated[bool, d("the signature verifies and nothing failed")]
    key: Annotated[Obj | None, d("the key it was checked with: `keyid`, `source`")]
    signed_by: Annotated[Strs, d("key ids of the envelope's signatures")]
    failures: Annotated[Strs, d("what failed (empty when verified)")]
    artifacts: Annotated[list[Obj], d("with `--artifacts`: per subject on disk")]


class SubjectDifference(Nested, kw_only=True):
    """a subject that differs"""

    name: Annotated[str, d("the subject")]
    status: Annotated[str, d("`changed`, `only_a`, `only_b`")]
    a: Annotated[str | None, d("its digest in a")]
    b: Annotated[str | None, d("its digest in b")]


class ReportCompare(Form, kw_only=True):
    title = "report compare"
    may_fail = True
    note = "exit 1 when a report does not verify or they differ"

    identical: Annotated[bool, d("same subjects, same digests")]
    a: Verification
    b: Verification
    differences: Annotated[list[SubjectDifference], d("per subject")]


class CertifyInputs(Nested, kw_only=True):
    """the inputs it binds besides recipe, pin and series"""

    toolchain: Annotated[Obj | None, d("the toolchain file: `path`, `sha256`")]
    cmakeModules: Annotated[dict[str, str], d("`cmake/` modules by name")]
    worker: Annotated[Obj | None, d("the worker: `location` + `commit`, or `location` + `tree`")]
    tools: Annotated[
        dict[str, str] | None,
        d(
            "the host's tools the lane builds with (cmake, ninja, the recipe's tools) by "
            "version; null where not probed"
        ),
    ]


class CertifyLane(Form, kw_only=True):
    title = "certify --lane L"

    certification: Annotated[str, d("the record's path")]
    trusted: Annotated[bool, d("its key is in trusted-keys/")]
    lane: Annotated[str, d("the lane")]
    model: Annotated[str, d("the model manifest's name (`none` without one)")]
    hardware_class: Annotated[str, d("the hardware class the record is named by")]
    report_sha256: Annotated[str, SHA]
    keyid: Annotated[str, d("the signing key's id")]
    steps: Annotated[list[CertStep], d("every step, all passed")]
    hardware: Identity
    certified_on: Annotated[str, d("when (ISO 8601, UTC)")]


class AttestedHardware(Nested, kw_only=True):
    """the hardware as `certify --attested` records it: `--hardware`'s description, or the
    host probed"""

    description: Annotated[str | UnsetType, d("`--hardware TEXT` (then not probed)")] = UNSET
    cpu: Annotated[str | UnsetType, d("probed: the CPU model")] = UNSET
    gpus: Annotated[Strs | UnsetType, d("probed: `nvidia-smi` / `rocminfo` GPU names")] = UNSET
    os: Annotated[str | UnsetType, d("probed: the platform string")] = UNSET
    machine: Annotated[str | UnsetType, d("probed: e.g. `x86_64`")] = UNSET
    probed: Annotated[bool, d("true: probed here; false: described by `--hardware`")]


class AttestedRecord(Nested, kw_only=True):
    """a `certify --attested` record, as read back"""

    lane: Annotated[str, d("the lane")]
    recipe_sha256: Annotated[str, SHA]
    upstream_commit: Annotated[str, COMMIT]
    series_digest: Annotated[str, d("sha256 over the series")]
    report_sha256: Annotated[str, SHA]
    evidence_sha256: Annotated[str, SHA]
    hardware: AttestedHardware
    certified_on: Annotated[str, d("when (ISO 8601, UTC)")]
    keyid: Annotated[str, d("the signing key's id")]
    file: Annotated[str, d("the record's path")]
    inputs: Annotated[
        CertifyInputs | None, d("the inputs it binds (null: a record of an older forge)")
    ]


class Certify(Form, AttestedRecord, kw_only=True):
    title = "certify --attested FILE --report R"
    note = "recorded as `attested, not checked`: never advertised"

    certification: Annotated[str, d("the record's path")]
    trusted: Annotated[bool, d("its key is in trusted-keys/")]
