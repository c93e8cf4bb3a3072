"""The patch series applied on the pin: `git am` without 3-way merge or fuzz, a fixed
committer and each patch's own date, so the same inputs give the same commit ids anywhere;
"already applied" is an exact comparison of the commits' trees with the manifest's
(docs/design.md, "Patch files are canonical"). Crash safety: the run is journaled
(`.git/dgr-patching`); a failed run rolls back to the pin before the journal goes, a
killed one is rolled back by the next run under the workspace lock.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

from msgspec import Struct

from dgr_forge.core import fault, gitutil
from dgr_forge.core.errors import BadInput, NeedsHuman, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.gitutil import FORGE_IDENTITY, git
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import Form, d
from dgr_forge.core.urls import mask_text
from dgr_forge.upstream import patchfile, series, series_base, workspace
from dgr_forge.upstream.fetch import abort_am, fetch_locked
from dgr_forge.upstream.manifest import UpstreamManifest
from dgr_forge.upstream.series import Conflict, read_patch
from dgr_forge.upstream.transfer import resolve_mirror
from dgr_forge.upstream.workspace import FETCH_JOURNAL, git_dir, inspect

AM_FLAGS = (
    "am", "--no-3way", "--keep-non-patch", "--committer-date-is-author-date",
    "--whitespace=nowarn", "--no-scissors", "--no-gpg-sign", "--quiet"
)  # fmt: skip


class PatchedTree(Struct, frozen=True):
    src_dir: Path
    base_commit: str  # the pin
    head_commit: str  # the last patch commit (the pin for an empty series)
    result_tree: str
    changed: bool  # False: it was already applied, nothing moved


def _rollback(src: Path, pin: str) -> str | None:
    """The work tree back at the pin after a failed or killed `git am`; None, else git's
    reason. Under the journal every change is the forge's own."""
    try:
        fault.point("patch.rollback")  # a roll-back that fails, e.g. on a still-full disk
    except OSError as err:
        return str(err)
    if (git_dir(src) / "rebase-apply").exists():
        abort_am(src)
    proc = git(src, "checkout", "--quiet", "--detach", "--force", pin, check=False)
    if proc.returncode == 0:
        proc = git(src, "clean", "-fdq", check=False)  # files a killed apply left
    if proc.returncode != 0 or (git_dir(src) / "rebase-apply").exists():
        return (proc.stderr.strip().splitlines() or ["a git am is still in progress"])[-1]
    return None


@contextmanager
def _journal(src: Path, pin: str) -> Iterator[None]:
    """The work tree marked "being patched": a killed run is rolled back, not blamed on the
    user; the journal goes only once a roll-back worked (else the next run finishes it)."""
    path = git_dir(src) / workspace.PATCH_JOURNAL
    path.write_text(pin + "\n")
    try:
        yield
    except BaseException as err:
        if (reason := _rollback(src, pin)) is None:
            path.unlink(missing_ok=True)
            raise
        raise OperationFailed(
            f"{err}; putting {src} back at the pin failed too: {reason}",
            hint="free disk space (or fix what git names), then run `dgr-forge patch`: it "
            "finishes the roll-back and applies the series",
            details={"rollback_error": reason},
        ) from err
    path.unlink()


def recover_interrupted(src: Path, pin: str) -> bool:
    """Roll back what a killed `dgr-forge patch` left; True if there was anything. Call
    under the workspace lock."""
    if not (path := git_dir(src) / workspace.PATCH_JOURNAL).exists():
        return False
    recorded = path.read_text().strip()
    if gitutil.HEX40.fullmatch(recorded) and gitutil.has_object(src, recorded):
        pin = recorded
    workspace.remove_git_leftovers(git_dir(src))
    if (reason := _rollback(src, pin)) is not None:
        raise OperationFailed(
            f"{src}: rolling back an interrupted `dgr-forge patch` failed: {reason}",
            hint="free disk space (or fix what git names), then run `dgr-forge patch` again",
            details={"rollback_error": reason},
        )
    path.unlink()
    return True


def _check_trees(m: UpstreamManifest, chain: list[workspace.ChainCommit]) -> None:
    for entry, commit in zip(m.series, chain, strict=True):
        if entry.tree is not None and commit.tree != entry.tree:
            raise OperationFailed(
                f"{m.patches_dir_rel}/{entry.file}: applied, but the tree is {commit.tree}, "
                f"the manifest says {entry.tree}",
                hint="the manifest's trees do not belong to these files; run "
                "`dgr-forge export` from a workspace that has the intended commits",
                details={"file": entry.file, "tree": commit.tree, "expected": entry.tree},
            )
    if m.result_tree is not None and chain[-1].tree != m.result_tree:
        raise OperationFailed(
            f"the patched tree is {chain[-1].tree}, patches.result.tree says {m.result_tree} "
            f"(after {m.series[-1].file})",
            hint="run `dgr-forge export` to record the series' real result tree",
            details={"file": m.series[-1].file, "tree": chain[-1].tree, "expected": m.result_tree},
        )


