"""`patch` on a workspace with commits of its own: new series underneath, own commits kept.

Before HEAD moves, the state (`.git/dgr-replay.json`) and a ref to the old HEAD
(`refs/dgr/replay-orig`) are written (docs/architecture.md, 'The local replay').
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Struct, field

from dgr_forge.core import fault, gitutil
from dgr_forge.core.errors import BadInput, NeedsHuman, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import atomic_write_text
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import Form, d
from dgr_forge.upstream import series_base, workspace
from dgr_forge.upstream.fetch import abort_am
from dgr_forge.upstream.manifest import UpstreamManifest
from dgr_forge.upstream.patches import PatchedTree, ensure_patched
from dgr_forge.upstream.replay import Replay, commit_objects, commit_parents, subject_of
from dgr_forge.upstream.workspace import REPLAY_STATE

_NO_SIGN = ("commit.gpgSign=false",)
# its ids go to git, so nothing but exact ids and a refs/heads/ branch is trusted
_Id = Annotated[str, Meta(pattern=r"^[0-9a-f]{40}\Z")]
_Branch = Annotated[str, Meta(pattern=r"^refs/heads/(?!.*\.\.)[A-Za-z0-9._/-]{1,200}\Z")]


# `.git/dgr-replay.json`, decoded as this type, every key (`load_replay_state`)
class ReplayState(Struct, forbid_unknown_fields=True):
    orig_head: _Id
    orig_ref: _Branch | None  # the branch HEAD was on (None: detached)
    commits: list[_Id]  # a person's commits, oldest first
    position: Annotated[int, Meta(ge=0)] = 0  # the next one to replay (in conflict: stopped)
    # series: applying the new series; replay: cherry-picking
    phase: Literal["series", "replay"] = "series"
    replayed: list[_Id] = field(default_factory=list)  # new ids, in order
    skipped: list[_Id] = field(default_factory=list)  # already in the new series
    stopped_at: _Id | None = None  # HEAD when a conflict stopped the replay (else: killed)
    base_text: str | None = None  # the series record before (restored by --abort)


def _path(src: Path) -> Path:
    return workspace.git_dir(src) / REPLAY_STATE


def load_replay_state(src: Path) -> ReplayState | None:
    try:
        st = msgspec.json.decode((src / ".git" / REPLAY_STATE).read_bytes(), type=ReplayState)
    except (OSError, msgspec.DecodeError):
        return None
    return st if st.position <= len(st.commits) else None


def _save(src: Path, st: ReplayState) -> None:
    atomic_write_text(_path(src), msgspec.json.format(msgspec.json.encode(st)).decode() + "\n")


def _committer_env(src: Path, commit: str) -> dict[str, str]:
    """The commit's own committer: `inspect` tells a person's commit from the forge's."""
    name, email, date = gitutil.out(
        src, "log", "-1", "--format=%cn%x00%ce%x00%cd", "--date=raw", commit, "--"
    ).split("\0")
    return {"GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email, "GIT_COMMITTER_DATE": date}


def update(
    forge: Forge, m: UpstreamManifest, out: Reporter, *, mirror: str | None, offline: bool
) -> Patch:
    """`dgr-forge patch`: the series applied (under a person's commits, replayed on it)."""
    src = forge.src_dir(m.name)
    if (st := _state(forge, src)) is not None:
        if st.stopped_at is not None:
            commit = st.commits[st.position] if st.position < len(st.commits) else st.orig_head
            raise NeedsHuman(
                f"{forge.rel(src)}: a patch replay is in progress (stopped at your commit "
                f"{commit[:12]}, {st.position} of {len(st.commits)} replayed)",
                hint="resolve and `git add` the files, then `dgr-forge patch --continue`; or "
                "`dgr-forge patch --abort` to put the workspace back as it was",
                details={"commit": commit, "workspace": forge.rel(src)},
            )
        # killed before it stopped anywhere: undo it and start over (deterministic)
        out.info(f"{forge.rel(src)}: undoing an interrupted update, then updating again")
        _restore(src, st)
    ws = workspace.inspect(src, m.commit, len(m.series))
    if not ws.exists or ws.dirty or ws.operation or ws.journals or not ws.local_commits:
        # nothing of a person's to carry: the plain path (it refuses edits, exit 3)
        done = ensure_patched(forge, m, out, mirror=mirror, offline=offline, measured=ws)
        return _answer(m, done)
    assert ws.head is not None
    mine = list(reversed(ws.local_commits))
    if series_base.load(src) == series_base.SeriesBase.of(m) and ws.base == m.commit:
        trees = [e.tree for e in m.series]
        have = [c.tree for c in ws.series]
        if have == trees or (None in trees and len(have) == len(trees)):
            out.info(
                f"{forge.rel(src)}: series already applied, {len(mine)} commit(s) of your own "
                "on top (`dgr-forge export` turns them into patches)"
            )
            tree = gitutil.tree_of(src, "HEAD")
            return _answer(m, PatchedTree(src, m.commit, ws.head, tree, False), local=len(mine))
    objects = commit_objects(src, mine)
    for c in mine:
        if len(commit_parents(objects.get(c, b""))) != 1:
            raise NeedsHuman(
                f"{forge.rel(src)}: commit {c[:12]} ({subject_of(src, c)}) is a merge; only a "
                "linear chain of commits can be replayed on the new series",
                hint=f"linearize it (`git -C {forge.rel(src)} rebase` onto the last patch "
                "commit), then run `dgr-forge patch` again",
                details={"commit": c},
            )
    st = ReplayState(
        orig_head=ws.head,
        orig_ref=gitutil.git(src, "symbolic-ref", "-q", "HEAD", check=False).stdout.strip() or None,
        commits=mine,
        base_text=series_base.text_of(src),
    )
    gitutil.git(src, "update-ref", workspace.REPLAY_REF, ws.head)
    _save(src, st)
    fault.point("patch.replay-saved")
    out.info(
        f"{forge.rel(src)}: {len(mine)} commit(s) of your own on top: applying the series "
        "underneath them, then replaying them"
    )
    below = ws.series[-1].commit if ws.series else (ws.base or m.commit)
    try:
        gitutil.git(src, "checkout", "-q", "--detach", "--force", below)
        ensure_patched(forge, m, out, mirror=mirror, offline=offline)
    except BaseException:
        _restore(src, st)
        raise
    st.phase = "replay"
    _save(src, st)
    return _replay_rest(forge, m, src, st, out)


def resume(
    forge: Forge, m: UpstreamManifest, out: Reporter, *, mirror: str | None, offline: bool
) -> Patch:
    """`patch --continue`: commit the resolved conflict, replay the rest."""
    src = forge.src_dir(m.name)
    st = _required(forge, src, "--continue")
    if st.stopped_at is None:  # an update that was killed, not stopped: start it over
        _restore(src, st)
        return update(forge, m, out, mirror=mirror, offline=offline)
    _head, changes, lines, _ignored = workspace.read_status(src)
    if unmerged := [c.path for c in changes if c.change == "unmerged"]:
        raise NeedsHuman(
            f"{forge.rel(src)}: still unmerged: {', '.join(unmerged)}",
            hint="resolve them, `git add` them, then run `dgr-forge patch --continue` "
            "(or `dgr-forge patch --abort`)",
            details={"unmerged": unmerged},
        )
    if unstaged := [line[3:] for line in lines if line[1] not in " ?"]:
        raise NeedsHuman(
            f"{forge.rel(src)}: changes not added: {', '.join(unstaged)}",
            hint="`git add` the resolution (or discard what is not part of it), then run "
            "`dgr-forge patch --continue`",
            details={"unstaged": unstaged},
        )
    commit = st.commits[st.position]
    if (workspace.git_dir(src) / "CHERRY_PICK_HEAD").exists():
        env = {**_committer_env(src, commit), "GIT_EDITOR": "true"}
        proc = gitutil.git(src, "cherry-pick", "--continue", env=env, check=False, config=_NO_SIGN)
        if proc.returncode == 0:
            st.replayed.append(gitutil.out(src, "rev-parse", "HEAD"))
        elif _skipped_empty(src):  # the resolution left nothing of this commit
            st.skipped.append(commit)
        else:
            raise OperationFailed(
                f"git cherry-pick --continue failed: {proc.stderr.strip()[-1500:]}",
                hint="fix what git names, then `dgr-forge patch --continue` again",
            )
        st.position += 1
    elif gitutil.rev_parse(src, "HEAD") != st.stopped_at:
        # the person committed the resolution themselves
        st.replayed.append(gitutil.out(src, "rev-parse", "HEAD"))
        st.position += 1
    st.stopped_at = None
    _save(src, st)
    return _replay_rest(forge, m, src, st, out)


def _replay_rest(
    forge: Forge, m: UpstreamManifest, src: Path, st: ReplayState, out: Reporter
) -> Patch:
    head = gitutil.out(src, "rev-parse", "HEAD")
    while st.position < len(st.commits):
        with Replay(src, st.commits[st.position :], workspace.git_dir(src), stamp="keep") as engine:
            for step in engine.onto(head):
                if step.kind in ("conflict", "worktree"):
                    break
                head = step.commit or head
                _took(src, st, step.commit, out)
        if st.position == len(st.commits):
            break
        # the next commit cherry-picked in the work tree at `head`
        commit = st.commits[st.position]
        if gitutil.rev_parse(src, "HEAD") != head:
            gitutil.git(src, "checkout", "-q", "--detach", "--force", head)
        env = _committer_env(src, commit)
        pick = ("cherry-pick", "--allow-empty-message", commit)
        proc = gitutil.git(src, *pick, env=env, check=False, config=_NO_SIGN)
        if proc.returncode == 0:
            head = gitutil.out(src, "rev-parse", "HEAD")
            _took(src, st, head, out)
            continue
        unmerged = [c.path for c in workspace.read_status(src)[1] if c.change == "unmerged"]
        if not unmerged and _skipped_empty(src):
            _took(src, st, None, out)
            continue
        st.stopped_at = gitutil.rev_parse(src, "HEAD")
        _save(src, st)
        shown = forge.rel(src)
        what = ", ".join(unmerged) if unmerged else proc.stderr.strip()[-500:]
        raise NeedsHuman(
            f"your commit {commit[:12]} ({subject_of(src, commit)}) conflicts with the new "
            f"series in {what} (commit {st.position + 1} of {len(st.commits)} replayed on it)",
            hint=f"resolve the files in {shown}, `git add` them, then run `dgr-forge patch "
            "--continue`; or `dgr-forge patch --abort` to put the workspace back as it was",
            details={"commit": commit, "files": unmerged, "workspace": shown},
        )
    # the work tree follows the replayed commits once (HEAD moves to them: a branch below)
    if gitutil.rev_parse(src, "HEAD") != head:
        gitutil.git(src, "checkout", "-q", "--detach", "--force", head)
    if st.orig_ref:
        # the branch the person was on follows its commits, as after a `git rebase`
        gitutil.git(src, "update-ref", "-m", "dgr-forge patch", st.orig_ref, head)
        gitutil.git(src, "symbolic-ref", "HEAD", st.orig_ref)
    gitutil.git(src, "update-ref", "-d", workspace.REPLAY_REF, check=False)
    _path(src).unlink(missing_ok=True)
    n = len(st.commits) - len(st.skipped)
    out.info(
        f"{forge.rel(src)}: {len(m.series)} patches applied, {n} commit(s) of your own "
        "replayed on top (`dgr-forge export` appends them to the series)"
    )
    return _answer(m, PatchedTree(src, m.commit, head, gitutil.tree_of(src, head), True), st, n)


def _took(src: Path, st: ReplayState, new: str | None, out: Reporter) -> None:
    """The commit at st.position replayed as `new` (None: the new series holds it), saved."""
    commit = st.commits[st.position]
    if new is None:
        out.info(f"{commit[:12]} ({subject_of(src, commit)}): already in the new series")
        st.skipped.append(commit)
    else:
        st.replayed.append(new)
    st.position += 1
    _save(src, st)
    fault.point("patch.replayed", str(st.position))


def _skipped_empty(src: Path) -> bool:
    """A stopped cherry-pick with nothing staged (the series has the change) skipped."""
    picking = (workspace.git_dir(src) / "CHERRY_PICK_HEAD").exists()
    if not picking or gitutil.git(src, "diff", "--cached", "--quiet", check=False).returncode:
        return False
    gitutil.git(src, "cherry-pick", "--skip", check=False, config=_NO_SIGN)
    return True


def _restore(src: Path, st: ReplayState) -> None:
    """Back to the state before the update: HEAD, branch, files, the series record."""
    gd = workspace.git_dir(src)
    workspace.remove_git_leftovers(gd)
    if (gd / "CHERRY_PICK_HEAD").exists() or (gd / "sequencer").exists():
        gitutil.git(src, "cherry-pick", "--quit", check=False)
    if (gd / "rebase-apply").exists():
        abort_am(src)
    shutil.rmtree(gd / "sequencer", ignore_errors=True)
    gitutil.git(src, "checkout", "-q", "--detach", "--force", st.orig_head)
    if st.orig_ref:
        gitutil.git(src, "update-ref", st.orig_ref, st.orig_head)
        gitutil.git(src, "symbolic-ref", "HEAD", st.orig_ref)
    (gd / workspace.PATCH_JOURNAL).unlink(missing_ok=True)
    series_base.restore_text(src, st.base_text)
    gitutil.git(src, "update-ref", "-d", workspace.REPLAY_REF, check=False)
    _path(src).unlink(missing_ok=True)


def _state(forge: Forge, src: Path) -> ReplayState | None:
    """A state the forge cannot act on is removed (it blocks nothing), naming the ref that
    holds the person's commits."""
    st = load_replay_state(src) if (src / ".git").is_dir() else None
    path = src / ".git" / REPLAY_STATE
    if st is not None or not path.exists():
        return st
    try:
        path.unlink(missing_ok=True)
        removed = "removed it"
    except OSError:  # a directory where the file goes: not the forge's to delete
        removed = "remove it"
    held = gitutil.rev_parse(src, workspace.REPLAY_REF)
    where = (
        f"your commits from before the update are at {workspace.REPLAY_REF} ({held[:12]})"
        if held
        else f"no {workspace.REPLAY_REF} is left: your commits are in HEAD's history"
    )
    raise BadInput(
        f"{forge.rel(path)} is not a readable patch replay state; {removed}; {where}",
        hint=f"`git -C {forge.rel(src)} log {workspace.REPLAY_REF}` shows them; "
        f"`git -C {forge.rel(src)} cherry-pick --abort` if one is stopped, then "
        "`dgr-forge patch` again",
        details={"state": forge.rel(path), "ref": workspace.REPLAY_REF},
    )


def _required(forge: Forge, src: Path, flag: str) -> ReplayState:
    if (st := _state(forge, src)) is None:
        raise BadInput(
            f"{forge.rel(src)}: no patch replay in progress: nothing to {flag.lstrip('-')}",
            hint="`dgr-forge patch` starts one when the series moved under commits of your own",
        )
    return st


def replay_rows(src: Path) -> list[tuple[str, str, str]] | None:
    """Each commit of a replay: (commit, subject, replayed/skipped/conflict/pending)."""
    if (st := load_replay_state(src)) is None:
        return None
    rows = []
    for n, c in enumerate(st.commits):
        if n < st.position:
            state = "skipped" if c in st.skipped else "replayed"
        elif n == st.position and st.stopped_at is not None:
            state = "conflict"
        else:
            state = "pending"
        rows.append((c, subject_of(src, c), state))
    return rows


class Patch(Form, kw_only=True):
    """`patch`'s result (its `--json` object)."""

    title = "patch · patch --continue"
    note = "a replay conflict is exit 3 (a failure) with `commit`, `files`, `workspace`"

    upstream: Annotated[str, d("the upstream's name")]
    src_dir: Annotated[Path, d("the workspace's checkout")]
    base_commit: Annotated[str, d("the pin")]
    head_commit: Annotated[str, d("HEAD after the series (and your commits)")]
    result_tree: Annotated[str, d("the tree of the applied series")]
    patches: Annotated[list[str], d("the series' files, in order")]
    changed: Annotated[bool, d("the workspace moved")]
    replayed: Annotated[list[str], d("your commits replayed on a moved series, by their old ids")]
    skipped: Annotated[list[str], d("your commits the new series already held")]
    local_commits: Annotated[int, d("how many of your commits are on top now")]
    seconds: Annotated[float, d("time taken")]


class PatchAbort(Form, kw_only=True):
    """`patch --abort`'s result."""

    title = "patch --abort"

    upstream: Annotated[str, d("the upstream's name")]
    src_dir: Annotated[Path, d("the workspace's checkout")]
    head_commit: Annotated[str, d("the HEAD restored")]


def patch(
    forge: Forge,
    m: UpstreamManifest,
    out: Reporter,
    *,
    mirror: str | None,
    offline: bool,
    resume_: bool = False,
    abort_: bool = False,
) -> Patch | PatchAbort:
    """The `patch` command (`--continue`, `--abort`) under the workspace lock. `--abort`:
    the workspace exactly as before the update."""
    if abort_:
        src = forge.src_dir(m.name)
        st = _required(forge, src, "--abort")
        # nothing made meanwhile is lost
        by = "dgr-forge patch --abort"
        saved = series_base.save_changes(forge, "patch-abort", src, "HEAD", by)
        _restore(src, st)
        out.info(f"{forge.rel(src)}: back at {st.orig_head[:12]} as before the update")
        if saved is not None:
            out.warn(
                f"what you changed during the stop is saved in {saved} "
                f"(`git -C {forge.rel(src)} apply {saved}` brings it back)"
            )
        return PatchAbort(upstream=m.name, src_dir=src, head_commit=st.orig_head)
    started = time.monotonic()
    done = (resume if resume_ else update)(forge, m, out, mirror=mirror, offline=offline)
    done.seconds = round(time.monotonic() - started, 3)
    return done


def _answer(
    m: UpstreamManifest, tree: PatchedTree, st: ReplayState | None = None, local: int = 0
) -> Patch:
    """`patch`'s result: `tree` applied, `st`'s commits replayed (`local` on top now)."""
    return Patch(
        upstream=m.name,
        **msgspec.structs.asdict(tree),
        patches=[e.file for e in m.series],
        replayed=list(st.commits) if st else [],
        skipped=list(st.skipped) if st else [],
        local_commits=local,
        seconds=0.0,
    )
