"""The numbered patch series on the pinned upstream: verify, apply, check, inspect.

Applying is `git am` on the pin, one commit per patch, without 3-way merge and without
fuzz (git apply needs every context line to match), with a fixed committer and the
committer date taken from each patch's own Date header, so the same inputs give the same
commit ids on every machine. Whether the series is "already applied" is an exact
comparison of the workspace's commit chain over the pin with the manifest's trees: no
stamp files, no reverse-apply guessing (DESIGN.md, "Patch files are canonical").
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from dgr_forge.core import gitutil
from dgr_forge.core.errors import BadInput, ForgeError, NeedsHuman, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import sha256_bytes
from dgr_forge.core.gitutil import FORGE_IDENTITY, git, out
from dgr_forge.core.lock import workspace_lock
from dgr_forge.core.output import Reporter
from dgr_forge.upstream import patchfile
from dgr_forge.upstream.fetch import (
    CHECKOUT_JOURNAL,
    PIN_REF,
    READ_ONLY_ENV,
    ensure_fetched,
    refuse_during_rebase,
)
from dgr_forge.upstream.manifest import PatchEntry, UpstreamManifest

# `git am` flags: no 3-way fallback (a hunk that does not match exactly is a conflict),
# keep subjects as exported (only "[PATCH ...]" prefixes are stripped), never rewrite
# whitespace, committer date = the patch's Date header (reproducible commit ids).
AM_FLAGS: tuple[str, ...] = (
    "am",
    "--no-3way",
    "--keep-non-patch",
    "--committer-date-is-author-date",
    "--whitespace=nowarn",
    "--no-scissors",
    "--no-gpg-sign",
    "--quiet",
)
FORGE_EMAIL = FORGE_IDENTITY["GIT_COMMITTER_EMAIL"]
SYMLINK_MODE = "120000"
PATCH_JOURNAL = "dgr-patching"  # in .git while `git am` runs: a killed run is rolled back


@dataclass(frozen=True)
class PatchedTree:
    src_dir: Path
    base_commit: str  # the pin
    head_commit: str  # the last patch commit (the pin for an empty series)
    result_tree: str
    changed: bool  # False: it was already applied, nothing moved


@dataclass(frozen=True)
class ChainCommit:
    commit: str
    tree: str
    parents: tuple[str, ...]
    forge_made: bool  # committed by the forge identity (not by a person)


@dataclass
class Workspace:
    """What the work tree holds, measured exactly."""

    src: Path
    exists: bool
    head: str | None = None
    series: list[ChainCommit] = field(default_factory=list)  # forge commits, oldest first
    base: str | None = None  # the commit under them
    local_commits: list[str] = field(default_factory=list)  # a person's commits on top
    dirty: list[str] = field(default_factory=list)  # uncommitted changes (porcelain)
    operation: str | None = None  # an am/rebase/merge left in progress

    @property
    def has_local_edits(self) -> bool:
        return bool(self.dirty or self.local_commits)


@dataclass(frozen=True)
class Conflict:
    file: str  # path in the upstream tree
    hunks: tuple[str, ...]  # "hunk 2/3 @@ -10,6 +10,7 @@" (or git's reason for whole files)

    def as_dict(self) -> dict[str, object]:
        return {"file": self.file, "hunks": list(self.hunks)}

    def __str__(self) -> str:
        return f"{self.file} ({', '.join(self.hunks)})"


@dataclass(frozen=True)
class CheckResult:
    file: str
    status: str  # applies | conflict | tree-mismatch | skipped
    tree: str | None = None
    conflicts: tuple[Conflict, ...] = ()
    expected_tree: str | None = None
    changed_on_disk: bool = False  # the file's sha256 differs from the manifest's

    def as_dict(self) -> dict[str, object]:
        return {
            "file": self.file,
            "status": self.status,
            "changed_on_disk": self.changed_on_disk,
            "tree": self.tree,
            "expected_tree": self.expected_tree,
            "conflicts": [c.as_dict() for c in self.conflicts],
        }


# ----------------------------------------------------------------------------- inputs


def read_series(m: UpstreamManifest, forge: Forge | None = None) -> list[bytes]:
    """Every patch file's bytes, each checked against the manifest's sha256 (exit 2)."""
    datas: list[bytes] = []
    for entry in m.series:
        data = read_patch(m, entry)
        actual = sha256_bytes(data)
        if actual != entry.sha256:
            shown = _shown(m, entry, forge)
            raise BadInput(
                f"{shown}: sha256 is {actual}, the manifest says {entry.sha256}",
                hint=f"restore the file (`git checkout -- {shown}`), or run `dgr-forge export` "
                "if you changed it on purpose",
                details={"file": shown, "actual_sha256": actual, "expected_sha256": entry.sha256},
            )
        datas.append(data)
    return datas


def read_patch(m: UpstreamManifest, entry: PatchEntry) -> bytes:
    path = m.patch_path(entry)
    try:
        return path.read_bytes()
    except OSError as err:
        raise BadInput(
            f"{m.patches_dir_rel}/{entry.file}: cannot read: {err.strerror}",
            hint="restore the file, or remove its [[patches.series]] entry",
            details={"file": f"{m.patches_dir_rel}/{entry.file}"},
        ) from None


def _shown(m: UpstreamManifest, entry: PatchEntry, forge: Forge | None = None) -> str:
    return forge.rel(m.patch_path(entry)) if forge else f"{m.patches_dir_rel}/{entry.file}"


def parse_series(m: UpstreamManifest, datas: Sequence[bytes]) -> list[patchfile.ParsedPatch]:
    """Parse every patch and refuse unsafe paths and missing mail headers (exit 2)."""
    parsed: list[patchfile.ParsedPatch] = []
    for entry, data in zip(m.series, datas, strict=True):
        shown = f"{m.patches_dir_rel}/{entry.file}"
        p = patchfile.parse(data)
        if not p.files:
            raise BadInput(
                f"{shown}: contains no diff",
                hint="delete it and its [[patches.series]] entry, or re-export the series",
                details={"file": shown},
            )
        for header in ("From", "Date"):
            if header not in p.headers:
                raise BadInput(
                    f"{shown}: no '{header}:' header (needed for a reproducible commit)",
                    hint="patches must be `git format-patch` mails; regenerate them with "
                    "`dgr-forge export`",
                    details={"file": shown, "header": header},
                )
        for path in p.paths:
            reason = patchfile.unsafe_reason(path)
            if reason:
                raise BadInput(
                    f"{shown}: refuses to touch {path!r}: {reason}",
                    hint="a patch may only change files inside the upstream tree; fix the "
                    "diff headers",
                    details={"file": shown, "path": path},
                )
        parsed.append(p)
    return parsed


def check_symlinks(
    m: UpstreamManifest, parsed: Sequence[patchfile.ParsedPatch], symlinks: set[str]
) -> None:
    """Refuse a patch writing through a symlink (in the pinned tree or made by the series)."""
    links = set(symlinks)
    for entry, p in zip(m.series, parsed, strict=True):
        for path in p.paths:
            parts = path.split("/")
            for n in range(1, len(parts)):
                parent = "/".join(parts[:n])
                if parent in links:
                    shown = f"{m.patches_dir_rel}/{entry.file}"
                    raise BadInput(
                        f"{shown}: refuses to touch {path!r}: {parent!r} is a symlink, the "
                        "write could land outside the tree",
                        hint="patch the symlink's target path instead",
                        details={"file": shown, "path": path, "symlink": parent},
                    )
        for f in p.files:
            if f.new_path and f.new_mode == SYMLINK_MODE:
                links.add(f.new_path)
            elif f.new_path is None and f.old_path:
                links.discard(f.old_path)


def symlinks_in(repo: Path, rev: str) -> set[str]:
    proc = git(repo, "ls-tree", "-r", "-z", "--full-tree", rev)
    links: set[str] = set()
    for record in proc.stdout.split("\0"):
        if record.startswith(SYMLINK_MODE + " "):
            links.add(record.split("\t", 1)[1])
    return links


# ----------------------------------------------------------------------------- inspecting


def git_dir(src: Path) -> Path:
    dot = src / ".git"
    if dot.is_dir():
        return dot
    return Path(out(src, "rev-parse", "--absolute-git-dir"))


def operation_in_progress(src: Path) -> str | None:
    gd = git_dir(src)
    for name, what in (
        ("rebase-apply", "git am / rebase"),
        ("rebase-merge", "git rebase"),
        ("MERGE_HEAD", "git merge"),
        ("CHERRY_PICK_HEAD", "git cherry-pick"),
    ):
        if (gd / name).exists():
            return what
    return None


def read_chain(src: Path, limit: int) -> list[ChainCommit]:
    """The first-parent history from HEAD, newest first, at most `limit` commits."""
    proc = git(
        src,
        "log",
        "--first-parent",
        "--no-show-signature",
        f"--max-count={limit}",
        "--format=%H %T %ce%x00%P",
        "HEAD",
        check=False,  # an unborn HEAD is an empty chain
        env=READ_ONLY_ENV,
    )
    chain: list[ChainCommit] = []
    for line in proc.stdout.splitlines():
        left, _, parents = line.partition("\0")
        commit, tree, email = left.split(" ", 2)
        chain.append(ChainCommit(commit, tree, tuple(parents.split()), email == FORGE_EMAIL))
    return chain


def dirty_paths(src: Path) -> list[str]:
    proc = git(
        src,
        "status",
        "--porcelain=v1",
        "--untracked-files=all",
        "--ignore-submodules",
        env=READ_ONLY_ENV,  # a no-op must not even refresh the index
    )
    return [line for line in proc.stdout.splitlines() if line]


def inspect(src: Path, pin: str, series_len: int) -> Workspace:
    """Measure the workspace: forge commits over which base, a person's commits, edits.

    The base is the pin, or the pin fetch last checked out (`refs/dgr/pin`) when the
    manifest has moved since. Commits above the base that the forge did not make are a
    person's (local commits); upstream history below the base is never counted.
    """
    ws = Workspace(src=src, exists=(src / ".git").exists())
    if not ws.exists:
        return ws
    ws.operation = operation_in_progress(src)
    ws.dirty = dirty_paths(src)
    # The usual case (the series on the pin) needs only series_len + 1 commits.
    chain = read_chain(src, series_len + 1)
    if not chain:
        return ws
    head = ws.head = chain[0].commit
    bases = {pin}
    if len(chain) <= series_len or chain[series_len].commit != pin:
        chain = read_chain(src, series_len + 1 + 1000)
        fetched = gitutil.rev_parse(src, PIN_REF)
        if fetched:
            bases.add(fetched)
    i = 0
    while i < len(chain) and not chain[i].forge_made and chain[i].commit not in bases:
        i += 1
    top, rest = chain[:i], chain[i:]
    j = 0
    while j < len(rest) and rest[j].forge_made and rest[j].commit not in bases:
        j += 1
    if j:
        ws.local_commits = [c.commit for c in top]
        ws.series = list(reversed(rest[:j]))
        ws.base = rest[j].commit if j < len(rest) else None
    elif rest:
        ws.local_commits = [c.commit for c in top]  # a person's commits right on the base
        ws.base = rest[0].commit
    else:
        ws.base = head  # unknown history (no fetch recorded it): fetch decides
    return ws


def is_applied(ws: Workspace, pin: str, trees: Sequence[str], result_tree: str | None) -> bool:
    """Exact: HEAD's forge commits sit on the pin and carry exactly the expected trees."""
    if not ws.exists or ws.operation or ws.has_local_edits or ws.base != pin:
        return False
    if [c.tree for c in ws.series] != list(trees):
        return False
    if any(len(c.parents) != 1 for c in ws.series):
        return False
    return result_tree is None or not trees or trees[-1] == result_tree


