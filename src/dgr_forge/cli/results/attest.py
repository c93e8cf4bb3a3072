"""The `--json` forms of keys, reports and certification: keygen, report show/verify/compare,
certify.
"""

from __future__ import annotations

from typing import Annotated

from dgr_forge.certify.shapes import Certified
from dgr_forge.cli.results.base import Form, Nested, Obj, Strs, Verification, d

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
            "`started_on`, `finished_on`, `surface` (a worker build's surface of upstream: "
            "`headers`, the boundary headers it read; `symbols`, each `name`, `header`, "
            "`symbol`, `library`; `symbolsChecked`; null without a worker)"
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


class Moved(Nested, kw_only=True):
    """entries in B and not in A (`added`), in A and not in B (`removed`)"""

    added: Annotated[Strs, d("in B only")]
    removed: Annotated[Strs, d("in A only")]


class SurfaceMoves(Nested, kw_only=True):
    """the worker surface from A to B: boundary headers read, upstream symbols imported
    (`name (header)`); not a subject difference (the exit code is the subjects')"""

    headers: Moved
    symbols: Moved


class ReportCompare(Form, kw_only=True):
    title = "report compare"
    may_fail = True
    note = "exit 1 when a report does not verify or they differ"

    identical: Annotated[bool, d("same subjects, same digests")]
    a: Verification
    b: Verification
    differences: Annotated[list[SubjectDifference], d("per subject")]
    surface: SurfaceMoves


class Certify(Form, Certified, kw_only=True):
    title = "certify --lane L | --attested FILE --report R"
    note = "an `attested` record is shown `attested, not checked`: never advertised"
