"""build, doctor, lanes, presets: the backend-lane commands (thin: parse, call, describe)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dgr_forge.cli import options as opt
from dgr_forge.cli.app import Env, Outcome, app, command
from dgr_forge.core.errors import BadInput, ExitCode

if TYPE_CHECKING:
    from dgr_forge.certify.records import Lanes as LanesResult
    from dgr_forge.certify.shapes import StepFigures
    from dgr_forge.lanes.presets import Presets


@command(app)
def build(
    env: Env,
    lane: opt.BuildLanes = None,
    worker: opt.Worker = None,
    jobs: opt.BuildJobs = None,
    key: opt.SigningKey = None,
    no_sign: Annotated[bool, typer.Option("--no-sign", help="Write the report unsigned.")] = False,
    mirror: opt.Mirror = None,
    offline: opt.Offline = False,
    cache: Annotated[
        str | None,
        typer.Option(
            "--cache",
            metavar="CACHE",
            help="Compiler cache: auto|ccache|sccache|off (or DGR_CACHE).",
            autocompletion=opt.complete_cache,
        ),
    ] = None,
    cache_mode: Annotated[
        str | None,
        typer.Option(
            "--cache-mode",
            metavar="MODE",
            help="Cache mode: rw|ro (or DGR_CACHE_MODE).",
            autocompletion=opt.complete_cache_mode,
        ),
    ] = None,
    force: opt.BuildForce = False,
) -> Outcome:
    """Fetch + patch as needed, then configure (Ninja) and build each lane; signed reports.

    A lane this host cannot build is refused before anything runs (`doctor` says why)."""
    from dgr_forge.lanes import build as build_mod
    from dgr_forge.lanes.lane_build import BuildOptions

    opts = BuildOptions.resolve(
        lanes=lane,
        worker=worker,
        jobs=jobs,
        key=key,
        sign=not no_sign,
        mirror=mirror,
        offline=offline,
        cache=cache,
        cache_mode=cache_mode,
        force=force,
    )
    # the lock before any input is read: a waiting build builds (and signs) what the
    # build it waited for left, never a manifest read before
    with env.session(
        lock=True,
        recover=True,
        refuse_rebase=True,
        recipes=True,
        probes=True,
        worker=True,
        worker_override=worker,
    ) as s:
        result = build_mod.build(s.forge, env.out, opts, s.manifest, s.recipes, s.doctor, s.worker)
    return Outcome.of(result, result.failed is None)


@command(app)
def doctor(env: Env, lane: opt.Lanes = None) -> Outcome:
    """Probe this host: build tools, compilers, GPU toolkits; which lanes can build here.

    With `--lane`: exit 2 unless every lane named can build here (as `build`)."""
    from dgr_forge.host.recipes import select
    from dgr_forge.lanes import plan as doctor_mod

    with env.session(manifest=False, recipes=True, probes=True) as s:
        all_recipes, doc = s.recipes, s.doctor
    select(all_recipes, list(lane or []))  # an unknown --lane is exit 2, before probing
    from dgr_forge.cache import select as cache_mod

    cache_info = cache_mod.describe(doc)
    result = doctor_mod.diagnose(doc, all_recipes, cache_info)
    if lane:
        result = doctor_mod.gate(result, list(lane))
    rows = [  # a library has no version
        (p.name, "found" if p.found else "missing", p.version or "", p.path or "")
        for p in (*result.tools, *result.libraries)
    ]
    env.out.table(f"host {result.host_os}/{result.machine}", ["probe", "", "version", "path"], rows)
    env.out.answer(cache_mod.summary(cache_info))
    for check in result.lanes:
        verdict = check.summary if check.buildable or not lane else "cannot build here"
        env.out.answer(f"{check.lane} lane: {verdict}")
        if lane and not check.buildable:
            env.out.answer(f"    {check.summary}")
        for line in check.reasons():
            env.out.answer(f"    {line}")
    # a lane that cannot build here: exit 2, as `build` (and `certify`) refuse it
    return Outcome(result, ExitCode.BAD_INPUT if result.unbuildable else ExitCode.OK)


@command(app)
def lanes(
    env: Env,
    advertised: Annotated[
        bool, typer.Option("--advertised", help="Only lanes with a valid hardware certification.")
    ] = False,
    key: opt.TrustedKeys = None,
) -> LanesResult:
    """The lane matrix: backend, buildable here, last build, certified."""
    from dgr_forge.attest import keys as keys_mod
    from dgr_forge.certify.records import overview

    trusted = [keys_mod.load_public_file(Path(k).expanduser()) for k in key or []]
    with env.session(recipes=True, probes=True, worker=True) as s:  # read-only: no lock
        result = overview(
            s.forge, s.manifest, s.recipes, s.doctor, trusted, s.worker, advertised=advertised
        )
    if advertised:
        env.out.table(
            None,
            ["lane", "model", "hardware class", "figures", "certified on"],
            [
                (e.lane, e.model, e.hardware_class, _figures(e.figures), e.certified_on or "")
                for e in result.entries or []
            ],
            empty="nothing certified: no lane has a valid hardware certification",
        )
        return result
    env.out.table(
        None,
        ["lane", "backend", "here", "last build", "report", "certified"],
        [
            (
                r.lane,
                r.backend,
                r.summary,
                f"{r.last_build.line()} {r.last_build.time}" if r.last_build else "never",
                env.forge.rel(Path(r.last_build.report))
                if r.last_build and r.last_build.report
                else "",
                "yes" if r.certified else r.certification.reason,
            )
            for r in result.lanes
        ],
        empty="no lanes: add recipes/<lane>.toml",
    )
    return result


def _figures(figures: dict[str, StepFigures | None]) -> str:
    """One line of a certification's figures: ops passed/failed, tokens per second."""
    from dgr_forge.certify.shapes import BenchFigures, CtestFigures, OpsFigures, ParityFigures

    parts = []
    for step, f in sorted(figures.items()):
        if isinstance(f, OpsFigures):
            parts.append(f"{step}: {f.ops_passed}/{f.ops_total} ops")
        elif isinstance(f, BenchFigures):
            for ts, what in ((f.prompt_ts, "pp"), (f.gen_ts, "tg")):
                if ts is not None:
                    parts.append(f"{step}: {what} {ts:.1f} t/s")
        elif isinstance(f, CtestFigures):
            parts.append(f"{step}: {f.passed}/{f.tests} tests")
        elif isinstance(f, ParityFigures):
            parts.append(f"{step}: PPL {f.ppl} (pin {f.reference_ppl})")
    return ", ".join(parts)


