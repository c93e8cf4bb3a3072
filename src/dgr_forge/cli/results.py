"""What each command's `--json` object holds, as types: one `msgspec.Struct` per shape a
command's object can take (a *form*: a mode such as `patch --check`, or a result that may
be `ok: false`), each field with the meaning docs/json.md shows. `docs/json-schema/*.json`
and `docs/json.md` are generated from these classes (`python -m dgr_forge.cli.schemas`);
the failure envelope's details are `core.errors.Details`. Only the generator and the
tests import this module (msgspec stays off the no-op commands' start).

A form's fields come after the envelope (`ok`, `exit_code`, `command`); a field without
a default is required, `UNSET` marks one that may be absent, `X | None` one that may be
null. A form is closed (`forbid_unknown_fields`); nested objects are open to new keys. A
nested object's docstring is its meaning (a field of that type says it only to differ).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from msgspec import UNSET, Meta, Struct, UnsetType


def d(text: str) -> Meta:
    return Meta(description=text)


class Form(Struct, kw_only=True, forbid_unknown_fields=True):
    """One shape of a command's object (its keys after the envelope)."""

    title: ClassVar[str] = ""
    may_fail: ClassVar[bool] = False  # `ok` may be false with these keys
    note: ClassVar[str] = ""


class Nested(Struct, kw_only=True):
    """A nested object: described and typed, open to new siblings."""


@dataclass(frozen=True)
class Command:
    words: str  # "report verify"
    summary: str
    forms: tuple[type[Form], ...]
    prose: str = ""  # hand-written text shown above the key tables in docs/json.md

    @property
    def name(self) -> str:
        return self.words.replace(" ", "-")


SHA = d("a sha256, hex")
COMMIT = d("a full git commit id")
Strs = list[str]
Obj = dict[str, Any]

# --- shared shapes --------------------------------------------------------------------


class Artifact(Nested, kw_only=True):
    """a built artifact"""

    name: Annotated[str, d("the target's artifact name")]
    kind: Annotated[str, d("CMake target type, e.g. `EXECUTABLE`")]
    path: Annotated[str, d("where it is")]
    sha256: Annotated[str, SHA]


class LastBuild(Nested, kw_only=True):
    """the lane's last build in this workspace (null: never built here)"""

    time: Annotated[str, d("when it finished (ISO 8601, UTC)")]
    result: Annotated[str, d("`ok` or `failed`")]
    report: Annotated[str | UnsetType | None, d("the signed report's path (null without one)")] = (
        UNSET
    )
    log: Annotated[str | UnsetType | None, d("the `build-<lane>.log` link")] = UNSET
    artifacts: Annotated[list[Artifact] | UnsetType, d("`status` only: the artifacts it made")] = (
        UNSET
    )
    stale: Annotated[
        Strs | UnsetType,
        d(
            "what moved since this build's report was made: `pin`, `series`, `recipe`, "
            "`worker` (empty: it is current; a build recorded by an older forge: all)"
        ),
    ] = UNSET
    inputs_recorded: Annotated[
        bool | UnsetType,
        d(
            "false when the build was recorded by an older forge, with no inputs to compare: "
            "stale until rebuilt, whatever moved (with `stale`)"
        ),
    ] = UNSET


class Cache(Nested, kw_only=True):
    """the compiler cache this build used; the same object is the report's `compilerCache`
    (see docs/distributed-compilation.md)"""

    tool: Annotated[str | None, d("`ccache`, `sccache`, or null: no cache")]
    version: Annotated[str, d('the tool\'s version (`""` when none)')]
    backend: Annotated[str, d("`none`, `local`, or `local + remote <masked URL or kind>`")]
    mode: Annotated[str, d("`rw`, `ro` or `off`")]
    hits: Annotated[
        int | UnsetType | None,
        d("this build's cache hits (with a cache; null when the tool would not say)"),
    ] = UNSET
    misses: Annotated[int | UnsetType | None, d("this build's cache misses (with a cache)")] = UNSET
    distributed: Annotated[
        Obj | UnsetType | None,
        d(
            "with an sccache-dist scheduler: `scheduler` (masked), `remoteCompiles`, "
            "`localCompiles`"
        ),
    ] = UNSET


class Missing(Nested, kw_only=True):
    """a tool or library a lane needs that this host lacks (as in `doctor`'s `tools`)"""

    name: Annotated[str, d("probe name")]
    found: Annotated[bool, d("false here")]


