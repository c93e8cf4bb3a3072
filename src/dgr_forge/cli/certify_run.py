"""`certify --lane L [--model M [--dest DIR]] [--device D] [--build-report R]`: the order of a
checked certification, composed from the library (DESIGN.md, *Certification*).

1. inputs under the command context (recipes, worker, probes); the lane's `[certify]`;
2. the signing key and trust anchors (exit 2 before anything runs);
3. the report (its latest, or `--report`): verified, built from this checkout's inputs,
   every subject re-hashed in the workspace (`attest.certify.check_report`);
4. the model manifest's files verified (provisioned when missing) before any step;
5. the hardware probed and classed (`attest.hardware`);
6. each step's program found through the File API and matched to a report subject, then
   run (`lanes.certrun`);
7. only when every step passed, the record (`attest.checked.write`); else exit 1 naming
   each failing step and its cases or figures, nothing written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dgr_forge.cli.app import Env
from dgr_forge.cli.context import Session
from dgr_forge.core.errors import BadInput, OperationFailed
from dgr_forge.core.forge import Forge


def certify_lane(
    env: Env,
    *,
    lane: str,
    model: str | None,
    dest: Path | None,
    device: str | None,
    report: Path | None,
    key: str | None,
    report_key: str | None,
) -> dict[str, Any]:
    """`certify --lane` under the workspace lock, held for the whole run: a build cannot
    change the lane's binaries, nor another certify its logs, while the steps run."""
    probed = (env.forge.toolchains_dir / "probes.toml").is_file()
    with env.session(lock=True, recipes=True, worker=True, probes=probed) as s:
        return _certify(env, s, probed, lane, model, dest, device, report, key, report_key)


def _certify(
    env: Env,
    s: Session,
    probed: bool,
    lane: str,
    model: str | None,
    dest: Path | None,
    device: str | None,
    report: Path | None,
    key: str | None,
    report_key: str | None,
) -> dict[str, Any]:
    import msgspec

    from dgr_forge.attest import certify as certify_mod
    from dgr_forge.attest import checked, hardware, keys
    from dgr_forge.attest import reports as reports_mod
    from dgr_forge.host.recipes import select
    from dgr_forge.lanes import certrun
    from dgr_forge.lanes.inputs import tool_versions, worker_identity
    from dgr_forge.lanes.state import lane_state

    forge, m, all_recipes = s.forge, s.manifest, s.recipes
    bound_worker = worker_identity(s.worker)
    tools = tool_versions(s.doctor, all_recipes) if probed else None
    (recipe,) = select(all_recipes, [lane])
    suite = recipe.certify
    if suite is None:
        raise BadInput(
            f"{forge.rel(recipe.path)}: no [certify] suite: lane {lane} has nothing to run",
            hint="add a [certify] table with its steps (docs/build-and-reports.md, Certification)",
            details={"lane": lane},
        )
    if suite.needs_model and model is None:
        raise BadInput(
            f"lane {lane}'s suite runs a model ({{model}}): pass --model NAME",
            hint="name a manifest under manifests/models/ (`dgr-forge artifacts manifest` "
            "writes one)",
            details={"lane": lane},
        )
    the_device = certrun.check_device(device or certrun.default_device(recipe.backend))
    signer = keys.resolve_signer(key, env.out)
    public = keys.resolve_verifier(report_key)
    certify_mod.trusted_keys(forge)  # a hostile trust anchor is exit 2 before anything runs
    report = report or reports_mod.latest_report(forge, lane)
    if report is None:
        raise BadInput(
            f"lane {lane} has no report in {forge.rel(forge.reports_dir)}",
            hint=f"build it first (`dgr-forge build --lane {lane}`) or pass --build-report R",
            details={"lane": lane},
        )
    checked_report = certify_mod.check_report(
        forge, all_recipes, m, report, public, bound_worker, tools, artifacts_base=forge.workspace
    )
    if checked_report.lane != lane:
        raise BadInput(
            f"{report}: a report of lane {checked_report.lane}, not {lane}",
            hint=f"pass a report of lane {lane}",
        )
    last = lane_state(forge, lane).last_build
    report_sha = checked_report.check.report.sha256
    # the whole input digest of the build that wrote this report, when it is the last one
    input_digest = last.input_digest if last and last.report_sha256 == report_sha else None
    bound_model, first_split = _model(env, forge, model, dest) if model else (None, None)
    identity = hardware.probe()
    cls = hardware.hardware_class(identity, recipe.backend)
    env.out.info(f"hardware class {cls}")
    subjects = reports_mod.subject_digests(checked_report.check)
    found = certrun.programs(forge, lane, suite, subjects)
    values = {
        "model": str(first_split) if first_split else None,
        "device": the_device,
        "threads": str(os.cpu_count() or 1),
    }
    results = certrun.run_steps(forge, lane, suite, found, values, env.out, model)
    records = [r.record() for r in results]
    steps = msgspec.to_builtins(records)
    failed = [r for r in results if not r.passed]
    for r in results:
        env.out.info(
            f"  {r.step.name}: {'pass' if r.passed else 'FAIL'}"
            + ("" if r.passed else " - " + "; ".join(r.problems))
        )
    if failed:
        raise OperationFailed(
            f"lane {lane}: certification failed, nothing written: "
            + "; ".join(f"step {r.step.name}: {'; '.join(r.problems)}" for r in failed),
            hint="fix what the step names (each step's full log is under "
            f"{forge.rel(forge.logs_dir)}/) and run certify again",
            details={"lane": lane, "failed_steps": [r.step.name for r in failed], "steps": steps},
        )
    path, body = checked.write(
        forge,
        checked_report,
        m,
        report=report,
        input_digest=input_digest,
        model=bound_model,
        hardware=identity,
        hardware_class=cls,
        device=the_device,
        steps=records,
        signer=signer,
        out=env.out,
    )
    trusted = {k.keyid for k in certify_mod.trusted_keys(forge)}
    return {
        "certification": str(path),
        "trusted": signer.keyid in trusted,
        "lane": lane,
        "model": bound_model["name"] if bound_model else checked.NO_MODEL,
        "hardware_class": cls,
        "report_sha256": checked_report.check.report.sha256,
        "keyid": signer.keyid,
        "steps": steps,
        "hardware": msgspec.to_builtins(identity),
        "certified_on": body["certifiedOn"],
    }


