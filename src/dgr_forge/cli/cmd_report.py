"""keygen, report show / report verify, certify."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dgr_forge.cli import options as opt
from dgr_forge.cli.app import Env, Outcome, app, command, group
from dgr_forge.core.errors import BadInput

if TYPE_CHECKING:
    from msgspec import Struct

    from dgr_forge.attest.keys import Keygen
    from dgr_forge.attest.reports import ReportCompare, ReportShow, ReportVerify
    from dgr_forge.certify.sequence import Inputs

report_app = group("report", "Show and verify signed build reports.")


@command(app)
def keygen(env: Env, out: opt.KeygenOut = None, force: opt.KeygenForce = False) -> Keygen:
    """Create an Ed25519 signing key (PKCS#8 PEM, mode 0600) and PATH.pub."""
    from dgr_forge.attest import keys

    made = keys.keygen(out, force=force)
    env.out.answer(f"private key {made.private_key} (mode 0600; keep it secret)")
    env.out.answer(f"public key  {made.public_key}")
    env.out.answer(f"keyid       {made.keyid}")
    return made


@command(report_app, "show")
def show(
    env: Env,
    report: Annotated[
        Path | None, typer.Argument(help="A .intoto.jsonl report (or --lane L).")
    ] = None,
    lanes: opt.ReportLane = None,
) -> ReportShow:
    """Print a readable summary of a report (--json: the statement too). Does not verify.

    `--lane L` shows lane L's latest report in the workspace."""
    from dgr_forge.attest import reports as reports_mod
    from dgr_forge.core.gitutil import NAME

    shown = report  # or `--lane L`'s latest in the workspace: exactly one of them
    if report is not None and lanes:
        raise BadInput(
            "name a report or --lane L, not both", hint="dgr-forge report show --lane cpu"
        )
    if shown is None:
        if not lanes or len(lanes) > 1:
            raise BadInput(
                "report show needs a report R or one --lane L (that lane's latest report)",
                hint="dgr-forge report show --lane cpu",
            )
        if not NAME.fullmatch(lane := lanes[0]):
            raise BadInput(
                f"--lane {lane!r} is not a lane name (letters, digits, '.', '_', '-')",
                hint="a lane is the name of a recipes/LANE.toml",
                details={"lane": lane},
            )
        if (shown := reports_mod.latest_report(env.forge, lane)) is None:
            raise BadInput(
                f"no report of lane {lane} in {env.forge.rel(env.forge.reports_dir)}",
                hint=f"build it first: dgr-forge build --lane {lane}",
                details={"lane": lane},
            )
    if (loaded := reports_mod.load(shown)).statement is None:
        raise BadInput(f"{shown}: {loaded.payload_error}", hint="the report is damaged")
    s = reports_mod.summary(loaded)
    out, up = env.out, s.upstream
    out.answer(f"report     {shown if report is not None else env.forge.rel(shown)}")
    out.answer(f"lane       {s.lane}")
    out.answer(f"upstream   {up.name} {up.commit} (tree {up.tree})")
    out.answer(f"patches    {len(s.patches)}" + ("" if s.patches else " (none)"))
    for p in s.patches:
        out.answer(f"  {p.name}  sha256 {p.sha256}")
    out.answer(f"artifacts  {len(s.artifacts)}")
    for a in s.artifacts:
        out.answer(f"  {a.name}  sha256 {a.sha256}")
    for t in s.toolchain:
        out.answer(f"tool       {t.name} {t.version}")
    signed = ", ".join(k[:16] for k in s.signed_by) or "UNSIGNED"
    out.answer(f"signed by  {signed} (not checked here: run `dgr-forge report verify`)")
    out.answer(f"builder    {s.builder}")
    out.answer(f"started    {s.started_on}  finished {s.finished_on}")
    if (surface := s.surface) is not None:
        out.answer(f"surface    {len(surface.headers)} boundary header(s) read")
        for h in surface.headers:
            out.answer(f"  {h}")
        out.answer(f"imports    {len(surface.symbols)} upstream symbol(s)")
        for sym in surface.symbols:
            out.answer(f"  {sym.name}  {sym.header}  ({sym.library})")
    return reports_mod.ReportShow(summary=s, statement=loaded.statement)


@command(report_app, "verify")
def verify(
    env: Env,
    report: Annotated[Path, typer.Argument(help="A .intoto.jsonl report.")],
    key: opt.VerifyKey = None,
    artifacts: Annotated[
        bool, typer.Option("--artifacts", help="Re-hash every subject on disk.")
    ] = False,
) -> ReportVerify | Outcome:
    """Check signature, payload type, statement/predicate types (and artifacts); exit 1 if not."""
    from dgr_forge.attest import reports as reports_mod

    public = reports_mod.verifier(key, report)
    base = None  # where subject names (workspace-relative) resolve: --workspace, the
    # report's own workspace (a report in <ws>/reports/), else the forge's workspace
    if named := artifacts and (env.options.workspace or os.environ.get("DGR_WORKSPACE")):
        base = Path(named).resolve()
    elif artifacts:
        up = report.resolve().parent
        base = up.parent if up.name == "reports" else env.forge.workspace
    v = reports_mod.verify_report(report, public, artifacts_base=base)
    if public is not None:
        env.out.answer(f"key: keyid {public.keyid[:16]} from {public.source}")
    for a in v.artifacts:
        env.out.answer(f"  {a.status:8} {a.name}")
    fields = v.result()
    if not v.ok:
        for failure in v.failures:
            env.out.error(failure)
        env.out.answer(f"{report}: FAILED verification ({len(v.failures)} problem(s))")
        return Outcome.of(fields, False)
    checked = f", {len(v.artifacts)} artifact(s) match" if artifacts else ""
    env.out.answer(f"{report}: OK (signature, payload type, statement{checked})")
    return fields


@command(report_app, "compare")
def compare(
    env: Env,
    a: Annotated[Path, typer.Argument(help="A .intoto.jsonl report.")],
    b: Annotated[Path, typer.Argument(help="Another report of the same lane.")],
    key: opt.VerifyKey = None,
) -> ReportCompare | Outcome:
    """Verify two reports and compare their subjects; exit 1 listing any difference."""
    from dgr_forge.attest import reports as reports_mod

    c = reports_mod.compare_reports(a, b, reports_mod.verifier(key, a, b))
    for name, v in (("A", c.a), ("B", c.b)):
        for failure in v.failures:
            env.out.error(f"{name} {v.report}: {failure}")
    for d in c.differences:
        env.out.answer(f"  {d.status:8} {d.name}  a={d.a}  b={d.b}")
    for what, moved in (("header", c.surface.headers), ("symbol", c.surface.symbols)):
        for sign, names in (("+", moved.added), ("-", moved.removed)):  # growing or shrinking
            for name in names:
                env.out.answer(f"  surface  {sign} {what} {name}")
    if not c.identical:
        what = "differ" if c.a.verified and c.b.verified else "do not both verify"
        env.out.answer(f"{a} and {b}: {what} ({len(c.differences)} subject difference(s))")
        return Outcome.of(c, False)
    env.out.answer(f"{a} and {b}: identical subjects ({c.subjects} artifact(s))")
    return c


@command(app, "certify")
def certify_command(
    env: Env,
    lanes: opt.CertifyLane = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="Model manifest name (manifests/models/NAME.toml)."),
    ] = None,
    dest: opt.CertifyDest = None,
    device: Annotated[
        str | None,
        typer.Option("--device", help="The {device} the steps test (default: the first)."),
    ] = None,
    build_report: opt.BuildReport = None,
    report_: opt.BuildReportAsReport = None,
    attested: Annotated[
        Path | None,
        typer.Option(
            "--attested",
            "--evidence",
            help="Record a person's evidence file instead (attested, not checked).",
        ),
    ] = None,
    hardware: Annotated[
        str | None,
        typer.Option("--hardware", metavar="TEXT", help="With --attested: describe the hardware."),
    ] = None,
    key: opt.SigningKey = None,
    report_key: Annotated[
        str | None,
        typer.Option(
            "--report-key", metavar="PATH", help="Public key the report must verify with."
        ),
    ] = None,
    mirror: opt.FileMirror = None,
) -> Struct:
    """Run the lane's certification suite on this host; sign it when every step passes.

    `--lane` names the one lane certified (its [certify] suite runs on the report's own
    binaries; a failing step is exit 1, nothing written); `--attested FILE --build-report R`
    records a person's evidence instead. `--mirror`: where a missing model file is
    provisioned from."""

    report = build_report or report_
    from dgr_forge.certify import sequence

    if len(lanes or []) > 1:
        raise BadInput("certify takes one --lane", hint="certify each lane in its own run")
    lane = lanes[0] if lanes else None
    if attested is not None:
        if lane is not None or model is not None or device is not None:
            raise BadInput(
                "--attested records a person's evidence: it takes no --lane, --model or --device",
                hint="certify --lane L [--model M] runs the suite; certify --attested FILE "
                "--build-report R records evidence",
            )
        if report is None:
            raise BadInput("--attested needs --build-report R", hint="name the lane's report")
        with _certify_session(env, lock=False) as got:
            return sequence.attested(
                got, env.out, report=report, evidence=attested, described=hardware,
                key=key, report_key=report_key,
            )  # fmt: skip
    if lane is None:
        raise BadInput(
            "certify needs --lane L (run its suite) or --attested FILE --build-report R",
            hint="dgr-forge certify --lane cpu --model tiny",
        )
    if hardware is not None:
        raise BadInput("--hardware goes with --attested", hint="the hardware is probed")
    # the workspace lock for the whole run: a build cannot change the lane's binaries,
    # nor another certify its logs, while the steps run
    with _certify_session(env, lock=True) as got:
        return sequence.lane(
            got, env.out, lane=lane, model=model, dest=dest, device=device,
            report=report, key=key, report_key=report_key, mirror=mirror,
        )  # fmt: skip


@contextlib.contextmanager
def _certify_session(env: Env, *, lock: bool) -> Iterator[Inputs]:
    """The inputs a certification binds; the host's tools where its probes are there."""
    from dgr_forge.certify.sequence import Inputs

    probed = (env.forge.toolchains_dir / "probes.toml").is_file()
    with env.session(lock=lock, recipes=True, worker=True, probes=probed) as s:
        yield Inputs(s.forge, s.manifest, s.recipes, s.doctor if probed else None, s.worker)