class DoctorLane(Nested, kw_only=True):
    """a lane and whether it can build on this host"""

    lane: Annotated[str, d("the lane (recipes/<lane>.toml)")]
    backend: Annotated[str, d("the recipe's backend")]
    buildable: Annotated[bool, d("every requirement is met here")]
    host_os_ok: Annotated[bool, d("this host's OS is one the lane builds on")]
    missing: Annotated[list[Missing], d("what is missing")]
    summary: Annotated[str, d("one line: `buildable`, or what is missing")]


class UpstreamCommit(Nested, kw_only=True):
    """an upstream commit"""

    commit: Annotated[str, COMMIT]
    subject: Annotated[str, d("its subject")]


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
    files: Annotated[Strs | UnsetType, d("the conflicted files")] = UNSET


COUNTS = d(
    "patches per outcome: `unchanged`, `refreshed`, `merged`, `resolved`, `dropped`, "
    "`dropped-by-hand`, `conflict`"
)


class PinSide(Nested, kw_only=True):
    """a side of the rebase"""

    url: Annotated[str, d("the upstream URL, masked")]
    commit: Annotated[str, COMMIT]
    tree: Annotated[str | None, d("its tree")]


class Verification(Nested, kw_only=True):
    """a report's verification"""

    report: Annotated[str, d("the report's path")]
    verified: Annotated[bool, d("the signature verifies and nothing failed")]
    key: Annotated[Obj | None, d("the key it was checked with: `keyid`, `source`")]
    signed_by: Annotated[Strs, d("key ids of the envelope's signatures")]
    failures: Annotated[Strs, d("what failed (empty when verified)")]
    artifacts: Annotated[list[Obj], d("with `--artifacts`: per subject on disk")]


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
        "exit 1 when not clean; 2 when only recipe options are wrong and one is a deprecated "
        "alias upstream"
    )

    commit: Annotated[str, d("the pin")]
    result_tree: Annotated[str | None, d("the tree of the applied series")]
    series_reproduced: Annotated[bool, d("fetch + apply + export gave patches/ and the manifest")]
    apply_error: Annotated[str | None, d("why the series did not apply")]
    differences: Annotated[list[Difference], d("what the round trip changed")]
    options_checked: Annotated[int, d("CMake options the recipes pass that were checked")]
    option_problems: Annotated[list[Obj], d("problems")]


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


# --- lanes, builds, reports -------------------------------------------------------------------


class BuildUpstream(Nested, kw_only=True):
    """what was built"""

    name: Annotated[str, d("the upstream's name")]
    commit: Annotated[str, COMMIT]
    series_digest: Annotated[str, d("sha256 over the series")]


class BuildLane(Nested, kw_only=True):
    """a lane's build"""

    lane: Annotated[str, d("the lane")]
    status: Annotated[str, d("`built`, `up-to-date` or `failed`")]
    configured: Annotated[bool, d("CMake configured this run")]
    patched: Annotated[bool, d("the series was applied this run")]
    ninja_steps: Annotated[int, d("Ninja steps run")]
    artifacts: Annotated[list[Artifact], d("the artifacts, hashed")]
    report: Annotated[str | None, d("the signed report")]
    report_reused: Annotated[
        bool,
        d(
            "an earlier report was kept: only when the lane's whole input digest (input "
            "files, patched tree, worker, programs, by content) is the one recorded with that "
            "report"
        ),
    ]
    log: Annotated[str | None, d("the `build-<lane>.log` link")]
    log_file: Annotated[str | None, d("this build's own log")]
    build_dir: Annotated[str, d("the lane's build directory")]
    cache: Cache
    timings: Annotated[dict[str, float], d("seconds per phase")]
    rebuilt: Annotated[
        Strs | UnsetType, d("artifacts found changed on disk and rebuilt (only when any)")
    ] = UNSET
    error_lines: Annotated[
        Strs | UnsetType, d("a failed build's first error lines (only when failed)")
    ] = UNSET


class Build(Form, kw_only=True):
    title = "build"
    may_fail = True
    note = (
        "exit 1 when a lane's build failed; a git worker checkout holding edits or commits of "
        "your own that a move would lose is exit 3 with `worker`, `dirty`, `local_commits` "
        "(`--force` saves them under logs/ first); a lane that cannot build here is exit 2 with "
        "`lanes` (`doctor` rows); a launcher in the generated rules other than the forge's "
        "choice, or an input file or program changed during the build, is exit 1 with "
        "`changed` (the paths) or `compile`/`link`/`code_check`/`chosen` (the launchers found, "
        "the one chosen), and no report; an ignored, untracked or modified file in the "
        "upstream or git-worker tree is exit 3 with `changes`"
    )

    upstream: BuildUpstream
    worker: Annotated[str | None, d("the worker project")]
    lanes: Annotated[list[BuildLane], d("per lane")]
    error: Annotated[str | UnsetType, d("a failed lane's build: which, and its log")] = UNSET


