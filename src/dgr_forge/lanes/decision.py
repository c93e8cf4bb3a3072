"""What one lane's build does, decided (purely) from the recorded state and what is there now;
and the checks that keep its report true to what ran (issue 20). After Ninja, `after_compile`
decides by content, never by what Ninja ran (llama.cpp's `llama-ui-assets` runs every build).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NoReturn

import msgspec
from msgspec import Struct

from dgr_forge.core.errors import OperationFailed
from dgr_forge.core.fsutil import sha256_file
from dgr_forge.lanes import stamps
from dgr_forge.lanes.state import LaneState, LastBuild

if TYPE_CHECKING:
    from dgr_forge.core.forge import Forge
    from dgr_forge.lanes.plan import LanePlan

BEFORE_LOCK = "between reading it and taking the workspace lock"  # a refusal's "when"
Action = Literal["refuse", "rebuild", "reconfigure", "compile", "reuse"]
Outcome = Literal["reuse", "report", "rebuild"]


class Snapshot(Struct, frozen=True):
    """What is there now, as far as the decision needs it (no program runs to read it)."""

    configure_digest: str  # `plan.inputs_digest` of the arguments configure would get now
    build_files: bool  # CMakeCache.txt and build.ninja in the build directory
    upstream_head: str | None  # HEAD of the patched tree; None: no git tree there
    upstream_clean: bool  # nothing modified, untracked or ignored in it
    worker_at: bool = True  # a git worker is at its commit, clean (True: no git worker)
    moved: tuple[str, ...] = ()  # recipe / manifest whose bytes moved since parsed
    programs_changed: tuple[str, ...] = ()  # names of programs changed since configure
    subjects_changed: tuple[str, ...] = ()  # last report's artifacts changed on disk
    key_fingerprint: str | None = None  # `SigningKey.fingerprint()` of the key asked for
    key_id: str | None = None  # its keyid, loaded only when the fingerprint differs


class Configuration(Struct, frozen=True):
    """What configure is given; the switches and build-info variables found at `head`."""

    head: str
    epoch: int
    switches: tuple[str, ...]
    given: tuple[str, ...]
    args: list[str]
    digest: str


class Decision(Struct, frozen=True):
    action: Action
    reason: str
    moved: tuple[str, ...] = ()  # refuse: the files that moved
    rebuilt: tuple[str, ...] = ()  # compile / reuse: artifacts to remove so Ninja relinks
    # the last report, signed by the key asked for now, may be handed back after Ninja
    handback: bool = False

    @property
    def configured(self) -> bool:  # configure is skipped: only Ninja runs
        return self.action in ("compile", "reuse")


def last_ok(state: LaneState) -> LastBuild | None:
    last = state.last_build
    return last if last is not None and last.result == "ok" else None


def _not_configured(state: LaneState, now: Snapshot) -> str | None:
    if state.inputs_digest is None or not state.head_commit or state.source_date_epoch is None:
        return "not configured yet (or its configure did not finish)"
    if state.inputs_digest != now.configure_digest:
        return "configure's inputs changed"
    if not now.build_files:
        return "the build directory has no CMakeCache.txt or build.ninja"
    if now.upstream_head is None:
        return "the patched tree is not there"
    if now.upstream_head != state.head_commit:
        return f"the patched tree moved ({state.head_commit[:12]} -> {now.upstream_head[:12]})"
    if not now.upstream_clean:
        # edits or untracked files: the patch step refuses them, never Ninja compiles them
        return "the patched tree has modified or untracked files"
    if not now.worker_at:
        return "the worker checkout is not at its commit, or not clean"
    return None


def needs_key_id(state: LaneState, fingerprint: str | None) -> bool:
    """Whether `decide` needs the keyid (a full key load): the fingerprint does not say."""
    last = last_ok(state)
    return last is not None and (fingerprint is None or fingerprint != last.signer_fingerprint)


def decide(state: LaneState, now: Snapshot) -> Decision:
    if now.moved:
        return Decision("refuse", f"changed {BEFORE_LOCK}", moved=now.moved)
    last = last_ok(state)
    # the last report was signed by the key asked for now (or unsigned when asked so)
    fp = now.key_fingerprint
    signed = last is not None and (fp == last.signer_fingerprint or now.key_id == last.signed_by)
    handback = last is not None and fp is not None and signed
    if state.in_progress == "wipe":
        return Decision(
            "rebuild", "a removal of the build directory was cut short", handback=handback
        )
    if now.programs_changed:
        return Decision("rebuild", f"changed since configure: {', '.join(now.programs_changed)}")
    if (why := _not_configured(state, now)) is not None:
        return Decision("reconfigure", why, handback=handback)
    rebuilt = now.subjects_changed
    if last is None:
        reason = "no completed build" + (" (the last one failed)" if state.last_build else "")
        return Decision("compile", reason, rebuilt=rebuilt)
    if state.in_progress is not None:
        reason = f"the last run was cut short (in {state.in_progress})"
        return Decision("compile", reason, rebuilt=rebuilt, handback=handback)
    if rebuilt:
        return Decision("compile", "artifacts changed on disk", rebuilt=rebuilt, handback=handback)
    if not handback:
        return Decision("compile", "the last report was signed by another key")
    return Decision(
        "reuse", "configured as recorded; the last report, if its inputs are", handback=True
    )


def skips_ninja(decision: Decision, recorded: str | None, whole: str) -> bool:
    """Nothing moved: Ninja and the compiler cache are not asked."""
    return decision.action == "reuse" and recorded == whole


def after_compile(
    decision: Decision, wrote: bool, recorded: str | None, whole: str, subjects_same: bool
) -> Outcome:
    """Other inputs than the report's with nothing written (an edit with an old mtime, a
    lost state) built nothing of them: a fresh build directory."""
    if not wrote and recorded != whole:
        return "rebuild"
    return "reuse" if decision.handback and recorded == whole and subjects_same else "report"


# -- the transitions of a lane's state (each written once, by the builder)


def wiping(state: LaneState) -> LaneState:
    """A kill halfway leaves objects Ninja would take for current: the next run finishes."""
    return msgspec.structs.replace(state, inputs_digest=None, programs={}, in_progress="wipe")


def wiped(state: LaneState) -> LaneState:
    return msgspec.structs.replace(state, in_progress=None)


def started(state: LaneState, decision: Decision) -> LaneState:
    """Until the report is written, nothing is reused."""
    return msgspec.structs.replace(
        state, in_progress="build" if decision.configured else "configure"
    )


def configured(state: LaneState, conf: Configuration, at: str) -> LaneState:
    return msgspec.structs.replace(
        state,
        inputs_digest=conf.digest,
        launcher_switches=list(conf.switches),
        build_info=list(conf.given),
        head_commit=conf.head,
        source_date_epoch=conf.epoch,
        configured_at=at,
    )


def unconfigured(state: LaneState) -> LaneState:
    """Configure is running again: the old digest no longer describes the directory."""
    return msgspec.structs.replace(state, inputs_digest=None)


def failed(state: LaneState, *, phase: str, at: str, log: str, log_file: str) -> LaneState:
    """The kept report (and its inputs) stay named."""
    previous = state.last_build
    last = LastBuild(
        time=at,
        result="failed",
        phase=phase,
        log=log,
        log_file=log_file,
        report=previous.report if previous else None,
        inputs=previous.inputs if previous else None,
    )
    return msgspec.structs.replace(state, last_build=last, in_progress=None)


# -- the checks that keep a report true to what ran


def check_launchers(plan: LanePlan) -> str | None:
    """The launcher the generated rules run; exit 1 when it is not the forge's choice."""
    from dgr_forge.lanes import cmake_api  # after configure only

    found = cmake_api.read_launchers(plan.build_dir)
    if problems := found.problems(plan.cache.launcher):
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
                "chosen": plan.cache.launcher,
            },
        )
    return next(iter(found.compile)) if len(found.compile) == 1 else None


def changed_error(forge: Forge, lane: str, moved: Sequence[str], when: str) -> NoReturn:
    shown = ", ".join(forge.rel(Path(p)) for p in moved)
    raise OperationFailed(
        f"{lane}: {shown} changed {when}; no report: it would name digests the build did not read",
        hint="let edits finish (or another workspace's export), then build again",
        details={"lane": lane, "changed": list(moved)},
    )


def changed_subjects(last: LastBuild) -> list[Path]:
    """Subjects no longer the bytes reported; re-hashed only when their stat record moved."""
    known = {str(Path(a.path)): a.sha256 for a in last.artifacts}  # the records as stamps
    now = stamps.restamp({p: [sha, *last.subject_stats.get(p, [])] for p, sha in known.items()})
    last.subject_stats.update({p: s[1:] for p, s in now.items() if s[0] == known[p]})
    return [Path(p) for p, sha in known.items() if now.get(p, [None])[0] != sha]


def report_true(last: LastBuild) -> bool:
    """The report file and every byproduct it names are still the bytes recorded."""
    named = {last.report or "": last.report_sha256 or "", **last.byproducts}
    return all(d and Path(p).is_file() and sha256_file(Path(p)) == d for p, d in named.items())
