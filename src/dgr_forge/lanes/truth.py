"""The checks that keep a lane's report true to what ran (issue 20), for `lane_build`;
the builder records the lane failed in the phase it ran one in."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

from dgr_forge.core.errors import OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import sha256_file
from dgr_forge.lanes import stamps
from dgr_forge.lanes.plan import LanePlan
from dgr_forge.lanes.state import LastBuild


def check_launchers(plan: LanePlan) -> str | None:
    """The launcher the generated rules run; exit 1 when it is not the forge's choice."""
    from dgr_forge.lanes import cmake_api  # after configure only

    found = cmake_api.read_launchers(plan.build_dir)
    problems = found.problems(plan.launcher)
    if problems:
        raise OperationFailed(
            f"{plan.lane}: the generated build does not run what the forge chose: "
            + "; ".join(problems),
            hint="a launcher comes from the forge alone (--cache); remove the upstream's, "
            "the toolchain file's or the recipe's (RULE_LAUNCH_*, *_LAUNCHER, *_CLANG_TIDY), "
            "or report the upstream switch that sets it",
            details={
                "lane": plan.lane,
                "compile": sorted(found.compile),
                "link": sorted(found.link),
                "code_check": sorted(found.code_check),
                "chosen": plan.launcher,
            },
        )
    return next(iter(found.compile)) if len(found.compile) == 1 else None


def changed_error(forge: Forge, lane: str, moved: list[Path], when: str) -> NoReturn:
    shown = ", ".join(forge.rel(p) for p in moved)
    raise OperationFailed(
        f"{lane}: {shown} changed {when}; no report: it would name digests the build did not read",
        hint="let edits finish (or another workspace's export), then build again",
        details={"lane": lane, "changed": [str(p) for p in moved]},
    )


def changed_subjects(last: LastBuild | None) -> list[Path]:
    """Subjects no longer the bytes reported; re-hashed only when their stat record moved."""
    if last is None:
        return []
    known = {str(Path(a.path)): a.sha256 for a in last.artifacts}  # the records as stamps
    now = stamps.restamp({p: [sha, *last.subject_stats.get(p, [])] for p, sha in known.items()})
    last.subject_stats.update({p: s[1:] for p, s in now.items() if s[0] == known[p]})
    return [Path(p) for p, sha in known.items() if now.get(p, [None])[0] != sha]


def report_true(last: LastBuild) -> bool:
    """The report file and every byproduct it names are still the bytes recorded."""
    named = {last.report or "": last.report_sha256 or "", **last.byproducts}
    for path, digest in named.items():
        p = Path(path)
        if not digest or not p.is_file() or sha256_file(p) != digest:
            return False
    return True