class CertEntry(Nested, kw_only=True):
    """a certification the forge ran: `certifications/<lane>/<model>/<hardware-class>.json`"""

    lane: Annotated[str, d("the lane")]
    model: Annotated[str, d("the model manifest's name (`none`: a suite without a model)")]
    hardware_class: Annotated[
        str, d("the hardware class (e.g. `cpu-x86_64-avx2`, `nvidia-sm90-h200-141gb`)")
    ]
    advertised: Annotated[bool, d("signed by a trusted key and matching every input now")]
    reason: Annotated[
        str, d("`certified`, or why not (`untrusted: ...`, `lapsed: ...`, `invalid: ...`)")
    ]
    file: Annotated[str, d("the record, relative to the root")]
    keyid: Annotated[str, d('the trusted key that verified it (`""` when none did)')]
    certified_on: Annotated[str | None, d("when (ISO 8601, UTC)")]
    figures: Annotated[
        dict[str, Obj | None],
        d(
            "per step name: its parsed figures (`ops_passed`, `ops_failed`, `ops_unsupported`, "
            "`ops_total`, `backends`; `prompt_ts`, `gen_ts`, `tests`; JUnit `tests`, `failed`)"
        ),
    ]


class LaneRow(Nested, kw_only=True):
    """a lane"""

    lane: Annotated[str, d("the lane")]
    backend: Annotated[str, d("the recipe's backend")]
    host_os: Annotated[Strs, d("the OSes it builds on")]
    buildable: Annotated[bool, d("it can build on this host")]
    missing: Annotated[list[Missing], d("what is missing (the same rows as `doctor`'s)")]
    summary: Annotated[str, d("one line: `buildable`, or what is missing")]
    last_build: LastBuild | None
    certified: Annotated[
        bool,
        d(
            "a certification the forge ran (`certify --lane`), signed by a trusted key and "
            "matching every input"
        ),
    ]
    certification: Annotated[
        Obj,
        d(
            "`reason` (`certified`, `attested, not checked` for a valid record of a person's "
            "evidence, or why not: `none`, `untrusted: ...`, `lapsed: ...`: recipe, pin, "
            "series, toolchain file, `cmake/` modules, worker, the host's tool versions, the "
            "model manifest), `attested` (the `--attested` record's own status) and `record` "
            "(that record: its `inputs`, the bound `toolchain {path, sha256}`, `cmakeModules "
            "{name: sha256}`, `worker`, `tools {name: version}`)"
        ),
    ]
    certifications: Annotated[list[CertEntry], d("the lane's checked records")]


class Lanes(Form, kw_only=True):
    title = "lanes [--advertised]"

    lanes: Annotated[list[LaneRow], d("per lane")]
    advertised: Annotated[Strs | UnsetType, d("with `--advertised`: the lanes of `entries`")] = (
        UNSET
    )
    entries: Annotated[
        list[CertEntry] | UnsetType,
        d("with `--advertised`: the (lane, model, hardware class) entries advertised"),
    ] = UNSET


class DoctorCache(Nested, kw_only=True):
    """what `build` would use now as compiler cache (from `DGR_CACHE` / `DGR_CACHE_MODE`,
    default `auto` / `rw`); never a credential: URLs are masked"""

    choice: Annotated[
        str,
        d(
            "`auto`, `ccache`, `sccache` or `off` (as asked; an unknown word is reported in "
            "`problem`)"
        ),
    ]
    tool: Annotated[str | UnsetType | None, d("`ccache` or `sccache`; null: no cache")] = UNSET
    launcher: Annotated[str | UnsetType | None, d("the launcher's file name")] = UNSET
    path: Annotated[
        str | UnsetType | None, d("where the launcher was found (absent when `problem` is set)")
    ] = UNSET
    version: Annotated[str | UnsetType, d('the tool\'s version (`""` when none)')] = UNSET
    backend: Annotated[
        str | UnsetType,
        d(
            "`none`, `local`, or `local + remote <masked URL or backend kind>` (`|read-only` "
            "marks a read-only ccache remote)"
        ),
    ] = UNSET
    mode: Annotated[str | UnsetType, d("`rw`, `ro` or `off`")] = UNSET
    distributed: Annotated[str | UnsetType | None, d("the sccache-dist scheduler URL, masked")] = (
        UNSET
    )
    dist: Annotated[
        Obj | UnsetType | None,
        d(
            "with a scheduler: what it answered when asked with the client's token: "
            "`scheduler` (masked), `status` (`ok`, `no-servers`, `unauthorized`, "
            "`unreachable`, `error`, `unchecked`), `detail`, `fix` (null when ok), "
            "`servers`, `cpus` (null when unknown); never the token"
        ),
    ] = UNSET
    tools: Annotated[Obj, d("per tool (`ccache`, `sccache`): `found`, `path`, `version`")]
    problem: Annotated[
        str | None,
        d(
            "why `build` would refuse the cache settings (exit 2 there), e.g. an explicit tool "
            "that is not installed"
        ),
    ]


