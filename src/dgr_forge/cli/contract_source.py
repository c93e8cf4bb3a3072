"""The `--json` keys of the commands on the upstream and its series: fetch, patch, status,
export, check, rebase, bump (see `cli.results` for the shapes and how this is used)."""

from __future__ import annotations

from dgr_forge.cli.results import (
    COUNTS,
    LAST_BUILD,
    PIN_SIDE,
    REBASE_ROW,
    SHA,
    Command,
    Form,
    arr,
    b,
    i,
    n,
    null,
    obj,
    s,
    strs,
)

DRIFT = obj(
    "what changed on disk since this workspace was patched",
    {
        "added": strs("patch files added"),
        "changed": strs("patch files changed"),
        "removed": strs("patch files removed"),
        "pin_moved": b("the manifest's pin moved (e.g. a teammate's rebase)"),
    },
    optional=("added", "changed", "removed", "pin_moved"),
)

FETCH = Command(
    "fetch",
    "Check out the pinned upstream commit, verified.",
    (
        Form(
            "fetch",
            {
                "upstream": s("the upstream's name"),
                "url": s("where it was fetched from, masked"),
                "src_dir": s("the workspace's checkout"),
                "commit": s("the pinned commit, checked out"),
                "tree": null(s("its tree, verified")),
                "changed": b("the checkout moved"),
                "method": s("how the commit arrived, e.g. `none`, `fetch`, `clone`"),
                "shallow": b("the checkout is shallow"),
                "saved_patch": null(s("`--force`: where the discarded local changes were saved")),
                "build_number": null(
                    i("the upstream's own build number at the pin (null: not countable here)")
                ),
                "seconds": n("time taken"),
            },
        ),
    ),
)

PATCH = Command(
    "patch",
    "Apply the series on the pin (or check it, continue or abort a replay of your commits).",
    (
        Form(
            "patch · patch --continue",
            {
                "upstream": s("the upstream's name"),
                "src_dir": s("the workspace's checkout"),
                "base_commit": s("the pin"),
                "head_commit": s("HEAD after the series (and your commits)"),
                "result_tree": s("the tree of the applied series"),
                "patches": strs("the series' files, in order"),
                "changed": b("the workspace moved"),
                "replayed": strs("your commits replayed on a moved series, by their old ids"),
                "skipped": strs("your commits the new series already held"),
                "local_commits": i("how many of your commits are on top now"),
                "seconds": n("time taken"),
            },
            note="a replay conflict is exit 3 (a failure) with `commit`, `files`, `workspace`",
        ),
        Form(
            "patch --abort",
            {
                "upstream": s("the upstream's name"),
                "src_dir": s("the workspace's checkout"),
                "head_commit": s("the HEAD restored"),
            },
        ),
        Form(
            "patch --check",
            {
                "upstream": s("the upstream's name"),
                "commit": s("the pin"),
                "applies": b("every patch applies and every file matches the manifest"),
                "changed_on_disk": strs("files whose sha256 differs from the manifest"),
                "patches": arr(
                    obj(
                        "a patch",
                        {
                            "file": s("the patch file"),
                            "status": s(
                                "`applies`, `conflict`, `tree-mismatch` (the first patch whose "
                                "tree differs from the manifest's; the ones after it are "
                                "`skipped`) or `skipped`"
                            ),
                            "changed_on_disk": b("its sha256 differs from the manifest"),
                            "tree": null(s("the tree it made")),
                            "expected_tree": null(s("the manifest's tree")),
                            "conflicts": strs("the files that did not apply"),
                        },
                    ),
                    "per patch",
                ),
            },
            may_fail=True,
            note="exit 1 when one does not apply or a file differs from the manifest",
        ),
    ),
)

