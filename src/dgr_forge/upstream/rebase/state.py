"""The rebase's persistent state (`<workspace>/rebase.json`), its result types (each
command's `--json` object) and the report (`reports/rebase-<old>-<new>.json` and `.md`,
what goes into the PR, made from the same rows and counts as the console's table)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import msgspec
from msgspec import UNSET, Struct, UnsetType, field

from dgr_forge.core.errors import BadInput, ExitCode
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import atomic_write_bytes, read_json, write_json
from dgr_forge.core.structs import COMMIT, Form, Nested, d
from dgr_forge.core.urls import mask
from dgr_forge.upstream.surface import SurfaceReport

STATE_VERSION = 1
# "dropped": the pick became empty by itself, the change is upstream (the commits that took
# it are named); "dropped-by-hand": a conflict a person resolved to nothing; "conflict":
# only in a --dry-run, the patch would stop a real rebase
OUTCOME_TEXT = {
    "unchanged": "carried unchanged",
    "refreshed": "refreshed (context or offsets moved, content same)",
    "merged": "merged cleanly by 3-way (content adapted, review it)",
    "resolved": "resolved by hand",
    "dropped": "dropped: upstreamed (became empty)",
    "dropped-by-hand": "dropped by hand (conflict resolved to no change)",
    "conflict": "would conflict (a real rebase stops here)",
}
OUTCOMES = tuple(OUTCOME_TEXT)
REPORT_KIND = "dgr-forge/rebase-report"  # the report file's (and a dry run's) `kind`, version 1
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


class UpstreamCommit(Nested, kw_only=True):
    """an upstream commit"""

    commit: Annotated[str, COMMIT]
    subject: Annotated[str, d("its subject")]


def unique(commits: Iterable[UpstreamCommit]) -> list[UpstreamCommit]:
    return list({c.commit: c for c in commits}.values())


class Conflict(Struct, forbid_unknown_fields=True):
    """The conflict a rebase stopped at (rebase.json's `conflict`)."""

    files: list[str]
    upstream: dict[str, list[UpstreamCommit]] = {}  # per file, the commits on its lines
    line_level: dict[str, bool] = {}  # per file: found by `git log -L` (else by file)


class PatchStep(Struct, forbid_unknown_fields=True):
    file: str  # the old series file name
    subject: str
    old_commit: str  # O_i in the workspace (old pin + series)
    new_commit: str | None = None  # N_i; None while pending or when dropped
    outcome: str | None = None  # set when recorded: "picked", "resolved", "dropped"; final at end
    new_file: str | None = None
    upstream_commits: list[UpstreamCommit] = field(default_factory=list)
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
    conflict: Conflict | None = None
    canary: bool = False  # a --dry-run: conflicts are recorded, not stopped at
    version: int = STATE_VERSION


def journal_dir(forge: Forge) -> Path:
    return forge.workspace / "rebase"


def load_rebase_state(forge: Forge) -> RebaseState | None:
    path = forge.rebase_state
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
    write_json(forge.rebase_state, msgspec.to_builtins(state), durable=durable)


class Onto(Struct, frozen=True, kw_only=True):
    """`rebase --onto`'s request, as the command parsed it."""

    rev: str
    url: str | None = None  # --url: pinned from now on
    mirror: str | None = None  # where objects come from (resolved --mirror / DGR_MIRROR)
    offline: bool = False
    dry_run: bool = False  # the upstream canary
    report: Path | None = None  # --dry-run's Markdown


# ----------------------------------------------------------------------------- results


class RebaseRow(Nested, kw_only=True):
    """a patch's outcome"""

    file: Annotated[str, d("the patch file before")]
    new_file: Annotated[
        str | None,
        d(
            "its file after (null when dropped); a dry run's `conflict` row names the file the "
            "real rebase writes once it is resolved (it keeps its place)"
        ),
    ]
    subject: Annotated[str | UnsetType | None, d("its subject")] = UNSET
    outcome: Annotated[
        str,
        d(
            "`unchanged`, `refreshed`, `merged`, `resolved`, `dropped` (upstreamed), "
            "`dropped-by-hand`, `conflict`"
        ),
    ]
    old_commit: Annotated[str | UnsetType | None, d("its commit on the old pin")] = UNSET
    new_commit: Annotated[str | UnsetType | None, d("its commit on the new pin")] = UNSET
    upstream_commits: Annotated[
        list[UpstreamCommit] | UnsetType,
        d("the upstream commits that touched its files (that upstreamed it, or conflict)"),
    ] = UNSET
    files: Annotated[list[str] | UnsetType, d("the conflicted files")] = UNSET


COUNTS = d("patches per outcome: " + ", ".join(f"`{o}`" for o in OUTCOMES))


def counts_of(rows: list[RebaseRow]) -> dict[str, int]:
    return {o: sum(1 for r in rows if r.outcome == o) for o in OUTCOMES}


class PinSide(Nested, kw_only=True):
    """a side of the rebase"""

    url: Annotated[str, d("the upstream URL, masked")]
    commit: Annotated[str, COMMIT]
    tree: Annotated[str | None, d("its tree")]


class Rebase(Form, kw_only=True):
    """A finished (or no-op) rebase: `rebase --onto` and `--continue`'s result."""

    title = "rebase --onto REV · rebase --continue"
    note = "a conflict is exit 3 (a failure) with `patch`, `subject`, `files` and how to continue"

    status: Annotated[str, d("`done` or `noop` (already pinned there)")]
    old_commit: Annotated[str, d("the pin before")]
    new_commit: Annotated[str, d("the pin after")]
    new_tree: Annotated[str, d("its tree")]
    result_tree: Annotated[str | None, d("the series' result tree")]
    patches: Annotated[list[RebaseRow], d("per patch")]
    counts: Annotated[dict[str, int], COUNTS]
    report: Annotated[str | None, d("the rebase report (JSON)")]
    report_markdown: Annotated[str | None, d("the rebase report (Markdown)")]
    # `--onto`/`--continue` with a recorded surface asked: the worker surface, old -> new pin
    surface: SurfaceReport | UnsetType = UNSET


class RebaseReport(Struct, kw_only=True):
    """`reports/rebase-<old>-<new>.json` (`report.write_report`); a dry run's result is
    this with its own answers (`RebaseDryRun`)."""

    status: Annotated[str | UnsetType, d("`dry-run` (absent from the report file)")] = UNSET
    kind: Annotated[str, d(f"`{REPORT_KIND}`")]
    version: Annotated[int, d("1")]
    upstream: Annotated[str, d("the upstream's name")]
    onto: Annotated[str, d("`--onto` as given")]
    old: PinSide
    new: PinSide
    result_tree: Annotated[
        str | None, d("the series' result tree (null when not replayed to the end)")
    ]
    counts: Annotated[dict[str, int], COUNTS]
    patches: Annotated[list[RebaseRow], d("per patch")]


class RebaseDryRun(Form, RebaseReport, kw_only=True):
    """`rebase --onto REV --dry-run`'s result (the upstream canary)."""

    title = "rebase --dry-run"
    may_fail = True
    note = "exit 3 when a patch would conflict; onto the current pin every patch is `unchanged`"

    status: Annotated[str, d("`dry-run`")]
    old_commit: Annotated[str, d("the pin")]
    new_commit: Annotated[str, d("the commit replayed onto")]
    surface: SurfaceReport | UnsetType = UNSET  # absent onto the current pin
    would_conflict: Annotated[bool, d("a patch would conflict")]
    report_markdown: Annotated[str | None, d("`--report`: the Markdown written")]

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.NEEDS_HUMAN if self.would_conflict else ExitCode.OK


class RebaseAbort(Form, kw_only=True):
    """`rebase --abort`'s result."""

    title = "rebase --abort"

    status: Annotated[str, d("`aborted`")]
    old_commit: Annotated[str, d("the pin kept")]
    new_commit: Annotated[str, d("the commit that was the target")]
    head: Annotated[str, d("the HEAD restored")]


# ----------------------------------------------------------------------------- the report


def rows_of(state: RebaseState) -> list[RebaseRow]:
    return [
        RebaseRow(**{**msgspec.structs.asdict(s), "outcome": s.outcome or ""})
        for s in state.patches
    ]


def summary(counts: dict[str, int]) -> str:
    """One line, the same words in the console and the Markdown."""
    return ", ".join(f"{n} {o}" for o, n in counts.items() if n) or "no patches"


def _upstream_note(row: RebaseRow) -> str:
    if not row.upstream_commits:
        return ""
    listed = ", ".join(f"`{c.commit[:12]}` {c.subject}" for c in row.upstream_commits)
    if row.outcome == "dropped":
        return f" (upstream: {listed})"
    files = ", ".join(f"`{f}`" for f in row.files or [])
    return f" (conflicted{f' in {files}' if files else ''} with upstream: {listed})"


def render_markdown(
    state: RebaseState,
    result_tree: str | None,
    rows: list[RebaseRow],
    title: str,
    surface: SurfaceReport | None = None,
) -> str:
    md = [
        f"### {title} {state.upstream}: `{state.old_commit[:12]}` → `{state.new_commit[:12]}`",
        "",
        f"- old pin: `{state.old_commit}` ({mask(state.old_url)})",
        f"- new pin: `{state.new_commit}` ({mask(state.new_url)})"
        + (f", from `{state.onto}`" if state.onto != state.new_commit else ""),
    ]
    if result_tree:
        md.append(f"- result tree: `{result_tree}`")
    md += ["- " + summary(counts_of(rows)), "", "| patch | now | outcome |", "| --- | --- | --- |"]
    for r in rows:
        now = f"`{r.new_file}`" if r.new_file else "—"
        md.append(f"| `{r.file}` | {now} | {OUTCOME_TEXT[r.outcome]}{_upstream_note(r)} |")
    text = "\n".join(md) + "\n"
    return text + "\n" + surface.markdown() if surface is not None else text


R = TypeVar("R", bound=RebaseReport)


def report_of(
    type_: type[R], state: RebaseState, result_tree: str | None, rows: list[RebaseRow], **more: Any
) -> R:
    """The report of `state` as `type_` (the file's, or a dry run's with its `more` keys)."""
    return type_(
        kind=REPORT_KIND,
        version=1,
        upstream=state.upstream,
        onto=state.onto,
        old=PinSide(url=mask(state.old_url), commit=state.old_commit, tree=state.old_tree),
        new=PinSide(url=mask(state.new_url), commit=state.new_commit, tree=state.new_tree),
        result_tree=result_tree,
        counts=counts_of(rows),
        patches=rows,
        **more,
    )


def write_report(
    forge: Forge, state: RebaseState, result_tree: str, surface: SurfaceReport | None = None
) -> tuple[Path, Path]:
    """`reports/rebase-<old12>-<new12>.json` and `.md` (with `surface`'s moves)."""
    rows = rows_of(state)
    stem = f"rebase-{state.old_commit[:12]}-{state.new_commit[:12]}"
    json_path, md_path = (forge.reports_dir / f"{stem}{ext}" for ext in (".json", ".md"))
    write_json(json_path, msgspec.to_builtins(report_of(RebaseReport, state, result_tree, rows)))
    text = render_markdown(state, result_tree, rows, "Rebase", surface)
    atomic_write_bytes(md_path, text.encode("utf-8"))
    return json_path, md_path