class Doctor(Form, kw_only=True):
    title = "doctor [--lane L]"
    may_fail = True
    note = "with `--lane`, exit 1 when `unbuildable` is not empty; unknown lane: exit 2"

    host_os: Annotated[str, d("`linux` or `darwin`")]
    machine: Annotated[str, d("e.g. `x86_64`")]
    tools: Annotated[list[Obj], d("tools")]
    libraries: Annotated[list[Obj], d("libraries")]
    compiler_launcher: Annotated[str | None, d("the compiler launcher")]
    cache: DoctorCache
    lanes: Annotated[list[DoctorLane], d("per lane (narrowed by `--lane`)")]
    selected: Annotated[Strs | UnsetType, d("with `--lane`: the lanes asked for")] = UNSET
    unbuildable: Annotated[Strs | UnsetType, d("with `--lane`: those that cannot build here")] = (
        UNSET
    )


class Keygen(Form, kw_only=True):
    title = "keygen"

    private_key: Annotated[str, d("its path")]
    public_key: Annotated[str, d("the `.pub` path")]
    keyid: Annotated[str, d("the key id (sha256 of the public key)")]


class ReportShow(Form, kw_only=True):
    title = "report show"

    summary: Annotated[
        Obj,
        d(
            "the report at a glance: `report`, `payload_type`, `lane`, `recipe`, `upstream`, "
            "`patches`, `toolchain`, `artifacts`, `signed_by`, `builder`, `invocation_id`, "
            "`started_on`, `finished_on`"
        ),
    ]
    statement: Annotated[Obj, d("the in-toto statement (SLSA provenance v1)")]


class ReportVerify(Form, kw_only=True):
    title = "report verify"
    may_fail = True
    note = "exit 1 when not verified"

    report: Annotated[str, d("the report's path")]
    verified: Annotated[bool, d("the signature verifies and nothing failed")]
    key: Annotated[Obj | None, d("the key it was checked with: `keyid`, `source`")]
    signed_by: Annotated[Strs, d("key ids of the envelope's signatures")]
    failures: Annotated[Strs, d("what failed (empty when verified)")]
    artifacts: Annotated[list[Obj], d("with `--artifacts`: per subject on disk")]


class SubjectDifference(Nested, kw_only=True):
    """a subject that differs"""

    name: Annotated[str, d("the subject")]
    status: Annotated[str, d("`changed`, `only_a`, `only_b`")]
    a: Annotated[str | None, d("its digest in a")]
    b: Annotated[str | None, d("its digest in b")]


class ReportCompare(Form, kw_only=True):
    title = "report compare"
    may_fail = True
    note = "exit 1 when a report does not verify or they differ"

    identical: Annotated[bool, d("same subjects, same digests")]
    a: Verification
    b: Verification
    differences: Annotated[list[SubjectDifference], d("per subject")]


class CertifyInputs(Nested, kw_only=True):
    """the inputs it binds besides recipe, pin and series"""

    toolchain: Annotated[Obj | None, d("the toolchain file: `path`, `sha256`")]
    cmakeModules: Annotated[dict[str, str], d("`cmake/` modules by name")]
    worker: Annotated[Obj | None, d("the worker: `location` + `commit`, or `location` + `tree`")]
    tools: Annotated[
        dict[str, str] | None,
        d(
            "the host's tools the lane builds with (cmake, ninja, the recipe's tools) by "
            "version; null where not probed"
        ),
    ]


