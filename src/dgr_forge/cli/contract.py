"""Each command's `--json` keys (see `cli.results` for the shapes and how this is used)."""

from __future__ import annotations

from dgr_forge.cli.results import (
    ARTIFACT,
    CACHE,
    COMMIT,
    COUNTS,
    DOCTOR_LANE,
    LAST_BUILD,
    PIN_SIDE,
    REBASE_ROW,
    SHA,
    VERIFICATION,
    Command,
    Form,
    arr,
    b,
    i,
    mapping,
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

DOCTOR_CACHE = obj(
    "what `build` would use now as compiler cache (from `DGR_CACHE` / `DGR_CACHE_MODE`, "
    "default `auto` / `rw`); never a credential: URLs are masked",
    {
        "choice": s(
            "`auto`, `ccache`, `sccache` or `off` (as asked; an unknown word is reported in "
            "`problem`)"
        ),
        "tool": null(s("`ccache` or `sccache`; null: no cache")),
        "launcher": null(s("the launcher's file name")),
        "path": null(s("where the launcher was found (absent when `problem` is set)")),
        "version": s('the tool\'s version (`""` when none)'),
        "backend": s(
            "`none`, `local`, or `local + remote <masked URL or backend kind>` (`|read-only` "
            "marks a read-only ccache remote)"
        ),
        "mode": s("`rw`, `ro` or `off`"),
        "distributed": null(s("the sccache-dist scheduler URL, masked")),
        "dist": null(
            obj(
                "with a scheduler: what it answered when asked with the client's token: "
                "`scheduler` (masked), `status` (`ok`, `no-servers`, `unauthorized`, "
                "`unreachable`, `error`, `unchecked`), `detail`, `fix` (null when ok), "
                "`servers`, `cpus` (null when unknown); never the token"
            )
        ),
        "tools": obj("per tool (`ccache`, `sccache`): `found`, `path`, `version`"),
        "problem": null(
            s(
                "why `build` would refuse the cache settings (exit 2 there), e.g. an explicit "
                "tool that is not installed"
            )
        ),
    },
    optional=("tool", "launcher", "path", "version", "backend", "mode", "distributed", "dist"),
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
                        "present": b("the workspace has a checkout"),
                        "head": null(s("its HEAD")),
                        "verified": b("commit and tree verified"),
                        "commit_verified": b("the pinned commit is in the checkout"),
                        "tree_verified": null(b("the tree matches (null: none pinned)")),
                        "shallow": b("the checkout is shallow"),
                        "local_changes": arr(obj("a changed path"), "uncommitted changes"),
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
            note="exit 1 when not clean",
        ),
    ),
)

BUILD_LANE = obj(
    "a lane's build",
    {
        "lane": s("the lane"),
        "status": s("`built`, `up-to-date` or `failed`"),
        "configured": b("CMake configured this run"),
        "patched": b("the series was applied this run"),
        "ninja_steps": i("Ninja steps run"),
        "artifacts": arr(ARTIFACT, "the artifacts, hashed"),
        "report": null(s("the signed report")),
        "report_reused": b("an identical earlier report was kept"),
        "log": null(s("the `build-<lane>.log` link")),
        "log_file": null(s("this build's own log")),
        "build_dir": s("the lane's build directory"),
        "cache": CACHE,
        "timings": mapping({"type": "number"}, "seconds per phase"),
        "rebuilt": strs("artifacts found changed on disk and rebuilt (only when any)"),
        "error_lines": strs("a failed build's first error lines (only when failed)"),
    },
    optional=("rebuilt", "error_lines"),
)

BUILD = Command(
    "build",
    "Fetch + patch as needed, configure and build each lane; signed reports.",
    (
        Form(
            "build",
            {
                "upstream": obj(
                    "what was built",
                    {
                        "name": s("the upstream's name"),
                        "commit": s(COMMIT),
                        "series_digest": s("sha256 over the series"),
                    },
                ),
                "worker": null(s("the worker project")),
                "lanes": arr(BUILD_LANE, "per lane"),
                "error": s("a failed lane's build: which, and its log"),
            },
            optional=("error",),
            may_fail=True,
            note=(
                "exit 1 when a lane's build failed; a git worker checkout holding edits or "
                "commits of your own that a move would lose is exit 3 with `worker`, `dirty`, "
                "`local_commits` (`--force` saves them under logs/ first); a lane that cannot "
                "build here is exit 2 with `lanes` (`doctor` rows)"
            ),
        ),
    ),
)

