"""The `--json` forms of the upstream and its series: fetch, patch, status, export, check,
rebase, bump.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import UNSET, UnsetType

from dgr_forge.cli.results.base import (
    COUNTS,
    Form,
    Obj,
    PinSide,
    RebaseRow,
    d,
)
from dgr_forge.upstream.surface import SurfaceReport

# --- the upstream and its series ------------------------------------------------------------


class Rebase(Form, kw_only=True):
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
    surface: SurfaceReport | UnsetType = UNSET  # `--onto`: the worker surface, old -> new pin


class RebaseDryRun(Form, kw_only=True):
    title = "rebase --dry-run"
    may_fail = True
    note = "exit 3 when a patch would conflict; onto the current pin every patch is `unchanged`"

    status: Annotated[str, d("`dry-run`")]
    kind: Annotated[str, d("`dgr-forge/rebase-report`")]
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
    old_commit: Annotated[str, d("the pin")]
    new_commit: Annotated[str, d("the commit replayed onto")]
    would_conflict: Annotated[bool, d("a patch would conflict")]
    report_markdown: Annotated[str | None, d("`--report`: the Markdown written")]
    surface: SurfaceReport | UnsetType = UNSET  # absent onto the current pin


class RebaseAbort(Form, kw_only=True):
    title = "rebase --abort"

    status: Annotated[str, d("`aborted`")]
    old_commit: Annotated[str, d("the pin kept")]
    new_commit: Annotated[str, d("the commit that was the target")]
    head: Annotated[str, d("the HEAD restored")]


class Bump(Form, kw_only=True):
    title = "bump"
    may_fail = True
    note = "exit 0 when the target was reached, 3 when a patch stopped it short"

    status: Annotated[str, d("`noop`, `dry-run`, `bumped`, `stopped`")]
    upstream: Annotated[str, d("the upstream's name")]
    url: Annotated[str, d("masked")]
    to: Annotated[str, d("`--to` (or the default branch), as given")]
    pin: Annotated[str, d("the pin before")]
    target: Annotated[str, d("what `--to` resolved to")]
    target_subject: Annotated[str | UnsetType | None, d("its subject")] = UNSET
    newest_clean: Annotated[str, d("the newest commit the series replays onto cleanly")]
    newest_clean_subject: Annotated[str | UnsetType | None, d("its subject")] = UNSET
    candidates: Annotated[int, d("first-parent commits between pin and target")]
    taken: Annotated[int, d("how many of them the pin moved by")]
    first_breaking: Annotated[
        Obj | None,
        d(
            "the first commit that breaks a patch: `commit`, `subject`, `patch`, `files`, "
            "`upstream_commits`"
        ),
    ]
    replays: Annotated[int, d("replays run")]
    max_replays: Annotated[int, d("⌈log2 candidates⌉ + 2")]
    moved: Annotated[bool, d("the pin moved (false with `--dry-run`)")]
    dry_run: Annotated[bool, d("`--dry-run`")]
    dropped: Annotated[list[Obj], d("upstreamed on the way")]
    patches: Annotated[list[Obj], d("the verifying replay's rows")]
    rebase_report: Annotated[str | None, d("the rebase report written")]
    rebase_report_markdown: Annotated[str | None, d("its Markdown")]
    report_markdown: Annotated[str | None, d("`--report`: the bump's Markdown")]
    surface: SurfaceReport | UnsetType = UNSET  # the worker surface, pin -> newest clean