class CertStep(Nested, kw_only=True):
    """one step as run"""

    name: Annotated[str, d("the step")]
    program: Annotated[Obj, d("`target`, `path` (the report subject), `sha256`")]
    args: Annotated[Strs, d("its arguments as run (placeholders substituted)")]
    parser: Annotated[str, d("`test-backend-ops`, `llama-bench` or `ctest`")]
    thresholds: Annotated[Obj, d("the gate applied: `max_failed`, or `min_avg_ts {prompt, gen}`")]
    figures: Annotated[Obj | None, d("what the parser read; null: the output was unreadable")]
    exit_code: Annotated[
        int | None, d("the program's exit code; null: stopped (time limit, output bound)")
    ]
    seconds: Annotated[float, d("how long it ran")]
    verdict: Annotated[str, d("`pass` or `fail`")]
    problems: Annotated[Strs, d("why it failed (empty when it passed)")]
    log: Annotated[Obj, d("the step's full log: `path`, `sha256`")]


class CertifyLane(Form, kw_only=True):
    title = "certify --lane L"

    certification: Annotated[str, d("the record's path")]
    trusted: Annotated[bool, d("its key is in trusted-keys/")]
    lane: Annotated[str, d("the lane")]
    model: Annotated[str, d("the model manifest's name (`none` without one)")]
    hardware_class: Annotated[str, d("the hardware class the record is named by")]
    report_sha256: Annotated[str, SHA]
    keyid: Annotated[str, d("the signing key's id")]
    steps: Annotated[list[CertStep], d("every step, all passed")]
    hardware: Annotated[
        Obj,
        d(
            "the probed identity: `cpu {model, flags, count, machine}`, `memory_bytes`, "
            "`os {system, kernel, release}`, `gpus` (GPU UUIDs only as `uuid_sha256`), "
            "`uuid_salt`, `probed`"
        ),
    ]
    certified_on: Annotated[str, d("when (ISO 8601, UTC)")]


class Certify(Form, kw_only=True):
    title = "certify --attested FILE --report R"
    note = "recorded as `attested, not checked`: never advertised"

    certification: Annotated[str, d("the record's path")]
    file: Annotated[str, d("the same")]
    trusted: Annotated[bool, d("its key is in trusted-keys/")]
    lane: Annotated[str, d("the lane")]
    recipe_sha256: Annotated[str, SHA]
    upstream_commit: Annotated[str, COMMIT]
    series_digest: Annotated[str, d("sha256 over the series")]
    report_sha256: Annotated[str, SHA]
    evidence_sha256: Annotated[str, SHA]
    hardware: Annotated[Obj, d("`description`, `probed`")]
    certified_on: Annotated[str, d("when (ISO 8601, UTC)")]
    keyid: Annotated[str, d("the signing key's id")]
    inputs: CertifyInputs


# --- CI ---------------------------------------------------------------------------------------


class MatrixEntry(Nested, kw_only=True):
    """a lane of the matrix (from its recipe)"""

    lane: Annotated[str, d("the file name (`cuda` for `recipes/cuda.toml`)")]
    backend: Annotated[str, d("`lane.backend`")]
    runs_on: Annotated[Strs, d('`ci.runs_on` (runner labels; default `["ubuntu-latest"]`)')]
    container: Annotated[
        str | UnsetType,
        d(
            "`ci.container`, as `image@sha256:...` when `ci.image_digest` is set; present only "
            "when the recipe names one"
        ),
    ] = UNSET
    tools: Annotated[Strs, d("`requires.tools` (probe names from `toolchains/probes.toml`)")]
    libraries: Annotated[Strs, d("`requires.libraries`")]
    packages: Annotated[Strs, d("`ci.packages` (apt packages the CI job installs first)")]
    gitlab_tags: Annotated[Strs, d("`ci.gitlab_tags` (GitLab runner tags)")]
    runner_os: Annotated[str, d("`linux` or `darwin`: which default GitLab image a lane gets")]


class Matrix(Nested, kw_only=True):
    """`{"include": [ENTRY, ...]}`, one entry per `recipes/<lane>.toml`"""

    include: Annotated[list[MatrixEntry], d("sorted by lane")]


class CiMatrix(Form, kw_only=True):
    title = "ci matrix"

    matrix: Annotated[Matrix, d('`{"include": [ENTRY, ...]}`, one entry per `recipes/<lane>.toml`')]


