"""Signed build reports: write one per lane build, show it, verify it. A report is never
overwritten, and an up-to-date build writes none, so it prunes none (docs/build-and-reports.md,
"Signed reports").
"""

from __future__ import annotations

import json
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import msgspec
from msgspec import Struct

from dgr_forge.attest import dsse, provenance
from dgr_forge.attest.keys import PublicKey, Signer, resolve_verifier
from dgr_forge.attest.records import LaneBuild
from dgr_forge.core import fsutil
from dgr_forge.core.errors import BadInput
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import read_regular
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import Form, d
from dgr_forge.upstream.surface import Surface

PAYLOAD_TYPE = "application/vnd.in-toto+json"
SUFFIX = ".intoto.jsonl"
KEEP_REPORTS = 5  # per lane, the newest, besides those a record names
CERT_DIR = "certifications"  # under the root: the certifications, each naming its report
MAX_CERT_FILES = 10_000  # certifications under one root: a lane's, per model and hardware
MAX_CERT_BYTES = 1 << 20  # one certification: a few KiB of signed JSON
# a name `write_report` writes (finishedOn to the second, an invocation id's hex prefix)
_WRITTEN = re.compile(r".+-[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}" + re.escape(SUFFIX))


def write_report(
    forge: Forge,
    build: LaneBuild,
    signer: Signer | None,
    out: Reporter,
    *,
    unsigned_reason: str | None = None,
) -> Path:
    """Unsigned when `signer` is None (`unsigned_reason`, the build's own words, says why)."""
    stmt = provenance.statement(forge, build)
    body = json.dumps(stmt, sort_keys=True, separators=(",", ":")).encode("utf-8")
    envelope = dsse.sign(body, PAYLOAD_TYPE, signer)
    meta = stmt["predicate"]["runDetails"]["metadata"]
    stamp = meta["finishedOn"].replace("-", "").replace(":", "")
    path = forge.reports_dir / f"{build.lane}-{stamp}-{meta['invocationId'][:8]}{SUFFIX}"
    fsutil.refuse_shared(forge.reports_dir, "reports directory")
    fsutil.atomic_write_text(path, msgspec.json.encode(envelope).decode("utf-8") + "\n")  # one line
    if signer is None:
        why = f" ({unsigned_reason})" if unsigned_reason else ""
        out.warn(f"report {forge.rel(path)} is UNSIGNED{why}: it cannot be verified")
    else:
        out.info(f"report {forge.rel(path)} signed by keyid {signer.keyid[:16]} ({signer.source})")
    return path


@dataclass(frozen=True)
class Report:
    path: Path
    envelope: dsse.Envelope
    statement: dict[str, Any] | None  # None when the payload is not a JSON object
    payload_error: str | None = None

    @property
    def sha256(self) -> str:
        return fsutil.sha256_file(self.path)


def load(path: Path) -> Report:
    """A missing file or one that is not a DSSE envelope is exit 2."""
    raw = read_regular(
        path,
        what="report",
        hint="reports are written to <workspace>/reports/ by `dgr-forge build` (a report is "
        f"a regular file of at most {fsutil.MAX_REPORT_BYTES >> 20} MiB)",
        limit=fsutil.MAX_REPORT_BYTES,
    )
    lines = [line for line in raw.splitlines() if line.strip()]
    try:
        if len(lines) != 1:
            raise dsse.EnvelopeError(f"expected one envelope line, found {len(lines)}")
        envelope = dsse.Envelope.from_json(lines[0])
    except dsse.EnvelopeError as err:
        raise BadInput(
            f"{path}: not a DSSE envelope ({err})",
            hint="pass a .intoto.jsonl report written by `dgr-forge build`",
            details={"report": str(path)},
        ) from None
    try:
        stmt = json.loads(envelope.payload)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return Report(path, envelope, None, f"payload is not JSON ({err})")
    except RecursionError:  # a verification failure like any broken payload, not exit 2
        return Report(path, envelope, None, "payload is JSON nested too deeply to read")
    if not isinstance(stmt, dict):
        return Report(path, envelope, None, "payload is not a JSON object")
    return Report(path, envelope, stmt)


def _get(data: Any, *keys: str | int) -> Any:
    for key in keys:
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def dependencies(stmt: dict[str, Any]) -> list[dict[str, Any]]:
    """The statement's `resolvedDependencies` that are objects (none when it has no list)."""
    deps = _get(stmt, "predicate", "buildDefinition", "resolvedDependencies")
    return [d for d in deps if isinstance(d, dict)] if isinstance(deps, list) else []


def surface_of(stmt: dict[str, Any]) -> Surface | None:
    for b in _get(stmt, "predicate", "runDetails", "byproducts") or []:
        if isinstance(b, dict) and b.get("name") == provenance.SURFACE_NAME:
            try:
                return msgspec.convert(b.get("annotations"), Surface)
            except msgspec.ValidationError:
                return None
    return None


