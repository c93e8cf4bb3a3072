"""The rebase's persistent state (`<workspace>/rebase.json`) and its result object."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec
from msgspec import Struct, field

from dgr_forge.core.errors import BadInput
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import read_json, write_json

STATE_VERSION = 1
# "dropped": the pick became empty by itself, the change is upstream (the commits that took
# it are named); "dropped-by-hand": a conflict a person resolved to nothing; "conflict":
# only in a --dry-run, the patch would stop a real rebase
OUTCOMES = (
    "unchanged",
    "refreshed",
    "merged",
    "resolved",
    "dropped",
    "dropped-by-hand",
    "conflict",
)
OUTCOME_TEXT = {
    "unchanged": "carried unchanged",
    "refreshed": "refreshed (context or offsets moved, content same)",
    "merged": "merged cleanly by 3-way (content adapted, review it)",
    "resolved": "resolved by hand",
    "dropped": "dropped: upstreamed (became empty)",
    "dropped-by-hand": "dropped by hand (conflict resolved to no change)",
    "conflict": "would conflict (a real rebase stops here)",
}
REF_PREFIX = "refs/dgr/rebase/"  # every ref a rebase makes: dropped when it ends
REF_NEW = "refs/dgr/rebase/new"
REF_OLD = "refs/dgr/rebase/old-head"
REF_BATCH = "refs/dgr/rebase/batch"  # the commits the batch replay made (`batch`)
# files git leaves next to a merge in progress; ours to clean once a step is recorded
MERGE_LEFTOVERS = ("MERGE_MSG", "AUTO_MERGE", "CHERRY_PICK_HEAD")
# half-finished git operations that must not be tripped over (git dir relative)
STALE_GIT_STATE = {
    "rebase-apply": "a half-finished `git am` or `git rebase`",
    "rebase-merge": "a half-finished `git rebase`",
    "CHERRY_PICK_HEAD": "a half-finished `git cherry-pick`",
    "MERGE_HEAD": "a half-finished `git merge`",
    "REVERT_HEAD": "a half-finished `git revert`",
    "sequencer": "a half-finished cherry-pick/revert sequence",
}


# ----------------------------------------------------------------------------- state


class PatchStep(Struct, forbid_unknown_fields=True):
    file: str  # the old series file name
    subject: str
    old_commit: str  # O_i in the workspace (old pin + series)
    new_commit: str | None = None  # N_i; None while pending or when dropped
    outcome: str | None = None  # set when recorded: "picked", "resolved", "dropped"; final at end
    new_file: str | None = None
    upstream_commits: list[dict[str, str]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # the conflicted files, when it conflicted


# rebase.json is this type, every field: it is read back as it (`load_rebase_state`), so a
# hand-edited or damaged file is refused naming the key, never half-used in a replay
class RebaseState(Struct, forbid_unknown_fields=True):
    upstream: str
    src_dir: str
    old_url: str
    new_url: str
    old_commit: str
    old_tree: str
    old_head: str  # old pin + series: what --abort restores
    new_commit: str
    new_tree: str
    onto: str  # REV as the user typed it
    inputs_sha256: str  # manifest + patches/ at the start: both must not change meanwhile
    fetch_url: str  # where objects come from (the mirror, else new_url): for deepening
    patches: list[PatchStep]
    next: int = 0  # index of the next patch to replay
    head: str = ""  # N_(next-1): the new pin plus the patches recorded so far
    phase: Literal["replay", "conflict", "write"] = "replay"
    conflict: dict[str, Any] | None = None
    canary: bool = False  # a --dry-run: conflicts are recorded, not stopped at
    version: int = STATE_VERSION


def state_path(forge: Forge) -> Path:
    return forge.rebase_state


def journal_dir(forge: Forge) -> Path:
    return forge.workspace / "rebase"


def load_rebase_state(forge: Forge) -> RebaseState | None:
    path = state_path(forge)
    if not path.exists():
        return None
    try:
        data = read_json(path)
        version = data.get("version") if isinstance(data, dict) else None
        if version != STATE_VERSION:
            raise ValueError(f"state version {version!r}")
        state = msgspec.convert(data, RebaseState)
        if not 0 <= state.next <= len(state.patches):
            raise ValueError(f"next {state.next} is not a step of its {len(state.patches)}")
        return state
    except (ValueError, msgspec.ValidationError) as err:
        raise BadInput(
            f"{path}: unreadable rebase state ({err})",
            hint=f"restore the workspace with `dgr-forge fetch --force`, then delete {path}",
        ) from None


def save_state(forge: Forge, state: RebaseState, *, durable: bool = True) -> None:
    """`durable=False` for a replay step: a power loss may take the step back (as it may
    the commit git wrote for it, unsynced); the replay then redoes it, to the same commit."""
    write_json(state_path(forge), _fields(state), durable=durable)


def _fields(state: RebaseState) -> dict[str, Any]:
    """The state as JSON data (msgspec, in C: it is saved after every replayed patch)."""
    data: dict[str, Any] = msgspec.to_builtins(state)
    return data


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class RebaseResult:
    status: str  # "done" | "noop"
    old_commit: str
    new_commit: str
    new_tree: str
    result_tree: str | None
    patches: list[dict[str, Any]]
    report_json: Path | None
    report_md: Path | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "old_commit": self.old_commit,
            "new_commit": self.new_commit,
            "new_tree": self.new_tree,
            "result_tree": self.result_tree,
            "patches": self.patches,
            "counts": {o: sum(1 for p in self.patches if p["outcome"] == o) for o in OUTCOMES},
            "report": str(self.report_json) if self.report_json else None,
            "report_markdown": str(self.report_md) if self.report_md else None,
        }