class Render(Form, kw_only=True):
    """The keys every `ci render` form shares."""

    provider: Annotated[str, d("`github` or `gitlab`")]
    lanes: Annotated[Strs, d("the lanes rendered, sorted")]
    sha256: Annotated[str, d("of the rendered workflow's bytes")]
    install: Annotated[
        str,
        d(
            "how every job installs dgr-forge: `checkout` (the tool's own repository: the "
            "checked-out tree), `requirements` (`ci/requirements.txt`, pinned by content) or "
            "`source` (`--tool-source`)"
        ),
    ]
    install_args: Annotated[
        str,
        d(
            "pip install's arguments in that step, e.g. `-c constraints.txt .` or "
            "`-c ci/constraints.txt -r ci/requirements.txt` (with `--tool-source`: "
            '`-c ci/constraints.txt "$DGR_TOOL_SOURCE"`, the requirement in the workflow\'s '
            "environment)"
        ),
    ]
    constraints: Annotated[
        str,
        d(
            "the constraints file the step installs under (`constraints.txt` or "
            "`ci/constraints.txt`)"
        ),
    ]
    requirements: Annotated[
        str | None,
        d("`ci/requirements.txt`; null in the tool's own repository and with `--tool-source`"),
    ]
    requirements_exist: Annotated[
        bool, d("every file the install step reads exists (`--check` exits 1 otherwise)")
    ]
    tool_source: Annotated[
        str | None,
        d(
            "the pip requirement `--tool-source` gave (`dgr-forge==X`, `dgr-forge @ "
            "https://...whl#sha256=...`, `dgr-forge @ git+https://...@<commit>`); null without"
        ),
    ]


class CiRender(Render, kw_only=True):
    title = "ci render"

    workflow: Annotated[str, d("the workflow text")]


class CiRenderOut(Render, kw_only=True):
    title = "ci render --out PATH"

    path: Annotated[str, d("the `--out` path")]
    changed: Annotated[bool, d("the file was (re)written; false when already identical")]
    written: Annotated[
        Strs,
        d(
            "the files written because they were missing (`ci/constraints.txt` from this "
            "environment; `ci/requirements.txt` only when this dgr-forge came from a git commit)"
        ),
    ]
    requirements_written: Annotated[bool, d("`ci/requirements.txt` was among them")]


class CiRenderCheck(Render, kw_only=True):
    title = "ci render --check PATH"
    note = (
        "a stale file is exit 1 (a failure) with the render's keys, `path`, `current: false` "
        "and `diff` (unified diff from the committed file to the rendering)"
    )

    path: Annotated[str, d("the `--check` path")]
    current: Annotated[bool, d("true")]


# --- model artifacts ----------------------------------------------------------------------------


class Layers(Nested, kw_only=True):
    """with `--layers` (or, for `verify`, the destination's record): the layers the files
    listed were chosen for"""

    layers: Annotated[str, d("merged layer ranges, e.g. `11-21`")]
    first: Annotated[bool, d("the embeddings' files included (`--first`, or a range from layer 0)")]
    last: Annotated[
        bool, d("the output head's files included (`--last`, or a range to the last layer)")
    ]


class Record(Nested, kw_only=True):
    """with a layer map: what the destination records it was provisioned for (the union of
    every successful run's ranges)"""

    model: Annotated[str, d("the model's name")]
    layers: Annotated[str, d("layer ranges")]
    first: Annotated[bool, d("the embeddings")]
    last: Annotated[bool, d("the output head")]


class ProvisionedFile(Nested, kw_only=True):
    """a file"""

    name: Annotated[str, d("file name")]
    size: Annotated[int, d("bytes, from the manifest")]
    sha256: Annotated[str, d("the manifest's sha256: what it was verified against")]
    status: Annotated[str, d("`present`, `downloaded` or `failed`; `planned` with `--dry-run`")]
    downloaded_bytes: Annotated[int, d("bytes downloaded this run")]
    resumed_from: Annotated[int, d("bytes of NAME.part reused")]
    restarts: Annotated[int, d("times it started over from byte 0")]
    retries: Annotated[int, d("retries")]
    error: Annotated[str | None, d("why it failed")]


class ArtifactsProvision(Form, kw_only=True):
    title = "artifacts provision"
    may_fail = True
    note = (
        "exit 1 when a file fails; a busy provision lock adds `lock` and `holder` to the "
        "error, a bad `DGR_ARTIFACTS_*` number `variable` and `value`"
    )

    model: Annotated[str, d("the model's name")]
    dest: Annotated[str, d("the `--dest` directory")]
    files: Annotated[list[ProvisionedFile], d("per file")]
    downloaded_bytes: Annotated[int, d("total downloaded this run")]
    seconds: Annotated[float, d("time taken")]
    failed: Annotated[Strs, d("the files that failed")]
    split_problems: Annotated[
        dict[str, Strs], d("GGUF split problems per file, and headers contradicting the layer map")
    ]
    layers: Layers | None
    bytes: Annotated[int, d("the size of the files listed (the subset with `--layers`)")]
    model_bytes: Annotated[int, d("the size of the whole model")]
    missing_bytes: Annotated[int, d("what was still to download when the run began")]
    dry_run: Annotated[bool, d("`--dry-run`: nothing was written, every file is `planned`")]
    provisioned: Record | None