def known_trees(m: UpstreamManifest) -> list[str] | None:
    """The per-patch trees from the manifest, or None when any is missing."""
    trees = [e.tree for e in m.series]
    if any(t is None for t in trees):
        return None
    return [t for t in trees if t is not None]


# ----------------------------------------------------------------------------- scratch apply


@contextmanager
def scratch_index(repo: Path, rev: str) -> Iterator[dict[str, str]]:
    """A temporary index (seeded from `rev`) and object directory: nothing in `repo` changes.

    Objects git writes go to the scratch directory; the repository's objects are read
    through GIT_ALTERNATE_OBJECT_DIRECTORIES.
    """
    common = Path(out(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    objects = common / "objects"
    alternates = [str(objects)]
    info = objects / "info" / "alternates"
    if info.is_file():
        for line in info.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                alt = Path(line.strip())
                alternates.append(str(alt if alt.is_absolute() else (objects / alt).resolve()))
    with tempfile.TemporaryDirectory(prefix="dgr-scratch-") as tmp:
        (Path(tmp) / "objects").mkdir()
        env = {
            "GIT_INDEX_FILE": str(Path(tmp) / "index"),
            "GIT_OBJECT_DIRECTORY": str(Path(tmp) / "objects"),
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": os.pathsep.join(alternates),
        }
        git(repo, "read-tree", rev, env=env)
        yield env


def conflicting_hunks(
    repo: Path, p: patchfile.ParsedPatch, env: dict[str, str] | None = None
) -> list[Conflict]:
    """Which files and hunks of `p` do not apply to the index (exactly, without fuzz)."""
    result: list[Conflict] = []
    for f in p.files:
        units = range(len(f.hunks)) if f.hunks else [None]
        bad: list[str] = []
        for i in units:
            text = f.single_hunk_patch(i) if i is not None else b"".join(f.header)
            proc = git(
                repo,
                "apply",
                "--cached",
                "--check",
                "-",
                input=text,
                env=env,
                text=False,
                check=False,
            )
            if proc.returncode != 0:
                if i is None:
                    err: bytes | str = proc.stderr
                    msg = err.decode("utf-8", "replace") if isinstance(err, bytes) else err
                    bad.append((msg.strip().splitlines() or ["does not apply"])[-1])
                else:
                    bad.append(f"hunk {i + 1}/{len(f.hunks)} {f.hunks[i].header}")
        if bad:
            result.append(Conflict(f.path, tuple(bad)))
    return result


def check_series(
    repo: Path,
    m: UpstreamManifest,
    datas: Sequence[bytes],
    parsed: Sequence[patchfile.ParsedPatch],
    *,
    compare_trees: bool = True,
    changed: Collection[str] = (),
) -> list[CheckResult]:
    """Apply the series to a scratch index on the pin; report per patch. Touches nothing."""
    results: list[CheckResult] = []
    with scratch_index(repo, m.commit) as env:
        blocked: str | None = None
        for entry, data, p in zip(m.series, datas, parsed, strict=True):
            if blocked:
                results.append(CheckResult(entry.file, "skipped"))
                continue
            flagged = entry.file in changed  # edited files: their old trees do not apply
            proc = git(repo, "apply", "--cached", "-", input=data, env=env, text=False, check=False)
            if proc.returncode != 0:
                conflicts = tuple(conflicting_hunks(repo, p, env))
                results.append(
                    CheckResult(entry.file, "conflict", None, conflicts, entry.tree, flagged)
                )
                blocked = entry.file
                continue
            tree = out(repo, "write-tree", env=env)
            if compare_trees and not flagged and entry.tree is not None and tree != entry.tree:
                results.append(CheckResult(entry.file, "tree-mismatch", tree, (), entry.tree))
                blocked = entry.file
                continue
            results.append(CheckResult(entry.file, "applies", tree, (), entry.tree, flagged))
    return results


def expected_trees(
    repo: Path,
    m: UpstreamManifest,
    datas: Sequence[bytes],
    parsed: Sequence[patchfile.ParsedPatch],
    *,
    use_manifest: bool = True,
) -> list[str] | None:
    """Per-patch trees: from the manifest, else computed on a scratch index (None: conflict)."""
    trees = known_trees(m) if use_manifest else None
    if trees is not None:
        return trees
    results = check_series(repo, m, datas, parsed, compare_trees=use_manifest)
    if any(r.status != "applies" for r in results):
        return None
    return [r.tree for r in results if r.tree is not None]


# ----------------------------------------------------------------------------- applying


def _checkout_pin(src: Path, pin: str) -> None:
    git(src, "checkout", "--quiet", "--detach", "--force", pin)


@contextmanager
def _journal(src: Path, pin: str) -> Iterator[None]:
    """Mark the work tree as "being patched" so a killed run is rolled back, not blamed
    on the user: the next run finds the journal, aborts the am and returns to the pin."""
    path = git_dir(src) / PATCH_JOURNAL
    path.write_text(pin + "\n")
    try:
        yield
    except ForgeError:
        path.unlink()  # handled failures put the work tree back at the pin first
        raise
    path.unlink()


def recover_interrupted(src: Path) -> bool:
    """Roll back what a killed `dgr-forge patch` left (an am mid-way); True if it did."""
    path = git_dir(src) / PATCH_JOURNAL
    if not path.exists():
        return False
    pin = path.read_text().strip()
    if (git_dir(src) / "rebase-apply").exists():
        git(src, "am", "--abort", check=False)
    if gitutil.HEX40.fullmatch(pin) and gitutil.has_object(src, pin):
        _checkout_pin(src, pin)
    path.unlink()
    return True


def apply_series(
    src: Path,
    m: UpstreamManifest,
    paths: Sequence[Path],
    parsed: Sequence[patchfile.ParsedPatch],
    *,
    check_trees: bool = True,
) -> str:
    """`git am` the files onto the pin in the (clean) work tree; return the new HEAD.

    On a conflict the am is aborted, the work tree is back at the pin, and NeedsHuman
    names the patch, files and hunks. With `check_trees` each commit's tree must equal the
    manifest's per-patch tree and the last one `patches.result.tree` (else exit 1, back at
    the pin).
    """
    with _journal(src, m.commit):
        if gitutil.rev_parse(src, "HEAD") != m.commit:
            _checkout_pin(src, m.commit)
        if not paths:
            return m.commit
        proc = git(src, *AM_FLAGS, *[str(p) for p in paths], env=FORGE_IDENTITY, check=False)
        if proc.returncode != 0:
            raise _am_failure(src, m, parsed, proc.stdout + proc.stderr)
    chain = list(reversed(read_chain(src, len(paths))))
    if check_trees:
        for entry, commit in zip(m.series, chain, strict=True):
            if entry.tree is not None and commit.tree != entry.tree:
                _checkout_pin(src, m.commit)
                raise OperationFailed(
                    f"{m.patches_dir_rel}/{entry.file}: applied, but the tree is {commit.tree}, "
                    f"the manifest says {entry.tree}",
                    hint="the manifest's trees do not belong to these files; run "
                    "`dgr-forge export` from a workspace that has the intended commits",
                    details={"file": entry.file, "tree": commit.tree, "expected": entry.tree},
                )
        if m.result_tree is not None and chain[-1].tree != m.result_tree:
            _checkout_pin(src, m.commit)
            raise OperationFailed(
                f"the patched tree is {chain[-1].tree}, patches.result.tree says {m.result_tree} "
                f"(after {m.series[-1].file})",
                hint="run `dgr-forge export` to record the series' real result tree",
                details={
                    "file": m.series[-1].file,
                    "tree": chain[-1].tree,
                    "expected": m.result_tree,
                },
            )
    return chain[-1].commit


def _am_failure(
    src: Path, m: UpstreamManifest, parsed: Sequence[patchfile.ParsedPatch], output: str
) -> Exception:
    gd = git_dir(src)
    try:
        index = int((gd / "rebase-apply" / "next").read_text().strip()) - 1
    except (OSError, ValueError):
        index = -1
    conflicts: list[Conflict] = []
    if 0 <= index < len(parsed):
        conflicts = conflicting_hunks(src, parsed[index])  # index == HEAD: previous patches
    git(src, "am", "--abort", check=False)
    _checkout_pin(src, m.commit)
    if not 0 <= index < len(m.series):
        return OperationFailed(f"git am failed: {output.strip()[-2000:]}")
    entry = m.series[index]
    shown = f"{m.patches_dir_rel}/{entry.file}"
    if not conflicts:
        failed = re.findall(r"patch failed: (.+):(\d+)", output)
        conflicts = [Conflict(f, (f"hunk at line {line}",)) for f, line in dict(failed).items()]
    if not conflicts:
        return BadInput(
            f"{shown}: git am refused it: {output.strip()[-1500:]}",
            hint="regenerate the series with `dgr-forge export`",
            details={"file": shown},
        )
    return NeedsHuman(
        f"{shown} does not apply exactly on {m.commit[:12]} (no fuzz, no 3-way merge): "
        + "; ".join(map(str, conflicts)),
        hint="the workspace is back at the pin. The series does not fit this pin: move the "
        "pin with `dgr-forge rebase --onto <sha>` rather than by editing the manifest, or "
        "refresh the patch by hand (`git am` the earlier patches in the workspace, "
        "`git apply --reject` this one, fix, `git commit`, `dgr-forge export`)",
        details={"file": shown, "conflicts": [c.as_dict() for c in conflicts]},
    )


def ensure_patched(
    forge: Forge,
    m: UpstreamManifest,
    out_: Reporter,
    *,
    mirror: str | None = None,
    offline: bool = False,
) -> PatchedTree:
    """Fetch if needed, apply the series, verify; a no-op when it is already applied."""
    with workspace_lock(forge, out_):
        refuse_during_rebase(forge)
        return _ensure_patched(forge, m, out_, mirror=mirror, offline=offline)


def changed_on_disk(m: UpstreamManifest) -> list[str]:
    """Patch files whose bytes no longer match the manifest's sha256."""
    return [e.file for e in m.series if sha256_bytes(read_patch(m, e)) != e.sha256]


def apply_files_as_they_are(
    forge: Forge, m: UpstreamManifest, out_: Reporter, *, offline: bool = False
) -> PatchedTree:
    """Apply the patch files on disk even where they differ from the manifest's hashes
    (export's "I edited a patch file on purpose" path); the manifest's trees are not
    checked, since they describe the old files. Same safety otherwise."""
    with workspace_lock(forge, out_):
        return _ensure_patched(forge, m, out_, mirror=None, offline=offline, trust_files=True)


def _ensure_patched(
    forge: Forge,
    m: UpstreamManifest,
    out_: Reporter,
    *,
    mirror: str | None,
    offline: bool,
    trust_files: bool = False,
) -> PatchedTree:
    datas = [read_patch(m, e) for e in m.series] if trust_files else read_series(m, forge)
    src = forge.src_dir(m.name)
    n = len(m.series)
    trees = None if trust_files else known_trees(m)

    ws = inspect(src, m.commit, n)
    journal = ws.exists and (git_dir(src) / PATCH_JOURNAL).exists()  # a run was killed
    if trees is not None and not journal and is_applied(ws, m.commit, trees, m.result_tree):
        assert ws.head is not None
        result = trees[-1] if trees else (m.tree or gitutil.tree_of(src, m.commit))
        return PatchedTree(src, m.commit, ws.head, result, changed=False)

    parsed = parse_series(m, datas)  # unsafe paths are refused before anything is written
    if ws.exists and (recover_interrupted(src) or (git_dir(src) / CHECKOUT_JOURNAL).exists()):
        out_.info(f"{forge.rel(src)}: finishing an interrupted run")
        ensure_fetched(forge, m, out_, mirror=mirror, offline=offline)
        ws = inspect(src, m.commit, n)
    _refuse_local_edits(ws, forge)
    if ws.base != m.commit:
        # the forge's own commits on another pin (the manifest moved): reproducible, so
        # they are dropped; fetch then moves the clean tree to the new pin
        if ws.exists and ws.head and gitutil.has_object(src, m.commit):
            _checkout_pin(src, m.commit)
        ensure_fetched(forge, m, out_, mirror=mirror, offline=offline)
        ws = inspect(src, m.commit, n)
        _refuse_local_edits(ws, forge)
        if ws.base != m.commit:
            raise OperationFailed(
                f"{forge.rel(src)} is not on the pinned commit {m.commit} after fetching it",
                hint="delete the workspace (it is scratch space) and run `dgr-forge patch` again",
            )

    check_symlinks(m, parsed, symlinks_in(src, m.commit))
    if trees is None:
        computed = expected_trees(src, m, datas, parsed, use_manifest=not trust_files)
        result_tree = None if trust_files else m.result_tree
        if computed is not None and is_applied(ws, m.commit, computed, result_tree):
            assert ws.head is not None
            result = computed[-1] if computed else gitutil.tree_of(src, m.commit)
            return PatchedTree(src, m.commit, ws.head, result, changed=False)

    if n:
        out_.step(f"applying {n} patch{'es' if n != 1 else ''} on {m.commit[:12]}")
    paths = [m.patch_path(e) for e in m.series]
    head = apply_series(src, m, paths, parsed, check_trees=not trust_files)
    return PatchedTree(src, m.commit, head, gitutil.tree_of(src, head), changed=True)


def _refuse_local_edits(ws: Workspace, forge: Forge) -> None:
    shown = forge.rel(ws.src)
    if ws.operation:
        raise NeedsHuman(
            f"{shown}: a {ws.operation} is in progress in the workspace",
            hint="finish it (`dgr-forge rebase --continue`) or abort it (`dgr-forge rebase "
            f"--abort`, or `git -C {shown} am --abort` if an interrupted patch left it)",
            details={"workspace": shown, "operation": ws.operation},
        )
    if ws.dirty:
        listing = ", ".join(line[3:] for line in ws.dirty[:10])
        raise NeedsHuman(
            f"{shown} has uncommitted local edits ({len(ws.dirty)} paths: {listing})",
            hint="commit them (`git commit`) and run `dgr-forge export` to make them patches, "
            "or discard them (`git checkout -- .` / `git clean`)",
            details={"workspace": shown, "dirty": ws.dirty},
        )
    if ws.local_commits:
        raise NeedsHuman(
            f"{shown} has {len(ws.local_commits)} local commit(s) on top of the series "
            f"(HEAD {ws.local_commits[0][:12]})",
            hint="run `dgr-forge export` to turn them into patch files, or drop them "
            f"(`git -C {shown} reset --hard <last forge commit>`)",
            details={"workspace": shown, "local_commits": ws.local_commits},
        )


# ----------------------------------------------------------------------------- check, status


def check_workspace(
    forge: Forge,
    m: UpstreamManifest,
    out_: Reporter,
    *,
    mirror: str | None = None,
    offline: bool = False,
) -> list[CheckResult]:
    """`patch --check`: apply the files as they are on a scratch index; report per patch.

    The workspace's work tree, index and HEAD are not touched (only a missing workspace is
    fetched, to have the pin's objects). Files changed since the manifest are checked as
    they are and flagged; their trees are not compared.
    """
    with workspace_lock(forge, out_):
        src = forge.src_dir(m.name)
        datas = [read_patch(m, e) for e in m.series]
        parsed = parse_series(m, datas)
        if not (src / ".git").exists():
            ensure_fetched(forge, m, out_, mirror=mirror, offline=offline)
        elif not gitutil.has_object(src, m.commit):
            raise BadInput(
                f"{forge.rel(src)} does not have the pinned commit {m.commit[:12]}",
                hint="run `dgr-forge fetch` (it moves the workspace to the pin), then check",
            )
        check_symlinks(m, parsed, symlinks_in(src, m.commit))
        changed = [
            e.file for e, d in zip(m.series, datas, strict=True) if sha256_bytes(d) != e.sha256
        ]
        return check_series(src, m, datas, parsed, changed=changed)


@dataclass(frozen=True)
class PatchState:
    file: str
    state: str  # applied | pending | changed on disk | conflict
    detail: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"file": self.file, "state": self.state, "detail": self.detail}


@dataclass(frozen=True)
class SeriesStatus:
    series: list[PatchState]
    applied: bool  # the whole series, exactly, and no local edits
    uncommitted: list[str]  # porcelain lines
    local_commits: list[str]
    operation: str | None

    def as_dict(self) -> dict[str, object]:
        """The `patches` object of `status --json`."""
        return {
            "series": [s.as_dict() for s in self.series],
            "applied": self.applied,
            "local_edits": {"uncommitted": self.uncommitted, "local_commits": self.local_commits},
            "operation_in_progress": self.operation,
        }


def series_status(forge: Forge, m: UpstreamManifest) -> SeriesStatus:
    """Per-patch state for `status` (read-only, takes no lock, writes nothing)."""
    src = forge.src_dir(m.name)
    datas = [read_patch(m, e) for e in m.series]
    changed = [sha256_bytes(d) != e.sha256 for e, d in zip(m.series, datas, strict=True)]
    ws = inspect(src, m.commit, len(m.series))
    have_pin = ws.exists and gitutil.has_object(src, m.commit)
    checks: list[CheckResult | None] = [None] * len(m.series)
    problem = ""
    if have_pin:
        try:
            parsed = parse_series(m, datas)
            checks = list(check_series(src, m, datas, parsed, compare_trees=False))
        except BadInput as err:
            problem = err.message
    applied_prefix = 0
    if ws.base == m.commit:
        for i, commit in enumerate(ws.series):
            if i >= len(m.series):
                break
            check = checks[i]
            expected = m.series[i].tree or (None if changed[i] or not check else check.tree)
            if commit.tree != expected:
                break
            applied_prefix = i + 1
    states: list[PatchState] = []
    for i, entry in enumerate(m.series):
        check = checks[i]
        if changed[i]:
            note = "; the workspace has the manifest's version" if i < applied_prefix else ""
            states.append(PatchState(entry.file, "changed on disk", "sha256 differs" + note))
        elif i < applied_prefix:
            states.append(PatchState(entry.file, "applied"))
        elif check is not None and check.status == "conflict":
            states.append(PatchState(entry.file, "conflict", "; ".join(map(str, check.conflicts))))
        else:
            states.append(PatchState(entry.file, "pending", problem))
    return SeriesStatus(
        series=states,
        applied=applied_prefix == len(m.series) and not ws.has_local_edits and have_pin,
        uncommitted=ws.dirty,
        local_commits=ws.local_commits,
        operation=ws.operation,
    )
