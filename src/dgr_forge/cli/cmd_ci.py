"""`dgr-forge ci matrix` and `dgr-forge ci render`: CI generated from recipes/."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer

from dgr_forge.cli.app import Env, command, group
from dgr_forge.cli.options import WorkflowOut, complete_provider
from dgr_forge.core.errors import BadInput, Details, OperationFailed
from dgr_forge.core.urls import shown

if TYPE_CHECKING:
    from dgr_forge.ci.render import CiMatrix, Render

ci_app = group("ci", "CI generated from the recipes: the lane matrix and workflow files.")


@command(ci_app, "matrix")
def matrix_command(env: Env) -> CiMatrix:
    """Print the per-lane CI matrix as JSON: {"include": [{lane, backend, runs_on, ...}]}."""
    import msgspec

    from dgr_forge.ci import render as ci

    with env.session(manifest=False, recipes=True) as s:
        lanes = ci.matrix(s.recipes)
    # the bare matrix on stdout: `matrix: ${{ fromJSON(...) }}` and jq read it as is
    env.out.document(json.dumps(msgspec.to_builtins(lanes), indent=2) + "\n")
    env.out.info(f"{len(lanes.include)} lane(s): " + ", ".join(e.lane for e in lanes.include))
    return ci.CiMatrix(matrix=lanes)


@command(ci_app, "render")
def render_command(
    env: Env,
    provider: Annotated[
        str,
        typer.Option(
            "--provider",
            metavar="PROVIDER",
            help="CI system: github or gitlab.",
            autocompletion=complete_provider,
        ),
    ] = "github",
    out: WorkflowOut = None,
    check: Annotated[
        Path | None,
        typer.Option(
            "--check",
            help="Compare with this committed workflow; exit 1 with a diff when it is stale.",
        ),
    ] = None,
    tool_source: Annotated[
        str | None,
        typer.Option(
            "--tool-source",
            help="Where every job installs dgr-forge from: dgr-forge==X (your package index), "
            "https://.../dgr_forge-X-py3-none-any.whl#sha256=HEX, or "
            "git+https://.../REPO@COMMIT (40 hex).",
        ),
    ] = None,
    write_pins: Annotated[
        bool,
        typer.Option(
            "--write-pins",
            help="Also write the missing ci/constraints.txt from this environment (and "
            "ci/requirements.txt when this dgr-forge came from a git commit); never overwrites.",
        ),
    ] = False,
) -> Render:
    """Render the CI workflow for the lanes in recipes/ (stdout unless --out or --check)."""
    import msgspec

    from dgr_forge.ci import install as ci_install
    from dgr_forge.ci import render as ci

    if out is not None and check is not None:
        raise BadInput("--out and --check exclude each other", hint="pass one of them")
    which = ci.provider(provider)
    with env.session(recipes=True) as s:  # reads the inputs; writes no forge state
        forge, lanes, pin = s.forge, s.recipes, s.manifest
    source = ci_install.tool_source(tool_source) if tool_source is not None else None
    how = ci_install.install(forge.root, source)
    # only the files asked for are written, each said; a workflow whose install step
    # reads a missing file is never rendered (exit 2 naming it and the ways to give it)
    written = ci_install.write_missing(forge.root, how) if write_pins else []
    for rel in written:
        env.out.info(f"{forge.rel(forge.root / rel)}: written")
    if written:
        how = ci_install.install(forge.root, source)
    if how.missing:
        raise ci_install.missing_refusal(how)
    text = ci.render(which, lanes, pin, how, ci.bump_request(forge.root))
    # the rendering, also what a stale or incomplete `--check` reports as its details
    fields = msgspec.structs.asdict(ci.rendered(which, lanes, how, text))
    if check is not None:
        if diff := ci.stale_diff(check, text):
            # the diff itself is the message: what to commit, line by line
            sys.stderr.write(shown(diff))  # the committed file's bytes: escaped
            sys.stderr.flush()
            raise OperationFailed(
                f"{check}: stale: it differs from what recipes/ and the manifest render to",
                hint=f"run: dgr-forge ci render --provider {which.name} --out {check}",
                details=Details(**cast(Details, fields), path=str(check), current=False, diff=diff),
            )
        env.out.answer(f"{check}: up to date ({len(lanes)} lane(s))")
        return ci.CiRenderCheck(**fields, path=str(check), current=True)
    if out is not None:
        changed = ci.write(out, text)
        env.out.answer(f"{out}: {'written' if changed else 'unchanged'} ({len(lanes)} lane(s))")
        return ci.CiRenderOut(
            **fields,
            path=str(out),
            changed=changed,
            written=written,
            requirements_written=ci_install.REQUIREMENTS in written,
        )
    env.out.document(text)
    return ci.CiRender(**fields, workflow=text)