class VerifiedFile(Nested, kw_only=True):
    """a file"""

    name: Annotated[str, d("file name")]
    size: Annotated[int, d("bytes, from the manifest")]
    status: Annotated[str, d("`ok`, `missing` or `bad`")]
    ok: Annotated[bool, d("`status` is `ok`")]
    problems: Annotated[Strs, d("what is wrong (size, sha256, split header)")]
    sha256: Annotated[str | None, d("what is on disk, when it was hashed")]


class Serves(Nested, kw_only=True):
    """with a layer map: what the files that verified can serve"""

    layers: Annotated[str, d('layer ranges, e.g. `0-10,22-32` (`""`: none)')]
    first: Annotated[bool, d("the embeddings' files verified")]
    last: Annotated[bool, d("the output head's files verified")]


class ArtifactsVerify(Form, kw_only=True):
    title = "artifacts verify"
    may_fail = True
    note = "exit 1 when a file is not `ok`"

    model: Annotated[str, d("the model's name")]
    dest: Annotated[str, d("the `--dest` directory")]
    files: Annotated[
        list[VerifiedFile],
        d("per file required (all, or those the layers checked need) or present"),
    ]
    bad: Annotated[Strs, d("the files not `ok`")]
    bytes: Annotated[int, d("total size of the files listed")]
    seconds: Annotated[float, d("time taken")]
    layers: Layers | None
    serves: Serves | None
    provisioned: Record | None


class ManifestFile(Nested, kw_only=True):
    """a file"""

    name: Annotated[str, d("file name")]
    size: Annotated[int, d("bytes")]
    sha256: Annotated[str, SHA]
    url: Annotated[str, d("credentials masked")]


class ArtifactsManifest(Form, kw_only=True):
    title = "artifacts manifest"

    model: Annotated[str, d("the model's name")]
    manifest: Annotated[str, d("where it was written")]
    state: Annotated[str, d("e.g. `written`")]
    files: Annotated[list[ManifestFile], d("per file")]
    total_size: Annotated[int, d("bytes")]
    block_count: Annotated[int | None, d("with a layer map: the model's layers")]


class MappedFile(Nested, kw_only=True):
    """a file"""

    name: Annotated[str, d("file name")]
    layers: Annotated[str | None, d('layer ranges it holds tensors of (`""`: none)')]
    tensors: Annotated[Strs | None, d("its other tensor groups, e.g. `token_embd`")]
    header_bytes: Annotated[int, d("header bytes read")]


class ArtifactsMap(Form, kw_only=True):
    title = "artifacts map"

    model: Annotated[str, d("the model's name")]
    manifest: Annotated[str, d("the manifest written")]
    state: Annotated[str, d("`updated` or `unchanged`")]
    source: Annotated[str, d("`dest` (files on disk) or `url` (headers by HTTP Range requests)")]
    arch: Annotated[str | None, d("`general.architecture`")]
    block_count: Annotated[int | None, d("`<arch>.block_count`: the model's layers")]
    files: Annotated[list[MappedFile], d("per file (null `layers`/`tensors`: not a .gguf)")]
    header_bytes: Annotated[int, d("header bytes read in all")]
    requests: Annotated[int, d("HTTP Range requests made")]


class Presets(Form, kw_only=True):
    title = "presets"

    path: Annotated[
        str | None,
        d(
            "the forge's presets file, `dgr-forge.presets.json` (null with `--print` and "
            "`--remove`)"
        ),
    ]
    presets: Annotated[Strs, d("the preset names (none with `--remove`)")]
    content: Annotated[Obj | UnsetType, d("with `--print`: the presets file")] = UNSET
    user_presets: Annotated[str | UnsetType, d("the `CMakeUserPresets.json` that includes it")] = (
        UNSET
    )
    user_presets_change: Annotated[
        str | UnsetType,
        d(
            "what happens to it: `created`, `changed` (the include entry added or removed; a "
            "`version` under 4 raised to 4), `unchanged`, `deleted` (the one the forge created, "
            "by `--remove`)"
        ),
    ] = UNSET
    diff: Annotated[str | UnsetType, d('the change to it as a unified diff (`""`: none)')] = UNSET
    dry_run: Annotated[bool | UnsetType, d("`--dry-run`: nothing was written")] = UNSET