def _am_failure(
    src: Path, m: UpstreamManifest, parsed: Sequence[patchfile.ParsedPatch], output: str
) -> Exception:
    try:  # the patch am stopped at
        index = int((git_dir(src) / "rebase-apply" / "next").read_text().strip()) - 1
    except (OSError, ValueError):
        index = -1
    if not 0 <= index < len(m.series):  # am stopped before any patch (a full disk, say)
        return OperationFailed(
            f"git am failed: {mask_text(output.strip()[-2000:])}",
            hint="fix what git names (free disk space, say), then run `dgr-forge patch` again",
        )
    conflicts = series.conflicting_hunks(src, parsed[index])  # index == HEAD: previous patches
    shown = f"{m.patches_dir_rel}/{m.series[index].file}"
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
        details={"file": shown, "conflicts": list(conflicts)},
    )


def ensure_patched(
    forge: Forge,
    m: UpstreamManifest,
    out_: Reporter,
    *,
    mirror: str | None = None,
    offline: bool = False,
    trust_files: bool = False,
    measured: workspace.Workspace | None = None,
) -> PatchedTree:
    """Fetch if needed, apply the series, verify; a no-op when it is already applied (the
    caller holds the workspace lock). `trust_files`: apply the files on disk even where
    they differ from the manifest (export's "edited on purpose"), its trees unchecked.
    `measured`: the workspace as the caller just inspected it."""
    datas = [read_patch(m, e) for e in m.series] if trust_files else series.read_series(m, forge)
    src = forge.src_dir(m.name)
    n = len(m.series)
    trees = None if trust_files else _known_trees(src, m, datas)

    ws = measured or inspect(src, m.commit, n)  # the no-op: these 2 git calls, nothing else
    done = None if trees is None or ws.journals else _unchanged(m, ws, trees, m.result_tree)
    if done is not None:
        return done

    def refetch() -> workspace.Workspace:
        fetch_locked(forge, m, out_, mirror=resolve_mirror(mirror), offline=offline, force=False)
        return inspect(src, m.commit, n)

    parsed = series.parse_series(m, datas)  # unsafe paths are refused before anything is written
    if ws.exists and (recover_interrupted(src, m.commit) or ws.journals):
        # a fetch that failed (its cause kept in the journal) was not interrupted
        failed = ws.journals == {FETCH_JOURNAL} and workspace.fetch_failure(src) is not None
        said = "the last fetch failed; fetching again" if failed else "finishing an interrupted run"
        out_.info(f"{forge.rel(src)}: {said}")
        ws = refetch()
    _refuse_local_edits(ws, forge)
    if ws.base != m.commit:
        # the forge's own commits on another pin (the manifest moved): reproducible, so
        # they are dropped; fetch then moves the clean tree to the new pin
        if ws.exists and ws.head and gitutil.has_object(src, m.commit):
            git(src, "checkout", "--quiet", "--detach", "--force", m.commit)
        ws = refetch()
        _refuse_local_edits(ws, forge)
        if ws.base != m.commit:
            raise OperationFailed(
                f"{forge.rel(src)} is not on the pinned commit {m.commit} after fetching it",
                hint="delete the workspace (it is scratch space) and run `dgr-forge patch` again",
            )

    series.check_symlinks(m, parsed, src)
    # computed trees can only show the series already applied when the workspace holds as
    # many forge commits as the series has patches (a fresh one at the pin holds none):
    # else `git am` below is the run, and it caches the trees it makes (two git calls a
    # patch saved)
    if trees is None and len(ws.series) == n:  # (then the manifest's trees are not all known)
        rows = series.check_series(src, m, datas, parsed, compare_trees=not trust_files)
        applied = [r.tree for r in rows if r.tree is not None and r.status == "applies"]
        if len(applied) == n:  # else a conflict
            series.cache_trees(src, m.commit, datas, applied)
            done = _unchanged(m, ws, applied, None if trust_files else m.result_tree)
            if done is not None:
                return done

    if n:
        out_.step(f"applying {n} patch{'es' if n != 1 else ''} on {m.commit[:12]}")
    # a conflict is NeedsHuman naming the patch and hunks, a tree not the manifest's exit 1:
    # either way the work tree is back at the pin
    workspace.remove_git_leftovers(git_dir(src))  # a dead run's index.lock must not stop this one
    with _journal(src, m.commit):
        fault.point("patch.journal")
        if ws.head != m.commit:
            git(src, "checkout", "--quiet", "--detach", "--force", m.commit)
        if not n:
            series_base.record(src, series_base.SeriesBase.of(m, ()))
            return PatchedTree(
                src, m.commit, m.commit, gitutil.tree_of(src, m.commit), changed=True
            )
        # one am for the whole series: a process per patch costs ~4x on a large tree (each
        # reloads the index); a kill inside it leaves rebase-apply/, which the journal undoes
        paths = [str(m.patch_path(e)) for e in m.series]
        proc = git(src, *AM_FLAGS, "--", *paths, env=FORGE_IDENTITY, check=False)
        if proc.returncode != 0:
            raise _am_failure(src, m, parsed, proc.stdout + proc.stderr)
        fault.point("patch.applied", m.series[-1].file[:4])
        chain = list(reversed(workspace.read_chain(src, n)))
        if not trust_files:
            _check_trees(m, chain)
        series.cache_trees(src, m.commit, datas, [c.tree for c in chain])
        # inside the journal: a run killed after it, before the record, is rolled back to
        # the pin, never left with commits of the forge's that the record does not name
        series_base.record(src, series_base.SeriesBase.of(m, [c.commit for c in chain]))
        fault.point("patch.verified")
    return PatchedTree(src, m.commit, chain[-1].commit, chain[-1].tree, changed=True)