STATUS = Command(
    "status",
    "The workspace: upstream checkout, series, lanes, a rebase in progress. URLs masked.",
    (
        Form(
            "status",
            {
                "upstream": obj(
                    "the upstream checkout",
                    {
                        "name": s("the upstream's name"),
                        "url": s("masked"),
                        "commit": s("the pin"),
                        "tree": null(s("the pinned tree")),
                        "build_number": null(
                            i("the upstream's build number at the pin, from the manifest")
                        ),
                        "present": b("the workspace has a checkout"),
                        "head": null(s("its HEAD")),
                        "verified": b("commit and tree verified"),
                        "commit_verified": b("the pinned commit is in the checkout"),
                        "tree_verified": null(b("the tree matches (null: none pinned)")),
                        "shallow": b("the checkout is shallow"),
                        "local_changes": arr(obj("a changed path"), "uncommitted changes"),
                        "ignored": strs(
                            "ignored files in the tree, which `build` refuses; `verified` is "
                            "false while there are any"
                        ),
                    },
                ),
                "patches": obj(
                    "the series",
                    {
                        "series": arr(
                            obj(
                                "a patch",
                                {
                                    "file": s("the patch file"),
                                    "state": s(
                                        "`applied`, `pending`, `changed on disk`, `conflict`; "
                                        "mid-rebase `replayed`, `conflict`, `pending`"
                                    ),
                                    "detail": s("more on the state"),
                                },
                            ),
                            "per patch file",
                        ),
                        "replay": null(
                            obj(
                                "a `patch` replay of your commits: `commits` (per commit "
                                "`commit`, `subject`, `state` replayed/skipped/conflict/"
                                "pending) and `conflict` (the commit it stopped on)"
                            )
                        ),
                        "moved_since_patched": null(DRIFT),
                    },
                ),
                "lanes": arr(
                    obj(
                        "a lane built in this workspace",
                        {"lane": s("the lane"), "last_build": LAST_BUILD},
                    ),
                    "lanes built in this workspace, by name: the same `{lane, last_build}` "
                    "rows `lanes` gives",
                ),
                "rebase_in_progress": b("a rebase is in progress"),
                "rebase": null(
                    obj(
                        "the rebase in progress: `onto`, `old_commit`, `new_commit`, `phase`, "
                        "`patches_done`, `patches_total`, `stopped_at`"
                    )
                ),
            },
        ),
    ),
)

EXPORT = Command(
    "export",
    "Write the workspace's commits back as the series and the manifest.",
    (
        Form(
            "export [--force]",
            {
                "upstream": s("the upstream's name"),
                "patches": arr(
                    obj(
                        "a patch",
                        {
                            "file": s("file name"),
                            "sha256": s(SHA),
                            "tree": s("tree after it"),
                            "subject": s("its subject"),
                        },
                    ),
                    "the series written",
                ),
                "result_tree": s("the tree of the whole series"),
                "written": strs("patch files (re)written"),
                "unchanged": strs("patch files already identical"),
                "removed": strs("patch files removed"),
                "manifest_changed": b("the manifest was rewritten"),
                "changed": b("anything changed"),
                "replaced_saved": null(
                    s("with `--force`: where the overwritten patch files and manifest were saved")
                ),
            },
            note=(
                "a stale workspace is exit 3 with `drift` and `manifest`; a message line "
                "`git am` would cut is exit 2 with `commit`, `line`, `text`"
            ),
        ),
    ),
)

CHECK = Command(
    "check",
    "The CI gate: series round trip byte-compare, CMake options still declared.",
    (
        Form(
            "check",
            {
                "commit": s("the pin"),
                "result_tree": null(s("the tree of the applied series")),
                "series_reproduced": b("fetch + apply + export gave patches/ and the manifest"),
                "apply_error": null(s("why the series did not apply")),
                "differences": arr(
                    obj(
                        "a difference",
                        {
                            "path": s("the file"),
                            "diff": s("unified diff"),
                            "what": s("`message`, `diff`, `file` or `manifest`"),
                        },
                    ),
                    "what the round trip changed",
                ),
                "options_checked": i("CMake options the recipes pass that were checked"),
                "option_problems": arr(obj("an option upstream no longer declares"), "problems"),
            },
            may_fail=True,
            note="exit 1 when not clean; 2 when only recipe options are wrong and one is a "
            "deprecated alias upstream",
        ),
    ),
)