def _text(data: Any, *keys: str) -> str | None:
    """A string, else null (the statement is unverified)."""
    return value if isinstance(value := _get(data, *keys), str) else None


class RecipeShown(Struct):
    """the recipe it was built from"""

    path: Annotated[str | None, d("relative to the forge root")]
    sha256: Annotated[str | None, d("of the file's bytes")]


class UpstreamShown(Struct, kw_only=True):
    """the upstream at the pin"""

    name: Annotated[str | None, d("its manifest name")]
    uri: Annotated[str | None, d("`git+<url>@<commit>`")]
    commit: Annotated[str | None, d("the pinned commit")]
    tree: Annotated[str | None, d("its git tree")]
    series_digest: Annotated[str | None, d("the patch series' digest")]


class PatchShown(Struct):
    """a patch of the series"""

    name: Annotated[str | None, d("its file")]
    sha256: Annotated[str | None, d("its sha256")]


class ToolShown(Struct):
    """a tool it was built with"""

    name: Annotated[str | None, d("the tool")]
    version: Annotated[str | None, d("its version")]


class ArtifactShown(Struct):
    """a subject"""

    name: Annotated[str | None, d("its path, relative to the workspace")]
    sha256: Annotated[str | None, d("its sha256")]
    target: Annotated[str | None, d("the CMake target")]


class Summary(Struct, kw_only=True):
    """the report at a glance"""

    report: Annotated[str, d("the report's path")]
    payload_type: Annotated[str, d("the envelope's payload type")]
    lane: Annotated[str | None, d("the lane")]
    recipe: RecipeShown | None
    upstream: UpstreamShown
    patches: Annotated[list[PatchShown], d("the series, in order")]
    toolchain: Annotated[list[ToolShown], d("the tools, with their versions")]
    artifacts: Annotated[list[ArtifactShown], d("the subjects")]
    signed_by: Annotated[list[str], d("key ids of the envelope's signatures (not checked)")]
    builder: Annotated[str | None, d("the builder's id")]
    invocation_id: Annotated[str | None, d("the build's invocation id")]
    started_on: Annotated[str | None, d("when it started (RFC 3339)")]
    finished_on: Annotated[str | None, d("when it finished")]
    surface: Annotated[
        Surface | None, d("a worker build's surface of upstream (null without a worker)")
    ]


def summary(report: Report) -> Summary:
    stmt = report.statement or {}
    build_def = _get(stmt, "predicate", "buildDefinition") or {}
    run = _get(stmt, "predicate", "runDetails") or {}
    deps = dependencies(stmt)
    up = next((d for d in deps if "gitTree" in (d.get("digest") or {})), {})
    recipe = _get(build_def, "externalParameters", "recipe")
    return Summary(
        report=str(report.path),
        payload_type=report.envelope.payload_type,
        lane=_text(build_def, "externalParameters", "lane"),
        recipe=RecipeShown(_text(recipe, "path"), _text(recipe, "sha256"))
        if isinstance(recipe, dict)
        else None,
        upstream=UpstreamShown(
            name=_text(up, "name"),
            uri=_text(up, "uri"),
            commit=_text(up, "digest", "gitCommit"),
            tree=_text(up, "digest", "gitTree"),
            series_digest=_text(up, "annotations", "seriesDigest"),
        ),
        patches=[
            PatchShown(_text(d, "name"), _text(d, "digest", "sha256"))
            for d in deps
            if str(d.get("name", "")).endswith(".patch")
        ],
        toolchain=[
            ToolShown(_text(d, "name"), _text(d, "annotations", "version"))
            for d in deps
            if "version" in (d.get("annotations") or {})
        ],
        artifacts=[
            ArtifactShown(
                _text(s, "name"), _text(s, "digest", "sha256"), _text(s, "annotations", "target")
            )
            for s in stmt.get("subject") or []
            if isinstance(s, dict)
        ],
        signed_by=[s.keyid for s in report.envelope.signatures],
        builder=_text(run, "builder", "id"),
        invocation_id=_text(run, "metadata", "invocationId"),
        started_on=_text(run, "metadata", "startedOn"),
        finished_on=_text(run, "metadata", "finishedOn"),
        surface=surface_of(stmt),
    )


class ReportShow(Form, kw_only=True):
    """`report show`'s result (its `--json` object)."""

    title = "report show"

    summary: Summary
    statement: Annotated[dict[str, Any], d("the in-toto statement (SLSA provenance v1)")]


class ArtifactCheck(Struct):
    """a subject on disk"""

    name: Annotated[str, d("the subject")]
    path: Annotated[str, d("where it was looked for")]
    expected: Annotated[str, d("its sha256 in the report")]
    actual: Annotated[str | None, d("its sha256 on disk (null: missing)")]
    status: Annotated[str, d("`ok`, `changed`, `missing` or `outside` (the workspace)")]