def _unchanged(
    m: UpstreamManifest, ws: workspace.Workspace, trees: Sequence[str], result_tree: str | None
) -> PatchedTree | None:
    """The workspace as it is, when its forge commits on the pin carry exactly `trees`."""
    if not ws.exists or ws.operation or ws.has_local_edits or ws.base != m.commit:
        return None
    if [c.tree for c in ws.series] != list(trees) or any(len(c.parents) != 1 for c in ws.series):
        return None
    if result_tree is not None and trees and trees[-1] != result_tree:
        return None
    assert ws.head is not None
    result = trees[-1] if trees else (m.tree or gitutil.tree_of(ws.src, m.commit))
    own = [c.commit for c in ws.series]  # verified by their exact trees just now
    series_base.record(ws.src, series_base.SeriesBase.of(m, own))
    return PatchedTree(ws.src, m.commit, ws.head, result, changed=False)


def _known_trees(src: Path, m: UpstreamManifest, datas: Sequence[bytes]) -> list[str] | None:
    """The per-patch trees the manifest records, else the workspace cache's; None unless
    every one is known and agrees with the manifest's."""
    if len(recorded := [e.tree for e in m.series if e.tree is not None]) == len(m.series):
        return recorded
    trees = [t for t in series.cached_trees(src, m.commit, datas) if t is not None]
    agree = all(e.tree in (None, t) for e, t in zip(m.series, trees, strict=False))
    return trees if len(trees) == len(m.series) and agree else None


def _refuse_local_edits(ws: workspace.Workspace, forge: Forge) -> None:
    shown = forge.rel(ws.src)
    if ws.operation:
        # not the forge's (its own `am` is journaled and rolled back; a `dgr-forge rebase`
        # was refused earlier): name the git command that ends this one
        verb = {"git rebase": "rebase", "git merge": "merge", "git cherry-pick": "cherry-pick"}
        abort = f"git -C {shown} {verb.get(ws.operation, 'am')} --abort"
        raise NeedsHuman(
            f"{shown}: a {ws.operation} is in progress in the workspace",
            hint=f"finish it, or abort it (`{abort}`), then run the command again",
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


class PatchCheck(Form, kw_only=True):
    """`patch --check`'s result."""

    title = "patch --check"
    may_fail = True
    note = "exit 1 when one does not apply or a file differs from the manifest"

    upstream: Annotated[str, d("the upstream's name")]
    commit: Annotated[str, d("the pin")]
    applies: Annotated[bool, d("every patch applies and every file matches the manifest")]
    changed_on_disk: Annotated[list[str], d("files whose sha256 differs from the manifest")]
    patches: Annotated[list[series.CheckResult], d("per patch")]

    @property
    def ok(self) -> bool:
        return self.applies and not self.changed_on_disk


def check_workspace(
    forge: Forge,
    m: UpstreamManifest,
    out_: Reporter,
    *,
    mirror: str | None = None,
    offline: bool = False,
) -> PatchCheck:
    """`patch --check` (under the workspace lock): the files as they are, changed ones flagged,
    on a scratch index (only a missing workspace is fetched, for the pin's objects)."""
    src = forge.src_dir(m.name)
    datas = [read_patch(m, e) for e in m.series]
    parsed = series.parse_series(m, datas)
    if not (src / ".git").exists():
        fetch_locked(forge, m, out_, mirror=resolve_mirror(mirror), offline=offline, force=False)
    elif not gitutil.has_object(src, m.commit):
        raise BadInput(
            f"{forge.rel(src)} does not have the pinned commit {m.commit[:12]}",
            hint="run `dgr-forge fetch` (it moves the workspace to the pin), then check",
        )
    series.check_symlinks(m, parsed, src)
    rows = series.check_series(src, m, datas, parsed, tmp_root=forge.tmp_dir)
    applies = all(r.status == "applies" for r in rows)
    flagged = [r.file for r in rows if r.changed_on_disk]
    return PatchCheck(
        upstream=m.name, commit=m.commit, applies=applies, changed_on_disk=flagged, patches=rows
    )