REBASE = Command(
    "rebase",
    "Replay the series onto a new upstream commit; `--dry-run` is the upstream canary.",
    (
        Form(
            "rebase --onto REV · rebase --continue",
            {
                "status": s("`done` or `noop` (already pinned there)"),
                "old_commit": s("the pin before"),
                "new_commit": s("the pin after"),
                "new_tree": s("its tree"),
                "result_tree": null(s("the series' result tree")),
                "patches": arr(REBASE_ROW, "per patch"),
                "counts": COUNTS,
                "report": null(s("the rebase report (JSON)")),
                "report_markdown": null(s("the rebase report (Markdown)")),
            },
            note="a conflict is exit 3 (a failure) with `patch`, `subject`, `files` and how "
            "to continue",
        ),
        Form(
            "rebase --dry-run",
            {
                "status": s("`dry-run`"),
                "kind": s("`dgr-forge/rebase-report`"),
                "version": i("1"),
                "upstream": s("the upstream's name"),
                "onto": s("`--onto` as given"),
                "old": PIN_SIDE,
                "new": PIN_SIDE,
                "result_tree": null(
                    s("the series' result tree (null when not replayed to the end)")
                ),
                "counts": COUNTS,
                "patches": arr(REBASE_ROW, "per patch"),
                "old_commit": s("the pin"),
                "new_commit": s("the commit replayed onto"),
                "would_conflict": b("a patch would conflict"),
                "report_markdown": null(s("`--report`: the Markdown written")),
            },
            may_fail=True,
            note="exit 3 when a patch would conflict; onto the current pin every patch is "
            "`unchanged`",
        ),
        Form(
            "rebase --abort",
            {
                "status": s("`aborted`"),
                "old_commit": s("the pin kept"),
                "new_commit": s("the commit that was the target"),
                "head": s("the HEAD restored"),
            },
        ),
    ),
)

BUMP = Command(
    "bump",
    "Move the pin to the newest commit onto which the series replays cleanly (docs/bump.md).",
    (
        Form(
            "bump",
            {
                "status": s("`noop`, `dry-run`, `bumped`, `stopped`"),
                "upstream": s("the upstream's name"),
                "url": s("masked"),
                "to": s("`--to` (or the default branch), as given"),
                "pin": s("the pin before"),
                "target": s("what `--to` resolved to"),
                "target_subject": null(s("its subject")),
                "newest_clean": s("the newest commit the series replays onto cleanly"),
                "newest_clean_subject": null(s("its subject")),
                "candidates": i("first-parent commits between pin and target"),
                "taken": i("how many of them the pin moved by"),
                "first_breaking": null(
                    obj(
                        "the first commit that breaks a patch: `commit`, `subject`, `patch`, "
                        "`files`, `upstream_commits`"
                    )
                ),
                "replays": i("replays run"),
                "max_replays": i("⌈log2 candidates⌉ + 2"),
                "moved": b("the pin moved (false with `--dry-run`)"),
                "dry_run": b("`--dry-run`"),
                "dropped": arr(obj("`{file, upstream_commits}`"), "upstreamed on the way"),
                "patches": arr(obj("a replay row"), "the verifying replay's rows"),
                "rebase_report": null(s("the rebase report written")),
                "rebase_report_markdown": null(s("its Markdown")),
                "report_markdown": null(s("`--report`: the bump's Markdown")),
            },
            optional=("target_subject", "newest_clean_subject"),
            may_fail=True,
            note="exit 0 when the target was reached, 3 when a patch stopped it short",
        ),
    ),
)