@command(app)
def presets(
    env: Env,
    lane: opt.Lanes = None,
    worker: opt.Worker = None,
    print_: Annotated[
        bool, typer.Option("--print", help="Print the forge's presets; write nothing.")
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Show the change to CMakeUserPresets.json; write nothing."),
    ] = False,
    remove: Annotated[
        bool,
        typer.Option(
            "--remove",
            help="Take the forge's include out of CMakeUserPresets.json and delete its "
            "presets file.",
        ),
    ] = False,
    out_path: opt.PresetsOut = None,
) -> Presets:
    """The lanes' CMake presets, included from CMakeUserPresets.json (yours stay yours).

    The forge writes dgr-forge.presets.json and adds one include entry for it to
    CMakeUserPresets.json, every other byte kept; --remove takes it out again."""
    from dgr_forge.lanes import presets as presets_mod

    if remove and print_:
        raise BadInput("presets: --remove and --print do not go together",
                       hint="give one of them")  # fmt: skip
    with env.session(recipes=True, probes=True, worker=True, worker_override=worker) as s:
        m, spec = s.manifest, s.worker
        data: dict[str, Any] | None = None
        if not remove:
            data = presets_mod.render(s.forge, m, s.recipes, s.doctor, spec, list(lane or []))
    names = [p["name"] for p in data["configurePresets"]] if data else []
    if print_ and data is not None:
        env.out.document(json.dumps(data, indent=2) + "\n")
        return presets_mod.Presets(path=None, presets=names, content=data)
    override = worker is not None
    change = presets_mod.plan_change(env.forge, data, out_path, m, spec, worker_override=override)
    diff = change.diff()
    if dry_run:
        env.out.document(diff or f"{env.forge.rel(change.user)}: no change\n")
    else:
        change.apply(env.forge)
        if remove:
            env.out.answer(f"removed {env.forge.rel(change.own)} and its include from "
                         f"{env.forge.rel(change.user)}")  # fmt: skip
        else:
            env.out.answer(f"wrote {env.forge.rel(change.own)}: {', '.join(names)}; "
                         f"{env.forge.rel(change.user)} includes it")  # fmt: skip
    return presets_mod.Presets(
        path=None if remove else str(change.own),
        presets=names,
        user_presets=str(change.user),
        user_presets_change=change.kind(),
        diff=diff,
        dry_run=dry_run,
    )
