"""The `--json` forms of the upstream and its series: fetch, patch, status, export, check,
rebase, bump.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import UNSET, UnsetType

from dgr_forge.cli.results.base import (
    COUNTS,
    SHA,
    Form,
    LastBuild,
    Nested,
    Obj,
    PinSide,
    RebaseRow,
    Strs,
    d,
)
from dgr_forge.upstream.footprint import Footprint
from dgr_forge.upstream.surface import SurfaceReport

# --- the upstream and its series ------------------------------------------------------------


class Fetch(Form, kw_only=True):
    title = "fetch"

    upstream: Annotated[str, d("the upstream's name")]
    url: Annotated[str, d("where it was fetched from, masked")]
    src_dir: Annotated[str, d("the workspace's checkout")]
    commit: Annotated[str, d("the pinned commit, checked out")]
    tree: Annotated[str | None, d("its tree, verified")]
    changed: Annotated[bool, d("the checkout moved")]
    method: Annotated[str, d("how the commit arrived, e.g. `none`, `fetch`, `clone`")]
    shallow: Annotated[bool, d("the checkout is shallow")]
    saved_patch: Annotated[str | None, d("`--force`: where the discarded local changes were saved")]
    build_number: Annotated[
        int | None, d("the upstream's own build number at the pin (null: not countable here)")
    ]
    seconds: Annotated[float, d("time taken")]


class Patch(Form, kw_only=True):
    title = "patch · patch --continue"
    note = "a replay conflict is exit 3 (a failure) with `commit`, `files`, `workspace`"

    upstream: Annotated[str, d("the upstream's name")]
    src_dir: Annotated[str, d("the workspace's checkout")]
    base_commit: Annotated[str, d("the pin")]
    head_commit: Annotated[str, d("HEAD after the series (and your commits)")]
    result_tree: Annotated[str, d("the tree of the applied series")]
    patches: Annotated[Strs, d("the series' files, in order")]
    changed: Annotated[bool, d("the workspace moved")]
    replayed: Annotated[Strs, d("your commits replayed on a moved series, by their old ids")]
    skipped: Annotated[Strs, d("your commits the new series already held")]
    local_commits: Annotated[int, d("how many of your commits are on top now")]
    seconds: Annotated[float, d("time taken")]


class PatchAbort(Form, kw_only=True):
    title = "patch --abort"

    upstream: Annotated[str, d("the upstream's name")]
    src_dir: Annotated[str, d("the workspace's checkout")]
    head_commit: Annotated[str, d("the HEAD restored")]


class PatchCheckRow(Nested, kw_only=True):
    """a patch"""

    file: Annotated[str, d("the patch file")]
    status: Annotated[
        str,
        d(
            "`applies`, `conflict`, `tree-mismatch` (the first patch whose tree differs from "
            "the manifest's; the ones after it are `skipped`) or `skipped`"
        ),
    ]
    changed_on_disk: Annotated[bool, d("its sha256 differs from the manifest")]
    tree: Annotated[str | None, d("the tree it made")]
    expected_tree: Annotated[str | None, d("the manifest's tree")]
    conflicts: Annotated[Strs, d("the files that did not apply")]


class PatchCheck(Form, kw_only=True):
    title = "patch --check"
    may_fail = True
    note = "exit 1 when one does not apply or a file differs from the manifest"

    upstream: Annotated[str, d("the upstream's name")]
    commit: Annotated[str, d("the pin")]
    applies: Annotated[bool, d("every patch applies and every file matches the manifest")]
    changed_on_disk: Annotated[Strs, d("files whose sha256 differs from the manifest")]
    patches: Annotated[list[PatchCheckRow], d("per patch")]


class StatusUpstream(Nested, kw_only=True):
    """the upstream checkout"""

    name: Annotated[str, d("the upstream's name")]
    url: Annotated[str, d("masked")]
    commit: Annotated[str, d("the pin")]
    tree: Annotated[str | None, d("the pinned tree")]
    build_number: Annotated[
        int | None, d("the upstream's build number at the pin, from the manifest")
    ]
    present: Annotated[bool, d("the workspace has a checkout")]
    head: Annotated[str | None, d("its HEAD")]
    verified: Annotated[bool, d("commit and tree verified")]
    commit_verified: Annotated[bool, d("the pinned commit is in the checkout")]
    tree_verified: Annotated[bool | None, d("the tree matches (null: none pinned)")]
    shallow: Annotated[bool, d("the checkout is shallow")]
    local_changes: Annotated[list[Obj], d("uncommitted changes")]
    ignored: Annotated[
        Strs,
        d(
            "ignored files in the tree, which `build` refuses; `verified` is false while there "
            "are any"
        ),
    ]


class SeriesRow(Nested, kw_only=True):
    """a patch"""

    file: Annotated[str, d("the patch file")]
    state: Annotated[
        str,
        d(
            "`applied`, `pending`, `changed on disk`, `conflict`; mid-rebase `replayed`, "
            "`conflict`, `pending`"
        ),
    ]
    detail: Annotated[str, d("more on the state")]


class Drift(Nested, kw_only=True):
    """what changed on disk since this workspace was patched"""

    added: Annotated[Strs | UnsetType, d("patch files added")] = UNSET
    changed: Annotated[Strs | UnsetType, d("patch files changed")] = UNSET
    removed: Annotated[Strs | UnsetType, d("patch files removed")] = UNSET
    pin_moved: Annotated[
        Strs | UnsetType | None,
        d("the manifest's pin moved (e.g. a teammate's rebase): `[old, new]`; null: it did not"),
    ] = UNSET


class StatusPatches(Nested, kw_only=True):
    """the series"""

    series: Annotated[list[SeriesRow], d("per patch file")]
    replay: Annotated[
        Obj | None,
        d(
            "a `patch` replay of your commits: `commits` (per commit `commit`, `subject`, "
            "`state` replayed/skipped/conflict/pending) and `conflict` (the commit it stopped on)"
        ),
    ]
    moved_since_patched: Drift | None
    footprint: Footprint | None  # null: a patch file cannot be read


class LaneLastBuild(Nested, kw_only=True):
    """a lane built in this workspace"""

    lane: Annotated[str, d("the lane")]
    last_build: LastBuild | None


class Status(Form, kw_only=True):
    title = "status"

    upstream: StatusUpstream
    patches: StatusPatches
    lanes: Annotated[
        list[LaneLastBuild],
        d(
            "lanes built in this workspace, by name: the same `{lane, last_build}` rows "
            "`lanes` gives"
        ),
    ]
    rebase_in_progress: Annotated[bool, d("a rebase is in progress")]
    rebase: Annotated[
        Obj | None,
        d(
            "the rebase in progress: `onto`, `old_commit`, `new_commit`, `phase`, "
            "`patches_done`, `patches_total`, `stopped_at`"
        ),
    ]


class ExportedPatch(Nested, kw_only=True):
    """a patch"""

    file: Annotated[str, d("file name")]
    sha256: Annotated[str, SHA]
    tree: Annotated[str, d("tree after it")]
    subject: Annotated[str, d("its subject")]


class Export(Form, kw_only=True):
    title = "export [--force]"
    note = (
        "a stale workspace is exit 3 with `drift` and `manifest`; a message line `git am` "
        "would cut is exit 2 with `commit`, `line`, `text`"
    )

    upstream: Annotated[str, d("the upstream's name")]
    patches: Annotated[list[ExportedPatch], d("the series written")]
    result_tree: Annotated[str, d("the tree of the whole series")]
    written: Annotated[Strs, d("patch files (re)written")]
    unchanged: Annotated[Strs, d("patch files already identical")]
    removed: Annotated[Strs, d("patch files removed")]
    manifest_changed: Annotated[bool, d("the manifest was rewritten")]
    changed: Annotated[bool, d("anything changed")]
    replaced_saved: Annotated[
        str | None,
        d("with `--force`: where the overwritten patch files and manifest were saved"),
    ]


class Difference(Nested, kw_only=True):
    """a difference"""

    path: Annotated[str, d("the file")]
    diff: Annotated[str, d("unified diff")]
    what: Annotated[str, d("`message`, `diff`, `file` or `manifest`")]


class Check(Form, kw_only=True):
    title = "check"
    may_fail = True
    note = (
        "exit 1 when not clean, or when the series' footprint in upstream's files passes "
        "`[patches] budget` (`footprint.grew` names the patches); 2 when only recipe options "
        "are wrong and one is a deprecated alias upstream"
    )

    commit: Annotated[str, d("the pin")]
    result_tree: Annotated[str | None, d("the tree of the applied series")]
    series_reproduced: Annotated[bool, d("fetch + apply + export gave patches/ and the manifest")]
    apply_error: Annotated[str | None, d("why the series did not apply")]
    differences: Annotated[list[Difference], d("what the round trip changed")]
    options_checked: Annotated[int, d("CMake options the recipes pass that were checked")]
    option_problems: Annotated[list[Obj], d("problems")]
    footprint: Footprint | None  # exit 1 when over `[patches] budget`


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