class DemoStep(Nested, kw_only=True):
    """a step"""

    step: Annotated[str, d("`fetch`, `patch`, `build`, `report verify`, `rebase --dry-run`")]
    command: Annotated[Strs, d("the argv, from `dgr-forge`")]
    exit_code: Annotated[int | None, d("its exit code (null: it did not run)")]
    proved: Annotated[str, d("one line")]


class Demo(Form, kw_only=True):
    title = "demo DIR"
    note = (
        "a step that does not end as expected is exit 1 with `step` and `step_exit_code`; a "
        "non-empty DIR is exit 2"
    )

    root: Annotated[str, d("DIR: the demo forge root")]
    upstream: Annotated[str, d("the demo upstream's directory")]
    pin: Annotated[str, COMMIT]
    onto: Annotated[str, d("the newer upstream commit the dry run replays onto")]
    patches: Annotated[Strs, d("file names")]
    key: Annotated[str, d("the demo key")]
    public_key: Annotated[str, d("its public key")]
    steps: Annotated[list[DemoStep], d("per step")]


def _cmd(words: str, summary: str, *forms: type[Form], prose: str = "") -> Command:
    return Command(words, summary, forms, prose)


COMMANDS: tuple[Command, ...] = (
    _cmd("fetch", "Check out the pinned upstream commit, verified.", Fetch),
    _cmd(
        "patch",
        "Apply the series on the pin (or check it, continue or abort a replay of your commits).",
        Patch,
        PatchAbort,
        PatchCheck,
    ),
    _cmd(
        "status",
        "The workspace: upstream checkout, series, lanes, a rebase in progress. URLs masked.",
        Status,
    ),
    _cmd("export", "Write the workspace's commits back as the series and the manifest.", Export),
    _cmd(
        "check", "The CI gate: series round trip byte-compare, CMake options still declared.", Check
    ),
    _cmd("build", "Fetch + patch as needed, configure and build each lane; signed reports.", Build),
    _cmd("lanes", "The lane matrix: backend, buildable here, last build, certified.", Lanes),
    _cmd(
        "doctor",
        "This host: build tools, compilers, GPU toolkits, the compiler cache; which lanes build.",
        Doctor,
    ),
    _cmd(
        "rebase",
        "Replay the series onto a new upstream commit; `--dry-run` is the upstream canary.",
        Rebase,
        RebaseDryRun,
        RebaseAbort,
    ),
    _cmd(
        "bump",
        "Move the pin to the newest commit onto which the series replays cleanly (docs/bump.md).",
        Bump,
    ),
    _cmd("keygen", "Create an Ed25519 signing key (PKCS#8 PEM, mode 0600) and PATH.pub.", Keygen),
    _cmd("report show", "A signed build report, decoded.", ReportShow),
    _cmd(
        "report verify",
        "Verify a report's signature (and with `--artifacts` its subjects on disk).",
        ReportVerify,
    ),
    _cmd(
        "report compare", "Two reports of a lane: verified, and the same subjects?", ReportCompare
    ),
    _cmd(
        "certify",
        "Run the lane's certification suite on this host; sign it when every step passes.",
        CertifyLane,
        Certify,
    ),
    _cmd(
        "ci matrix",
        "The lane matrix for CI.",
        CiMatrix,
        prose=(
            "Without `--json`, stdout is the bare matrix (ready for `fromJSON` or `jq`): "
            '`{"include": [ENTRY, ...]}`. With `--json` the same object is under `matrix`.'
        ),
    ),
    _cmd("ci render", "A CI workflow file from the recipes.", CiRender, CiRenderOut, CiRenderCheck),
    _cmd(
        "artifacts manifest", "A model manifest from the files in a directory.", ArtifactsManifest
    ),
    _cmd(
        "artifacts map",
        "Add the layer map to a model manifest, from the split headers.",
        ArtifactsMap,
    ),
    _cmd(
        "artifacts provision",
        "Download a model's files: resumable, retried, verified, atomic.",
        ArtifactsProvision,
    ),
    _cmd(
        "artifacts verify",
        "Check size, sha256 and GGUF split headers of every file.",
        ArtifactsVerify,
    ),
    _cmd("presets", "CMakeUserPresets.json with a configure + build preset per lane.", Presets),
    _cmd("demo", "The tour without network: a generated upstream, series and worker in DIR.", Demo),
)