class KeyUsed(Struct, kw_only=True):
    """the key it was checked with"""

    keyid: Annotated[str, d("its key id")]
    source: Annotated[str, d("where it came from")]


class ReportVerify(Form, kw_only=True):
    """`report verify`'s result (its `--json` object); a side of `report compare`."""

    title = "report verify"
    may_fail = True
    note = "exit 1 when not verified"

    report: Annotated[str, d("the report's path")]
    verified: Annotated[bool, d("the signature verifies and nothing failed")]
    key: KeyUsed | None
    signed_by: Annotated[list[str], d("key ids of the envelope's signatures")]
    failures: Annotated[list[str], d("what failed (empty when verified)")]
    artifacts: Annotated[list[ArtifactCheck], d("with `--artifacts`: per subject on disk")]


@dataclass
class Verification:
    report: Report
    key: PublicKey | None  # None only for an unsigned report (nothing to verify with)
    failures: list[str] = field(default_factory=list)
    verified_by: str | None = None  # keyid
    artifacts: list[ArtifactCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def result(self) -> ReportVerify:
        return ReportVerify(
            report=str(self.report.path),
            verified=self.ok,
            key=KeyUsed(keyid=self.key.keyid, source=self.key.source) if self.key else None,
            signed_by=[s.keyid for s in self.report.envelope.signatures],
            failures=self.failures,
            artifacts=self.artifacts,
        )


def _check_statement(v: Verification) -> None:
    if (stmt := v.report.statement) is None:
        v.failures.append(f"bad statement: {v.report.payload_error}")
        return
    for what, got, want in (
        ("statement", stmt.get("_type"), provenance.STATEMENT_TYPE),
        ("predicate", stmt.get("predicateType"), provenance.PREDICATE_TYPE),
    ):
        if got != want:
            v.failures.append(f"wrong {what} type: {got!r} (expected {want})")
    subjects = stmt.get("subject")
    if not isinstance(subjects, list) or not subjects:
        v.failures.append("bad statement: no subjects (a report must name its artifacts)")
        return
    for i, s in enumerate(subjects):
        if not isinstance(_get(s, "name"), str) or not isinstance(_get(s, "digest", "sha256"), str):
            v.failures.append(f"bad statement: subject[{i}] lacks a name or a sha256 digest")


def _subjects(report: Report) -> list[tuple[str, str]]:
    named = (
        (_get(s, "name"), _get(s, "digest", "sha256"))
        for s in (report.statement or {}).get("subject") or []
    )
    return [(n, sha) for n, sha in named if isinstance(n, str) and isinstance(sha, str)]


def _check_artifacts(v: Verification, base: Path) -> None:
    base = base.resolve()
    for name, expected in _subjects(v.report):
        path, actual = (base / name).resolve(), None
        if not path.is_relative_to(base):  # never hash a file outside the workspace
            status, failure = "outside", f"artifact {name}: path leaves the workspace {base}"
        elif not path.is_file():
            status, failure = "missing", f"artifact {name} missing: expected at {path}"
        else:
            actual = fsutil.sha256_file(path)
            status = "ok" if actual == expected else "changed"
            failure = f"artifact {name} changed: expected sha256 {expected}, actual {actual}"
        v.artifacts.append(ArtifactCheck(name, str(path), expected, actual, status))
        if status != "ok":
            v.failures.append(failure)


def verify_report(
    path: Path, key: PublicKey | None, *, artifacts_base: Path | None = None
) -> Verification:
    """Failures are listed, not raised: the caller decides the exit code."""
    report = load(path)
    v, env = Verification(report, key), report.envelope
    if env.payload_type != PAYLOAD_TYPE:
        v.failures.append(f"wrong payload type: {env.payload_type!r} (expected {PAYLOAD_TYPE})")
    if not env.signatures:
        v.failures.append(
            "unsigned: the report has no signatures (built with --no-sign, or with no key)"
        )
    elif key is None:
        raise BadInput(
            "no public key to verify the report's signature with",
            hint="pass --key PUB or set DGR_VERIFY_KEY",
        )
    elif (accepted := dsse.verify(env, [key])) is not None:
        v.verified_by = accepted.keyid
    else:
        hinted = {s.keyid for s in env.signatures}
        v.failures.append(
            f"bad signature: signed by a different key (keyid {', '.join(sorted(hinted))[:64]}) "
            f"than the verification key {key.keyid} ({key.source})"
            if key.keyid not in hinted
            else f"bad signature: the signature by keyid {key.keyid[:16]} does not match the "
            "payload (the report was changed after signing, or the signature is corrupt)"
        )
    _check_statement(v)
    if artifacts_base is not None:
        _check_artifacts(v, artifacts_base)
    return v


def verifier(key: str | None, *paths: Path) -> PublicKey | None:
    """None when no report is signed and no key given: an unsigned report then fails as
    unsigned even where no key is set up."""
    return resolve_verifier(key) if any(load(p).envelope.signatures for p in paths) or key else None


def parse_name(name: str) -> tuple[str, str, str] | None:
    if not name.endswith(SUFFIX):
        return None
    parts = name[: -len(SUFFIX)].rsplit("-", 2)
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 else None


def latest_report(forge: Forge, lane: str) -> Path | None:
    """By finishedOn in the name, then mtime."""
    candidates = [
        (parsed[1], path.stat().st_mtime, path)
        for path in forge.reports_dir.glob(f"{lane}-*{SUFFIX}")
        if (parsed := parse_name(path.name)) and parsed[0] == lane
    ]
    return max(candidates)[2] if candidates else None


def prune(forge: Forge, lane: str, names: set[str], digests: set[str]) -> list[Path]:
    """Remove `lane`'s reports older than its newest `KEEP_REPORTS`, except those a record
    names by file name or sha256, however old; what is not a plain file, or cannot be read
    or removed, is left alone."""
    mine = []
    for path in forge.reports_dir.glob(f"{lane}-*{SUFFIX}"):
        parsed = parse_name(path.name)
        try:
            st = path.lstat()
        except OSError:
            continue
        named = parsed is not None and parsed[0] == lane and _WRITTEN.fullmatch(path.name)
        if named and parsed is not None and stat.S_ISREG(st.st_mode):
            mine.append((parsed[1], st.st_mtime_ns, path))
    removed = []
    for _stamp, _mtime, path in sorted(mine)[:-KEEP_REPORTS]:
        try:
            if path.name in names or (digests and fsutil.sha256_file(path) in digests):
                continue
            path.unlink()
        except (OSError, BadInput):
            continue
        removed.append(path)
    return removed


def read_certification(path: Path) -> dsse.Envelope:
    raw = read_regular(path, what="certification", hint="", limit=MAX_CERT_BYTES, follow=False)
    return dsse.Envelope.from_json(raw)


def named_reports(forge: Forge) -> tuple[set[str], set[str]] | None:
    """The file names and sha256s of the reports every certification names, whether or not
    its signature holds (a record is a record); None (nothing may be pruned) when one cannot
    be read, or there are too many."""
    names, digests = set[str](), set[str]()
    if not (top := forge.root / CERT_DIR).is_dir():
        return names, digests
    for count, path in enumerate(sorted(top.rglob("*.json")), 1):
        if count > MAX_CERT_FILES:
            return None
        try:
            body = json.loads(read_certification(path).payload)
        except (BadInput, OSError, ValueError):
            return None
        for found, key in ((names, "name"), (digests, "sha256")):
            if isinstance(value := _get(body, "report", key), str):
                found.add(value)
    return names, digests


class SubjectDifference(Struct, kw_only=True):
    """a subject that differs"""

    name: Annotated[str, d("the subject")]
    status: Annotated[str, d("`changed`, `only_a`, `only_b`")]
    a: Annotated[str | None, d("its digest in a")]
    b: Annotated[str | None, d("its digest in b")]


class ReportCompare(Form, kw_only=True):
    """`report compare`'s result (its `--json` object)."""

    title = "report compare"
    may_fail = True
    note = "exit 1 when a report does not verify or they differ"

    identical: Annotated[bool, d("same subjects, same digests")]
    a: ReportVerify
    b: ReportVerify
    differences: Annotated[list[SubjectDifference], d("per subject")]
    subjects: Annotated[int, d("how many subjects `a` names")]
    surface: provenance.SurfaceMoves


def subject_digests(v: Verification) -> dict[str, str]:
    return dict(_subjects(v.report))


def compare_reports(a: Path, b: Path, key: PublicKey | None) -> ReportCompare:
    """The proof that two builds of a lane (two runners, cache on and off) gave one output."""
    va, vb = verify_report(a, key), verify_report(b, key)
    sa, sb = subject_digests(va), subject_digests(vb)
    differences = []
    for n in sorted(set(sa) | set(sb)):
        if sa.get(n) != sb.get(n):
            status = "only_b" if n not in sa else "only_a" if n not in sb else "changed"
            differences.append(SubjectDifference(name=n, status=status, a=sa.get(n), b=sb.get(n)))
    return ReportCompare(
        identical=va.ok and vb.ok and not differences,
        a=va.result(),
        b=vb.result(),
        differences=differences,
        subjects=len(sa),
        surface=provenance.surface_changes(
            surface_of(va.report.statement or {}), surface_of(vb.report.statement or {})
        ),
    )