def _model(env: Env, forge: Forge, name: str, dest: Path | None) -> tuple[dict[str, Any], Path]:
    """The model's files verified (provisioned when missing); (what the record binds, the
    first split's path)."""
    from dgr_forge.attest import checked
    from dgr_forge.core.gitutil import NAME
    from dgr_forge.models import artifacts
    from dgr_forge.models import manifest as models

    if not NAME.match(name) or name.endswith(".toml"):
        raise BadInput(
            f"--model {name[:80]!r}: not a manifest name",
            hint="name a manifest under manifests/models/ by its file name without .toml",
            details={"model": name[:80]},
        )
    path = forge.root / models.MODELS_DIR / f"{name}.toml"
    mm = models.load(path, forge.root)
    target = dest or forge.workspace / "models" / name
    if target.is_dir():
        result = artifacts.verify(mm, target, env.out)
    if not target.is_dir() or result.bad:
        wrong = [f for f in result.files if f.status == "bad"] if target.is_dir() else []
        if wrong:
            bad = [f"{f.name}: {'; '.join(f.problems)}" for f in wrong]
            raise OperationFailed(
                f"model {name}: files in {target} do not match the manifest: " + "; ".join(bad),
                hint=f"remove them and re-run, or `dgr-forge artifacts provision {name} "
                f"--dest {target}`",
                details={"model": name, "bad": result.bad},
            )
        provisioned = artifacts.provision(mm, target, env.out)
        if not provisioned.ok:
            raise OperationFailed(
                f"model {name}: provisioning into {target} failed",
                hint="see the errors above; re-run to resume",
                details={"model": name},
            )
        result = artifacts.verify(mm, target, env.out)
        if result.bad:
            raise OperationFailed(
                f"model {name}: {', '.join(result.bad)} do not verify",
                hint="re-provision the model",
                details={"model": name},
            )

    def part(f: models.ModelFile) -> int:
        split = models.split_name(f.name)
        return split.no if split else 0

    files = sorted(mm.files, key=part)
    first = result.dest / files[0].name
    bound = {
        "name": name,
        "model_name": mm.name,
        "manifest": forge.rel(path),
        "manifest_sha256": checked.manifest_sha256(forge, name),
        "files": [{"name": f.name, "size": f.size, "sha256": f.sha256} for f in mm.files],
        "first_split": files[0].name,
    }
    return bound, first