LANES = Command(
    "lanes",
    "The lane matrix: backend, buildable here, last build, certified.",
    (
        Form(
            "lanes [--advertised]",
            {
                "lanes": arr(
                    obj(
                        "a lane",
                        {
                            "lane": s("the lane"),
                            "backend": s("the recipe's backend"),
                            "host_os": strs("the OSes it builds on"),
                            "buildable": b("it can build on this host"),
                            "missing": null(strs("what is missing")),
                            "last_build": LAST_BUILD,
                            "certified": b("a valid hardware certification"),
                            "certification": obj(
                                "`reason` (why not certified, or `valid`) and `record`"
                            ),
                        },
                    ),
                    "per lane",
                ),
                "advertised": strs("with `--advertised`: the certified lanes"),
            },
            optional=("advertised",),
        ),
    ),
)

DOCTOR = Command(
    "doctor",
    "This host: build tools, compilers, GPU toolkits, the compiler cache; which lanes build.",
    (
        Form(
            "doctor [--lane L]",
            {
                "host_os": s("`linux` or `darwin`"),
                "machine": s("e.g. `x86_64`"),
                "tools": arr(obj("a probe: `name`, `found`, `path`, `version`, ..."), "tools"),
                "libraries": arr(obj("a probe"), "libraries"),
                "compiler_launcher": null(s("the compiler launcher")),
                "cache": DOCTOR_CACHE,
                "lanes": arr(DOCTOR_LANE, "per lane (narrowed by `--lane`)"),
                "selected": strs("with `--lane`: the lanes asked for"),
                "unbuildable": strs("with `--lane`: those that cannot build here"),
            },
            optional=("selected", "unbuildable"),
            may_fail=True,
            note="with `--lane`, exit 1 when `unbuildable` is not empty; unknown lane: exit 2",
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

KEYGEN = Command(
    "keygen",
    "Create an Ed25519 signing key (PKCS#8 PEM, mode 0600) and PATH.pub.",
    (
        Form(
            "keygen",
            {
                "private_key": s("its path"),
                "public_key": s("the `.pub` path"),
                "keyid": s("the key id (sha256 of the public key)"),
            },
        ),
    ),
)

REPORT_SHOW = Command(
    "report show",
    "A signed build report, decoded.",
    (
        Form(
            "report show",
            {
                "summary": obj(
                    "the report at a glance: `report`, `payload_type`, `lane`, `recipe`, "
                    "`upstream`, `patches`, `toolchain`, `artifacts`, `signed_by`, `builder`, "
                    "`invocation_id`, `started_on`, `finished_on`"
                ),
                "statement": obj("the in-toto statement (SLSA provenance v1)"),
            },
        ),
    ),
)

REPORT_VERIFY = Command(
    "report verify",
    "Verify a report's signature (and with `--artifacts` its subjects on disk).",
    (
        Form(
            "report verify",
            dict(VERIFICATION["properties"]),
            may_fail=True,
            note="exit 1 when not verified",
        ),
    ),
)

REPORT_COMPARE = Command(
    "report compare",
    "Two reports of a lane: verified, and the same subjects?",
    (
        Form(
            "report compare",
            {
                "identical": b("same subjects, same digests"),
                "a": VERIFICATION,
                "b": VERIFICATION,
                "differences": arr(
                    obj(
                        "a subject that differs",
                        {
                            "name": s("the subject"),
                            "status": s("`changed`, `only_a`, `only_b`"),
                            "a": null(s("its digest in a")),
                            "b": null(s("its digest in b")),
                        },
                    ),
                    "per subject",
                ),
            },
            may_fail=True,
            note="exit 1 when a report does not verify or they differ",
        ),
    ),
)

CERTIFY = Command(
    "certify",
    "Record, signed, that this exact lane/recipe/report passed on real hardware.",
    (
        Form(
            "certify",
            {
                "certification": s("the record's path"),
                "file": s("the same"),
                "trusted": b("its key is in trusted-keys/"),
                "lane": s("the lane"),
                "recipe_sha256": s(SHA),
                "upstream_commit": s(COMMIT),
                "series_digest": s("sha256 over the series"),
                "report_sha256": s(SHA),
                "evidence_sha256": s(SHA),
                "hardware": obj("`description`, `probed`"),
                "certified_on": s("when (ISO 8601, UTC)"),
                "keyid": s("the signing key's id"),
            },
        ),
    ),
)

MATRIX_ENTRY = obj(
    "a lane of the matrix (from its recipe)",
    {
        "lane": s("the file name (`cuda` for `recipes/cuda.toml`)"),
        "backend": s("`lane.backend`"),
        "runs_on": strs('`ci.runs_on` (runner labels; default `["ubuntu-latest"]`)'),
        "container": s(
            "`ci.container`, as `image@sha256:...` when `ci.image_digest` is set; present only "
            "when the recipe names one"
        ),
        "tools": strs("`requires.tools` (probe names from `toolchains/probes.toml`)"),
        "libraries": strs("`requires.libraries`"),
        "packages": strs("`ci.packages` (apt packages the CI job installs first)"),
        "gitlab_tags": strs("`ci.gitlab_tags` (GitLab runner tags)"),
        "runner_os": s("`linux` or `darwin`: which default GitLab image a lane gets"),
    },
    optional=("container",),
)

CI_MATRIX = Command(
    "ci matrix",
    "The lane matrix for CI.",
    (
        Form(
            "ci matrix",
            {
                "matrix": obj(
                    '`{"include": [ENTRY, ...]}`, one entry per `recipes/<lane>.toml`',
                    {"include": arr(MATRIX_ENTRY, "sorted by lane")},
                )
            },
        ),
    ),
    prose=(
        "Without `--json`, stdout is the bare matrix (ready for `fromJSON` or `jq`): "
        '`{"include": [ENTRY, ...]}`. With `--json` the same object is under `matrix`.'
    ),
)

_RENDER = {
    "provider": s("`github` or `gitlab`"),
    "lanes": strs("the lanes rendered, sorted"),
    "sha256": s("of the rendered workflow's bytes"),
    "install": s(
        "how every job installs dgr-forge: `checkout` (the tool's own repository: the "
        "checked-out tree) or `requirements` (`ci/requirements.txt`, pinned by content)"
    ),
    "install_args": s(
        "pip install's arguments in that step, e.g. `-c constraints.txt .` or "
        "`-c ci/constraints.txt -r ci/requirements.txt`"
    ),
    "constraints": s(
        "the constraints file the step installs under (`constraints.txt` or `ci/constraints.txt`)"
    ),
    "requirements": null(s("`ci/requirements.txt`; null in the tool's own repository")),
    "requirements_exist": b(
        "every file the install step reads exists (`--check` exits 1 otherwise)"
    ),
}

CI_RENDER = Command(
    "ci render",
    "A CI workflow file from the recipes.",
    (
        Form("ci render", {**_RENDER, "workflow": s("the workflow text")}),
        Form(
            "ci render --out PATH",
            {
                **_RENDER,
                "path": s("the `--out` path"),
                "changed": b("the file was (re)written; false when already identical"),
                "written": strs(
                    "the files written because they were missing (`ci/constraints.txt` from "
                    "this environment; `ci/requirements.txt` only when this dgr-forge came "
                    "from a git commit)"
                ),
                "requirements_written": b("`ci/requirements.txt` was among them"),
            },
        ),
        Form(
            "ci render --check PATH",
            {**_RENDER, "path": s("the `--check` path"), "current": b("true")},
            note="a stale file is exit 1 (a failure) with the render's keys, `path`, "
            "`current: false` and `diff` (unified diff from the committed file to the rendering)",
        ),
    ),
)

_FILES = {"model": s("the model's name"), "dest": s("the `--dest` directory")}

ARTIFACTS_PROVISION = Command(
    "artifacts provision",
    "Download a model's files: resumable, retried, verified, atomic.",
    (
        Form(
            "artifacts provision",
            {
                **_FILES,
                "files": arr(
                    obj(
                        "a file",
                        {
                            "name": s("file name"),
                            "size": i("bytes, from the manifest"),
                            "sha256": s("the manifest's sha256: what it was verified against"),
                            "status": s("`present`, `downloaded` or `failed`"),
                            "downloaded_bytes": i("bytes downloaded this run"),
                            "resumed_from": i("bytes of NAME.part reused"),
                            "restarts": i("times it started over from byte 0"),
                            "retries": i("retries"),
                            "error": null(s("why it failed")),
                        },
                    ),
                    "per file",
                ),
                "downloaded_bytes": i("total downloaded this run"),
                "seconds": n("time taken"),
                "failed": strs("the files that failed"),
                "split_problems": mapping(strs("problems"), "GGUF split problems per file"),
            },
            may_fail=True,
            note="exit 1 when a file fails; a busy provision lock adds `lock` and `holder` to "
            "the error, a bad `DGR_ARTIFACTS_*` number `variable` and `value`",
        ),
    ),
)

ARTIFACTS_VERIFY = Command(
    "artifacts verify",
    "Check size, sha256 and GGUF split headers of every file.",
    (
        Form(
            "artifacts verify",
            {
                **_FILES,
                "files": arr(
                    obj(
                        "a file",
                        {
                            "name": s("file name"),
                            "size": i("bytes, from the manifest"),
                            "status": s("`ok`, `missing` or `bad`"),
                            "ok": b("`status` is `ok`"),
                            "problems": strs("what is wrong (size, sha256, split header)"),
                            "sha256": null(s("what is on disk, when it was hashed")),
                        },
                    ),
                    "per file",
                ),
                "bad": strs("the files not `ok`"),
                "bytes": i("total size"),
                "seconds": n("time taken"),
            },
            may_fail=True,
            note="exit 1 when a file is not `ok`",
        ),
    ),
)

ARTIFACTS_MANIFEST = Command(
    "artifacts manifest",
    "A model manifest from the files in a directory.",
    (
        Form(
            "artifacts manifest",
            {
                "model": s("the model's name"),
                "manifest": s("where it was written"),
                "state": s("e.g. `written`"),
                "files": arr(
                    obj(
                        "a file",
                        {
                            "name": s("file name"),
                            "size": i("bytes"),
                            "sha256": s(SHA),
                            "url": s("credentials masked"),
                        },
                    ),
                    "per file",
                ),
                "total_size": i("bytes"),
            },
        ),
    ),
)

PRESETS = Command(
    "presets",
    "CMakeUserPresets.json with a configure + build preset per lane.",
    (
        Form(
            "presets",
            {
                "path": null(s("the file written (null with `--print`)")),
                "presets": strs("the preset names"),
                "content": obj("with `--print`: the presets file"),
            },
            optional=("content",),
        ),
    ),
)

DEMO = Command(
    "demo",
    "The tour without network: a generated upstream, series and worker in DIR.",
    (
        Form(
            "demo DIR",
            {
                "root": s("DIR: the demo forge root"),
                "upstream": s("the demo upstream's directory"),
                "pin": s(COMMIT),
                "onto": s("the newer upstream commit the dry run replays onto"),
                "patches": strs("file names"),
                "key": s("the demo key"),
                "public_key": s("its public key"),
                "steps": arr(
                    obj(
                        "a step",
                        {
                            "step": s(
                                "`fetch`, `patch`, `build`, `report verify`, `rebase --dry-run`"
                            ),
                            "command": strs("the argv, from `dgr-forge`"),
                            "exit_code": i("its exit code"),
                            "proved": s("one line"),
                        },
                    ),
                    "per step",
                ),
            },
            note="a step that does not end as expected is exit 1 with `step` and "
            "`step_exit_code`; a non-empty DIR is exit 2",
        ),
    ),
)

COMMANDS: tuple[Command, ...] = (
    FETCH,
    PATCH,
    STATUS,
    EXPORT,
    CHECK,
    BUILD,
    LANES,
    DOCTOR,
    REBASE,
    BUMP,
    KEYGEN,
    REPORT_SHOW,
    REPORT_VERIFY,
    REPORT_COMPARE,
    CERTIFY,
    CI_MATRIX,
    CI_RENDER,
    ARTIFACTS_MANIFEST,
    ARTIFACTS_PROVISION,
    ARTIFACTS_VERIFY,
    PRESETS,
    DEMO,
)
