"""The order of a certification: `lane` (`certify --lane`) and `attested` (`certify
--attested`), as docs/build-and-reports.md, *Certification*, numbers it; the key and trust
anchors are exit 2 before anything runs, and the record is written only when every step
passed. `attested` runs nothing (the report is not re-hashed: it may come from another host).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec

from dgr_forge.attest import keys
from dgr_forge.attest import reports as reports_mod
from dgr_forge.certify import hardware, records, run, suite, trust
from dgr_forge.certify import model as model_mod
from dgr_forge.certify.shapes import Certified, Evidence
from dgr_forge.core.errors import BadInput, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import MAX_EVIDENCE_BYTES, sha256_regular
from dgr_forge.core.output import Reporter
from dgr_forge.host.doctor import Doctor
from dgr_forge.host.recipes import Recipe, select
from dgr_forge.host.worker import WorkerSpec
from dgr_forge.lanes.inputs import tool_versions, worker_identity
from dgr_forge.lanes.plan import refuse_unbuildable, refuse_unbuildable_tree
from dgr_forge.lanes.state import lane_state
from dgr_forge.upstream.manifest import UpstreamManifest


@dataclass(frozen=True)
class Inputs:
    forge: Forge
    m: UpstreamManifest
    recipes: dict[str, Recipe]
    doctor: Doctor | None  # None: the root has no probes file (tools not bound)
    worker: WorkerSpec | None

    def bound(self) -> tuple[Mapping[str, str] | None, dict[str, dict[str, str]] | None]:
        tools = tool_versions(self.doctor, self.recipes) if self.doctor is not None else None
        return msgspec.to_builtins(worker_identity(self.worker)), tools


def attested(
    got: Inputs,
    out: Reporter,
    *,
    report: Path,
    evidence: Path,
    described: str | None,
    key: str | None,
    report_key: str | None,
) -> Certified:
    """Record a person's evidence (`attested, not checked`, never advertised)."""
    forge, m = got.forge, got.m
    public = keys.resolve_verifier(report_key, "--report-key")
    signer = keys.resolve_signer(key, out)
    trust.trusted_keys(forge)  # a hostile trust anchor is exit 2 before anything is read
    evidence_sha = sha256_regular(  # first: a FIFO or /dev/zero is refused, never hashed
        evidence,
        what="evidence file",
        hint="pass --attested with the test log or benchmark output from the hardware run "
        f"(one regular file of at most {MAX_EVIDENCE_BYTES >> 30} GiB; tar a directory)",
        limit=MAX_EVIDENCE_BYTES,
    )
    checked = trust.check_report(forge, got.recipes, m, report, public, *got.bound())
    hw = hardware.host(checked.recipe.lane.backend, described)
    result = records.write(
        forge, checked, m, kind="attested", hardware=hw, signer=signer, out=out,
        evidence=Evidence(name=evidence.name, sha256=evidence_sha),
    )  # fmt: skip
    out.info(f"{checked.lane}: attested, not checked (never advertised)")
    return result


def lane(
    got: Inputs,
    out: Reporter,
    *,
    lane: str,
    model: str | None,
    dest: Path | None,
    device: str | None,
    report: Path | None,
    key: str | None,
    report_key: str | None,
    mirror: str | None = None,
) -> Certified:
    """The caller holds the workspace lock for the whole run."""
    forge, m = got.forge, got.m
    (recipe,) = select(got.recipes, [lane])
    if got.doctor is not None:
        refuse_unbuildable([got.doctor.check_lane(recipe)])
    refuse_unbuildable_tree(forge, got.worker)  # the pin's own build runs here too
    worker, tools = got.bound()
    if (the_suite := suite.load(recipe)) is None:
        raise BadInput(
            f"{forge.rel(recipe.path)}: no [certify] suite: lane {lane} has nothing to run",
            hint="add a [certify] table with its steps (docs/build-and-reports.md, Certification)",
            details={"lane": lane},
        )
    if the_suite.needs_model and model is None:
        raise BadInput(
            f"lane {lane}'s suite runs a model ({{model}}): pass --model NAME",
            hint="name a manifest under manifests/models/ (`dgr-forge artifacts manifest` "
            "writes one)",
            details={"lane": lane},
        )
    the_device = device or run.DEFAULT_DEVICE.get(recipe.lane.backend.lower(), "CPU")
    if not run.DEVICE.fullmatch(the_device):
        raise BadInput(
            f"--device {the_device[:80]!r}: not a ggml device name",
            hint="name a device as ggml does (CPU, CUDA0, ROCm0, Vulkan0); no leading '-', "
            "no spaces",
            details={"device": the_device[:80]},
        )
    signer = keys.resolve_signer(key, out)
    public = keys.resolve_verifier(report_key, "--report-key")
    trust.trusted_keys(forge)  # a hostile trust anchor is exit 2 before anything runs
    report = report or reports_mod.latest_report(forge, lane)
    if report is None:
        raise BadInput(
            f"lane {lane} has no report in {forge.rel(forge.reports_dir)}",
            hint=f"build it first (`dgr-forge build --lane {lane}`) or pass --build-report R",
            details={"lane": lane},
        )
    checked = trust.check_report(
        forge, got.recipes, m, report, public, worker, tools, artifacts_base=forge.workspace
    )
    if checked.lane != lane:
        raise BadInput(
            f"{report}: a report of lane {checked.lane}, not {lane}",
            hint=f"pass a report of lane {lane}",
        )
    last = lane_state(forge, lane).last_build
    report_sha = checked.check.report.sha256
    # the whole input digest of the build that wrote this report, when it is the last one
    input_digest = last.input_digest if last and last.report_sha256 == report_sha else None
    hw = hardware.host(recipe.lane.backend)
    out.info(f"hardware class {hw.hardware_class}")
    found = run.programs(forge, lane, the_suite, reports_mod.subject_digests(checked.check))
    pins = run.references(forge, m, recipe, got.doctor, the_suite, out)
    prepared = model_mod.prepare(forge, out, lane, model, dest, mirror) if model else None
    try:
        values = {
            "model": str(prepared.first) if prepared else None,
            "device": the_device,
            "threads": str(os.cpu_count() or 1),
        }
        size = prepared.bound.tensor_bytes if prepared else None
        results = run.run_steps(forge, lane, the_suite, found, values, out, model, pins, size)
        if prepared is not None:
            model_mod.check_after(prepared, out)
    finally:
        if prepared is not None:
            shutil.rmtree(prepared.private, ignore_errors=True)
    failed = [r for r in results if not r.passed]
    for r in results:
        out.info(f"  {r.name}: pass" if r.passed else f"  {r.name}: FAIL - {'; '.join(r.problems)}")
    if failed:
        raise OperationFailed(
            f"lane {lane}: certification failed, nothing written: "
            + "; ".join(f"step {r.name}: {'; '.join(r.problems)}" for r in failed),
            hint="fix what the step names (each step's full log is under "
            f"{forge.rel(forge.logs_dir)}/) and run certify again",
            details={
                "lane": lane,
                "failed_steps": [r.name for r in failed],
                "steps": msgspec.to_builtins(results),
            },
        )
    return records.write(
        forge, checked, m, kind="checked", input_digest=input_digest,
        model=prepared.bound if prepared else None, device=the_device, steps=results,
        hardware=hw, signer=signer, out=out,
    )  # fmt: skip
