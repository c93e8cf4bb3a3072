"""Move the patch series to a new upstream commit: a resumable 3-way replay.

The release engineer's flow (DESIGN.md, `rebase`):

    dgr-forge rebase --onto <sha|ref>   # replay; stops with exit 3 on a conflict
    (edit, git add)                     # in the workspace's src/<name>
    dgr-forge rebase --continue         # or: dgr-forge rebase --abort

How it works. The workspace first holds the old pin plus the series (`ensure_patched`),
so every patch is a commit O_i whose parent O_(i-1) is the exact base it was written
against. Each O_i is cherry-picked (`--no-commit`, a real 3-way merge with that base)
onto the new head N_(i-1) and committed with plumbing, with the patch's own author,
date and message and the forge's fixed committer identity: the same inputs give the
same commits. A pick that changes nothing was taken upstream and is dropped; a conflict
stops with the files, the upstream commits that touched them and the next commands.

All progress lives in `<workspace>/rebase.json` (written atomically after every step),
so `--continue` and `--abort` work from a new shell or after a crash. The manifest and
`patches/` are not touched until the whole series has been replayed; then their new
bytes are staged in `<workspace>/rebase/new/` (the old ones in `rebase/old/`) and
written file by file, the manifest last. A crash in that window is finished by
`--continue` or undone by `--abort` from the staged copies.

`DGR_TEST_PAUSE_AT=<step>` is a test-only hook: at the named step (`replay:NNNN`,
`commit:NNNN`, `write`) the process announces itself on stderr and sleeps, so a test
can kill it there. It has no other effect and is not part of the interface.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import sys
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import tomlkit
import tomlkit.items

from dgr_forge.core import gitutil
from dgr_forge.core.errors import BadInput, NeedsHuman, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import atomic_write_bytes, read_json, sha256_bytes, write_json
from dgr_forge.core.gitutil import FORGE_IDENTITY, HEX40, git, out
from dgr_forge.core.lock import workspace_lock
from dgr_forge.core.output import Reporter
from dgr_forge.upstream import export, manifest, manifest_edit
from dgr_forge.upstream.manifest import UpstreamManifest
from dgr_forge.upstream.patches import PATCH_JOURNAL, ensure_patched

STATE_VERSION = 1
OUTCOMES = ("unchanged", "refreshed", "merged", "resolved", "dropped")
OUTCOME_TEXT = {
    "unchanged": "carried unchanged",
    "refreshed": "refreshed (context or offsets moved, content same)",
    "merged": "merged cleanly by 3-way (content adapted, review it)",
    "resolved": "resolved by hand",
    "dropped": "dropped: upstreamed (became empty)",
}
REF_NEW = "refs/dgr/rebase/new"
REF_OLD = "refs/dgr/rebase/old-head"
# files git leaves next to a merge in progress; ours to clean once a step is recorded
_MERGE_LEFTOVERS = ("MERGE_MSG", "AUTO_MERGE", "CHERRY_PICK_HEAD")
# half-finished git operations that must not be tripped over (git dir relative)
_STALE_GIT_STATE = {
    "rebase-apply": "a half-finished `git am` or `git rebase`",
    "rebase-merge": "a half-finished `git rebase`",
    "CHERRY_PICK_HEAD": "a half-finished `git cherry-pick`",
    "MERGE_HEAD": "a half-finished `git merge`",
    "REVERT_HEAD": "a half-finished `git revert`",
    "sequencer": "a half-finished cherry-pick/revert sequence",
}


# ----------------------------------------------------------------------------- state


@dataclass
class PatchStep:
    file: str  # the old series file name
    subject: str
    old_commit: str  # O_i in the workspace (old pin + series)
    new_commit: str | None = None  # N_i; None while pending or when dropped
    outcome: str | None = None  # set when recorded: "picked", "resolved", "dropped"; final at end
    new_file: str | None = None
    upstream_commits: list[dict[str, str]] = field(default_factory=list)  # when it conflicted


@dataclass
class RebaseState:
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
    phase: str = "replay"  # replay | conflict | write
    conflict: dict[str, Any] | None = None
    version: int = STATE_VERSION

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RebaseState:
        steps = [PatchStep(**p) for p in data.pop("patches")]
        return cls(patches=steps, **data)


def state_path(forge: Forge) -> Path:
    return forge.rebase_state


def journal_dir(forge: Forge) -> Path:
    return forge.workspace / "rebase"


def load_state(forge: Forge) -> RebaseState | None:
    path = state_path(forge)
    if not path.exists():
        return None
    try:
        data = read_json(path)
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"state version {data.get('version')!r}")
        return RebaseState.from_json(data)
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise BadInput(
            f"{path}: unreadable rebase state ({err})",
            hint=f"restore the workspace with `dgr-forge fetch --force`, then delete {path}",
        ) from None


def save_state(forge: Forge, state: RebaseState) -> None:
    write_json(state_path(forge), asdict(state))


def _pause(step: str) -> None:
    """Test-only hook (see module doc): stop at a named step so a test can kill us there."""
    if os.environ.get("DGR_TEST_PAUSE_AT") == step:
        sys.stderr.write(f"DGR_TEST_PAUSE_AT: paused at {step}\n")
        sys.stderr.flush()
        time.sleep(3600)


@contextmanager
def _locked(forge: Forge, out_: Reporter) -> Iterator[None]:
    with workspace_lock(forge, out_):
        yield


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
            "report": str(self.report_json) if self.report_json else None,
            "report_markdown": str(self.report_md) if self.report_md else None,
        }


# ----------------------------------------------------------------------------- git helpers


@functools.cache
def git_dir(src: Path) -> Path:
    return Path(out(src, "rev-parse", "--absolute-git-dir"))


def stale_git_state(src: Path) -> list[str]:
    """Half-finished git operations in the workspace repo (left by a crash or by hand)."""
    if not (src / ".git").exists():
        return []
    gdir = git_dir(src)
    found = [f"{gdir / n} ({what})" for n, what in _STALE_GIT_STATE.items() if (gdir / n).exists()]
    if (gdir / "index.lock").exists():
        found.append(f"{gdir / 'index.lock'} (a git command is running, or one crashed)")
    return found


def _refuse_stale(src: Path, out_: Reporter) -> None:
    """Before a rebase starts: a person's half-finished git operation is refused (exit 3);
    what a killed forge run left is cleared: an index.lock (no git runs while we hold the
    workspace lock) and an interrupted `dgr-forge patch` (its own journal rolls it back)."""
    if not (src / ".git").exists():
        return
    gdir = git_dir(src)
    if (gdir / PATCH_JOURNAL).exists():
        return  # ensure_patched recovers it
    lock = gdir / "index.lock"
    if lock.exists():
        out_.warn(f"removing stale {lock} (no git command runs under the workspace lock)")
        lock.unlink()
    stale = stale_git_state(src)
    if stale:
        raise NeedsHuman(
            f"{src}: unfinished git state: " + "; ".join(stale),
            hint=f"if you started it, finish it (e.g. `git -C {src} am --abort` or "
            f"`git -C {src} cherry-pick --abort`); if no git command is running, delete a "
            f"stale index.lock; or reset the workspace with `dgr-forge fetch --force`",
            details={"stale": stale},
        )


def _clear_leftovers(src: Path, out_: Reporter, *, index_lock: bool) -> None:
    gdir = git_dir(src)
    for name in _MERGE_LEFTOVERS:
        (gdir / name).unlink(missing_ok=True)
    lock = gdir / "index.lock"
    if index_lock and lock.exists():
        # we hold the workspace lock and our own step was interrupted: the lock is ours
        out_.warn(f"removing stale {lock} left by the interrupted rebase step")
        lock.unlink()


def _git_bytes(
    src: Path, *args: str, input: bytes | None = None, env: dict[str, str] | None = None
) -> bytes:
    """stdout of a git call as raw bytes (commit messages are bytes, not text)."""
    proc = git(src, *args, input=input, env=env, text=False)
    return cast(bytes, proc.stdout)


def _commit_meta(src: Path, commit: str) -> tuple[dict[str, str], bytes]:
    """Author env (name, email, date) and the raw message bytes of `commit`."""
    raw = _git_bytes(src, "cat-file", "commit", commit)
    header, _, message = raw.partition(b"\n\n")
    env: dict[str, str] = {}
    for line in header.decode("utf-8", "replace").splitlines():
        if line.startswith("author "):
            m = re.match(r"^author (.*) <(.*)> (\d+ [+-]\d{4})$", line)
            if not m:
                raise OperationFailed(f"{commit}: unparseable author line {line!r}")
            env = {
                "GIT_AUTHOR_NAME": m.group(1),
                "GIT_AUTHOR_EMAIL": m.group(2),
                "GIT_AUTHOR_DATE": f"@{m.group(3)}",
                # committer: fixed identity, the patch's own date (reproducible ids)
                "GIT_COMMITTER_DATE": f"@{m.group(3)}",
                **FORGE_IDENTITY,
            }
    if not env:
        raise OperationFailed(f"{commit}: no author line")
    return env, message


def _subject(src: Path, commit: str) -> str:
    return out(src, "log", "-1", "--format=%s", commit)


def _patch_id(src: Path, a: str, b: str) -> str:
    diff = git(src, "diff", "--full-index", a, b).stdout
    proc = git(src, "patch-id", "--stable", input=diff)
    return proc.stdout.split(" ")[0] if proc.stdout else ""


def resolve_rev(url: str, rev: str, src: Path | None) -> str:
    """A full commit id for REV: itself when 40-hex, else the ref as the remote has it."""
    rev = rev.strip()
    if HEX40.match(rev.lower()):
        return rev.lower()
    proc = git(src, "ls-remote", url, rev, check=False, isolated=False)
    if proc.returncode != 0:
        raise OperationFailed(
            f"cannot list refs of {url}: {proc.stderr.strip()}",
            hint="check the URL and network access, or pass the full commit id",
        )
    refs: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        sha, _, name = line.partition("\t")
        refs[name] = sha
    for name in (rev, f"refs/tags/{rev}^{{}}", f"refs/tags/{rev}", f"refs/heads/{rev}"):
        if name in refs:
            return refs[name]
    # ls-remote matches ref tails: take one unambiguous match (peeled tags first)
    peeled = [s for n, s in refs.items() if n.endswith("^{}")]
    candidates = set(peeled) or set(refs.values())
    if len(candidates) == 1:
        return candidates.pop()
    if not refs and re.fullmatch(r"[0-9a-fA-F]{4,39}", rev):
        # not a ref (llama.cpp tags like b4567 look like hex): an abbreviated id
        raise BadInput(
            f"--onto {rev}: no such ref, and abbreviated commit ids are refused "
            "(ambiguous, unverifiable)",
            hint="pass the full 40-hex commit id, or a ref name such as a tag or branch",
        )
    if not refs:
        raise BadInput(
            f"--onto {rev}: no such ref at {url}",
            hint="pass a full 40-hex commit id, or a tag/branch name the upstream has",
        )
    raise BadInput(
        f"--onto {rev}: ambiguous at {url}: " + ", ".join(sorted(refs)),
        hint="pass the full ref name (refs/tags/... or refs/heads/...) or the commit id",
    )


def fetch_commit(src: Path, url: str, commit: str, out_: Reporter) -> None:
    """Make `commit` available in the workspace repo: one commit (shallow) when possible."""
    if gitutil.has_object(src, commit):
        return
    shallow = out(src, "rev-parse", "--is-shallow-repository") == "true"
    depth = ["--depth=1"] if shallow else []
    out_.step(f"fetching {commit[:12]} from {url}")
    proc = git(src, "fetch", "--no-tags", *depth, url, commit, check=False, isolated=False)
    if proc.returncode != 0 or not gitutil.has_object(src, commit):
        # the server does not serve single commits: fetch its branches and tags
        out_.info("the server refused a single-commit fetch; fetching branches and tags")
        git(
            src,
            "fetch",
            "--no-tags",
            *depth,
            url,
            "+refs/heads/*:refs/dgr/rebase/remote/heads/*",
            "+refs/tags/*:refs/dgr/rebase/remote/tags/*",
            isolated=False,
        )
    if not gitutil.has_object(src, f"{commit}^{{commit}}"):
        raise BadInput(
            f"--onto: commit {commit} is not available from {url}",
            hint="check the commit id and that the URL is the repository that has it",
        )


def ensure_history(src: Path, url: str, old: str, new: str) -> bool:
    """Deepen a shallow workspace until old..new is walkable; True when it is."""

    def connected() -> bool:
        return git(src, "merge-base", old, new, check=False).returncode == 0

    if connected():
        return True
    for step in ("--deepen=64", "--deepen=1024", "--unshallow"):
        if out(src, "rev-parse", "--is-shallow-repository") != "true":
            break
        proc = git(src, "fetch", "--no-tags", step, url, new, check=False, isolated=False)
        if proc.returncode != 0:
            return False
        if connected():
            return True
    return connected()


# ----------------------------------------------------------------------------- conflicts


def _ours_ranges(work_file: Path, head_blob: str) -> list[tuple[int, int]]:
    """Line ranges (1-based, in HEAD's version) of the "ours" side of each conflict region.

    The ours-side text of a region is located in HEAD's blob, so the ranges are exact
    even when clean hunks of the same pick shifted lines in the merged work file.
    """
    try:
        merged = work_file.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    head_lines = head_blob.splitlines()
    ranges: list[tuple[int, int]] = []
    region: list[str] | None = None
    in_ours = False
    for line in merged:
        if line.startswith("<<<<<<< "):
            region, in_ours = [], True
        elif line.startswith(("||||||| ", "=======")) and region is not None:
            in_ours = False
        elif line.startswith(">>>>>>> ") and region is not None:
            n = len(region)
            if n:
                for start in range(len(head_lines) - n + 1):
                    if head_lines[start : start + n] == region:
                        ranges.append((start + 1, start + n))
                        break
            region = None
        elif region is not None and in_ours:
            region.append(line)
    return ranges


def upstream_commits_for(
    src: Path, old: str, new: str, head: str, path: str
) -> tuple[list[dict[str, str]], bool]:
    """Upstream commits in old..new that touched `path`: those on the conflicted lines when
    they can be located (`git log -L`), else every one that touched the file.
    Returns (commits, line_level)."""
    upstream = set(out(src, "rev-list", f"{old}..{new}").split())
    by_file = git(src, "log", "--format=%H%x09%s", f"{old}..{new}", "--", path, check=False)
    file_commits = [
        {"commit": c, "subject": s}
        for c, _, s in (ln.partition("\t") for ln in by_file.stdout.splitlines() if ln)
    ]
    blob = git(src, "show", f"{head}:{path}", check=False)
    ranges = _ours_ranges(src / path, blob.stdout) if blob.returncode == 0 else []
    if not ranges:
        return file_commits, False
    seen: list[str] = []
    for a, b in ranges:
        proc = git(
            src, "log", "--format=%x00%H", f"-L{a},{b}:{path}", f"{old}..{head}", check=False
        )
        for line in proc.stdout.splitlines():
            if line.startswith("\x00"):
                sha = line[1:].strip()
                if sha in upstream and sha not in seen:
                    seen.append(sha)
    if not seen:
        return file_commits, False
    subjects = {c["commit"]: c["subject"] for c in file_commits}
    return [{"commit": c, "subject": subjects.get(c, _subject(src, c))} for c in seen], True


def _conflict_error(forge: Forge, state: RebaseState) -> NeedsHuman:
    c = state.conflict or {}
    src = Path(state.src_dir)
    files: list[str] = c.get("files", [])
    step = state.patches[state.next]
    lines = [f"patch {step.file} ({step.subject}) conflicts with {state.new_commit[:12]}:"]
    for f in files:
        lines.append(f"  conflict: {f}")
        for uc in c.get("upstream", {}).get(f, []):
            lines.append(f"    upstream {uc['commit'][:12]} {uc['subject']}")
    if not c.get("upstream"):
        lines.append(
            f"  (the upstream history between {state.old_commit[:12]} and "
            f"{state.new_commit[:12]} could not be fetched: see `git log` there yourself)"
        )
    lines += [
        "next:",
        f"  edit the files in {src} (conflict markers <<<<<<< ======= >>>>>>>),",
        f"  git -C {src} add {' '.join(files)}",
        "  dgr-forge rebase --continue",
        "or give up: dgr-forge rebase --abort",
    ]
    return NeedsHuman(
        "\n".join(lines),
        hint=f"resolve in {src}, `git add` the files, then `dgr-forge rebase --continue` "
        "(or `dgr-forge rebase --abort` to restore everything)",
        details={
            "patch": step.file,
            "subject": step.subject,
            "files": files,
            "upstream_commits": c.get("upstream", {}),
            "src_dir": str(src),
            "next_commands": [
                f"git -C {src} add {' '.join(files)}",
                "dgr-forge rebase --continue",
                "dgr-forge rebase --abort",
            ],
        },
    )


# ----------------------------------------------------------------------------- replay


def _record(src: Path, state: RebaseState, i: int, resolved: bool) -> None:
    """Commit the index as patch i on top of state.head (or drop it when empty)."""
    step = state.patches[i]
    empty = git(src, "diff", "--cached", "--quiet", state.head, check=False).returncode == 0
    if empty:
        step.new_commit, step.outcome = None, "dropped"
    else:
        tree = out(src, "write-tree")
        env, message = _commit_meta(src, step.old_commit)
        commit = _git_bytes(
            src, "commit-tree", tree, "-p", state.head, input=message, env=env
        ).decode()
        commit = commit.strip()
        _pause(f"commit:{step.file[:4]}")
        git(src, "update-ref", "--no-deref", "HEAD", commit)
        step.new_commit, step.outcome = commit, "resolved" if resolved else "picked"
        state.head = commit
    state.next, state.phase, state.conflict = i + 1, "replay", None


def _replay(forge: Forge, state: RebaseState, out_: Reporter) -> None:
    src = Path(state.src_dir)
    while state.next < len(state.patches):
        i = state.next
        step = state.patches[i]
        _pause(f"replay:{step.file[:4]}")
        proc = git(
            src,
            "-c",
            "merge.conflictStyle=diff3",
            "cherry-pick",
            "--no-commit",
            step.old_commit,
            check=False,
        )
        if proc.returncode != 0:
            unmerged = sorted(
                {ln.split("\t", 1)[1] for ln in out(src, "ls-files", "-u").splitlines() if ln}
            )
            if not unmerged:
                raise OperationFailed(
                    f"replaying {step.file} failed: {(proc.stderr or proc.stdout).strip()}",
                    hint="`dgr-forge rebase --abort` restores the workspace",
                )
            out_.info(f"{step.file}: conflict in {', '.join(unmerged)}")
            history = ensure_history(src, state.fetch_url, state.old_commit, state.new_commit)
            upstream: dict[str, list[dict[str, str]]] = {}
            line_level: dict[str, bool] = {}
            if history:
                for f in unmerged:
                    upstream[f], line_level[f] = upstream_commits_for(
                        src, state.old_commit, state.new_commit, state.head, f
                    )
            state.phase = "conflict"
            state.conflict = {"files": unmerged, "upstream": upstream, "line_level": line_level}
            step.upstream_commits = [c for f in unmerged for c in upstream.get(f, [])]
            save_state(forge, state)
            raise _conflict_error(forge, state)
        _record(src, state, i, resolved=False)
        _clear_leftovers(src, out_, index_lock=False)
        verb = "replayed"
        if step.outcome == "dropped":
            step.upstream_commits = _upstreamed_by(src, state, step)
            verb = (
                "dropped (already upstream"
                + "".join(f", {c['commit'][:12]} {c['subject']}" for c in step.upstream_commits[:3])
                + ")"
            )
        out_.info(f"{step.file}: {verb}")
        save_state(forge, state)


def _upstreamed_by(src: Path, state: RebaseState, step: PatchStep) -> list[dict[str, str]]:
    """The upstream commits (old..new pin) that touched a dropped patch's files: where the
    change went, for the report. Empty when the history cannot be fetched."""
    if not ensure_history(src, state.fetch_url, state.old_commit, state.new_commit):
        return []
    files = out(src, "diff-tree", "--no-commit-id", "--name-only", "-r", step.old_commit)
    proc = git(
        src,
        "log",
        "--format=%H%x09%s",
        f"{state.old_commit}..{state.new_commit}",
        "--",
        *files.splitlines(),
        check=False,
    )
    return [
        {"commit": c, "subject": subj}
        for c, _, subj in (ln.partition("\t") for ln in proc.stdout.splitlines() if ln)
    ]


# ----------------------------------------------------------------------------- commands


def in_progress(forge: Forge) -> str | None:
    """A one-line description of a rebase in progress in this workspace, else None.
    Commands that would move the workspace (fetch, patch, build) may refuse on it."""
    state = load_state(forge)
    if state is None:
        return None
    at = state.patches[state.next].file if state.next < len(state.patches) else "the end"
    return (
        f"a rebase from {state.old_commit[:12]} onto {state.new_commit[:12]} is in "
        f"progress ({state.phase} at {at}; state in {state_path(forge)})"
    )


def _reject_in_progress(forge: Forge) -> None:
    state = load_state(forge)
    if state is not None:
        raise NeedsHuman(
            in_progress(forge) or "",
            hint="finish it with `dgr-forge rebase --continue`, or undo it with "
            "`dgr-forge rebase --abort`",
            details={"state": str(state_path(forge)), "phase": state.phase},
        )


def start(
    forge: Forge,
    out_: Reporter,
    onto: str,
    *,
    url: str | None = None,
    mirror: str | None = None,
    offline: bool = False,
) -> RebaseResult:
    with _locked(forge, out_):
        _reject_in_progress(forge)
        m = manifest.load(forge.upstream_manifest, forge.root)
        src = forge.src_dir(m.name)
        _refuse_stale(src, out_)
        new_url = url or m.url
        if offline and not HEX40.match(onto.strip().lower()):
            raise BadInput(
                f"--onto {onto}: --offline cannot resolve a ref name",
                hint="pass the full 40-hex commit id (it must already be in the workspace)",
            )
        commit = resolve_rev(mirror or new_url, onto, src if src.is_dir() else None)
        if commit != onto:
            out_.info(f"--onto {onto} resolves to {commit}: that is what will be pinned")
        if commit == m.commit and new_url == m.url:
            out_.info(f"already pinned at {commit}: nothing to rebase")
            return _noop_result(m)
        if offline and not (src.is_dir() and gitutil.has_object(src, commit)):
            raise BadInput(
                f"--offline: {commit} is not in the workspace",
                hint="run without --offline, or pass --mirror with a reachable mirror",
            )

        patched = ensure_patched(forge, m, out_, mirror=mirror, offline=offline)
        src = patched.src_dir
        old_head = patched.head_commit
        fetch_commit(src, mirror or new_url, commit, out_)
        new_tree = gitutil.tree_of(src, commit)
        old_commits = out(src, "rev-list", "--reverse", f"{m.commit}..{old_head}").split()
        if len(old_commits) != len(m.series):
            raise OperationFailed(
                f"{src}: expected {len(m.series)} patch commits on {m.commit[:12]}, "
                f"found {len(old_commits)}",
                hint="reset the workspace with `dgr-forge fetch --force` and retry",
            )
        subjects = git(src, "log", "--reverse", "--format=%s", f"{m.commit}..{old_head}")
        steps = [
            PatchStep(file=e.file, subject=subject, old_commit=c)
            for e, c, subject in zip(
                m.series, old_commits, subjects.stdout.splitlines(), strict=True
            )
        ]
        git(src, "update-ref", REF_NEW, commit)  # keep the fetched commit from any gc
        git(src, "update-ref", REF_OLD, old_head)
        state = RebaseState(
            upstream=m.name,
            src_dir=str(src),
            old_url=m.url,
            new_url=new_url,
            old_commit=m.commit,
            old_tree=m.tree or gitutil.tree_of(src, m.commit),
            old_head=old_head,
            new_commit=commit,
            new_tree=new_tree,
            onto=onto,
            inputs_sha256=inputs_digest(m),
            fetch_url=mirror or new_url,
            patches=steps,
            head=commit,
        )
        save_state(forge, state)
        out_.step(f"rebasing {len(steps)} patch(es) from {m.commit[:12]} onto {commit[:12]}")
        git(src, "checkout", "-q", "-f", "--detach", commit)
        _replay(forge, state, out_)
        return _finish(forge, state, out_)


def resume(forge: Forge, out_: Reporter) -> RebaseResult:
    """`--continue`: after a resolved conflict, or after a crash at any step."""
    with _locked(forge, out_):
        state = _require_state(forge)
        src = Path(state.src_dir)
        _check_manifest_untouched(forge, state)
        if state.phase == "write":
            out_.info("finishing the interrupted write of the manifest and patches/")
            return _finish(forge, state, out_, staged=True)
        if state.phase == "conflict":
            _take_resolution(forge, state, out_)
        else:
            # interrupted between automatic steps: redo the step from its recorded head
            stale = stale_git_state(src)
            if stale:
                out_.warn("interrupted rebase step left: " + "; ".join(stale))
            _clear_leftovers(src, out_, index_lock=True)
            git(src, "reset", "-q", "--hard", state.head)
        _replay(forge, state, out_)
        return _finish(forge, state, out_)


def _take_resolution(forge: Forge, state: RebaseState, out_: Reporter) -> None:
    src = Path(state.src_dir)
    step = state.patches[state.next]
    gdir = git_dir(src)
    if (gdir / "index.lock").exists():
        raise NeedsHuman(
            f"{gdir / 'index.lock'} exists: a git command is running in {src}, or one crashed",
            hint="wait for it to finish; if none is running, delete the file and retry",
        )
    head = out(src, "rev-parse", "HEAD")
    if head != state.head:
        parent = gitutil.rev_parse(src, "HEAD^")
        if parent != state.head:
            raise NeedsHuman(
                f"{src}: HEAD moved to {head[:12]} during the rebase (expected {state.head[:12]})",
                hint=f"`git -C {src} reset --soft {state.head}` keeps your resolution "
                "staged; then `dgr-forge rebase --continue`",
            )
        # the engineer committed the resolution: take its tree, keep our own commit metadata
        out_.info(f"taking the resolution from your commit {head[:12]}")
        git(src, "reset", "-q", "--soft", state.head)
    unmerged = sorted(
        {ln.split("\t", 1)[1] for ln in out(src, "ls-files", "-u").splitlines() if ln}
    )
    if unmerged:
        raise NeedsHuman(
            f"patch {step.file}: still unresolved: {', '.join(unmerged)}",
            hint=f"edit them in {src}, `git -C {src} add {' '.join(unmerged)}`, then "
            "`dgr-forge rebase --continue`",
            details={"patch": step.file, "files": unmerged},
        )
    files = (state.conflict or {}).get("files", [])
    marked = [f for f in files if _has_markers(src / f)]
    if marked:
        raise NeedsHuman(
            f"patch {step.file}: conflict markers left in {', '.join(marked)}",
            hint="remove the <<<<<<< ======= >>>>>>> blocks, `git add` again, then "
            "`dgr-forge rebase --continue`",
            details={"patch": step.file, "files": marked},
        )
    unstaged = out(src, "diff", "--name-only").split()
    if unstaged:
        raise NeedsHuman(
            f"patch {step.file}: changes not staged: {', '.join(unstaged)}",
            hint=f"`git -C {src} add` what belongs to the resolution (or `git -C {src} "
            "checkout -- <file>` to drop it), then `dgr-forge rebase --continue`",
            details={"patch": step.file, "files": unstaged},
        )
    _record(src, state, state.next, resolved=True)
    _clear_leftovers(src, out_, index_lock=False)
    out_.info(f"{step.file}: resolved by hand")
    save_state(forge, state)


def _has_markers(path: Path) -> bool:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return bool(re.search(r"^(<<<<<<< |>>>>>>> )", text, re.M))


def abort(forge: Forge, out_: Reporter) -> dict[str, Any]:
    """`--abort`: the workspace back at old pin + series; manifest and patches/ as before."""
    with _locked(forge, out_):
        state = _require_state(forge)
        src = Path(state.src_dir)
        if state.phase == "write":
            _restore_journal(forge, out_)
        stale = stale_git_state(src)
        if stale:
            out_.warn("cleaning up: " + "; ".join(stale))
        _clear_leftovers(src, out_, index_lock=True)
        git(src, "reset", "-q", "--hard")
        git(src, "checkout", "-q", "-f", "--detach", state.old_head)
        _drop_refs(src)
        shutil.rmtree(journal_dir(forge), ignore_errors=True)
        state_path(forge).unlink()
        out_.info(
            f"rebase aborted: workspace back at {state.old_commit[:12]} + "
            f"{len(state.patches)} patch(es); manifest and patches/ unchanged"
        )
        return {
            "status": "aborted",
            "old_commit": state.old_commit,
            "new_commit": state.new_commit,
            "head": state.old_head,
        }


def _require_state(forge: Forge) -> RebaseState:
    state = load_state(forge)
    if state is None:
        raise BadInput(
            f"no rebase in progress (no {state_path(forge)})",
            hint="start one with `dgr-forge rebase --onto <commit>`",
        )
    return state


def inputs_digest(m: UpstreamManifest) -> str:
    """One sha256 over the manifest and every patch file: the rebase's inputs."""
    parts = [m.path.read_bytes()]
    if m.patches_dir.is_dir():
        for p in sorted(m.patches_dir.glob("*.patch")):
            parts += [p.name.encode(), sha256_bytes(p.read_bytes()).encode()]
    return sha256_bytes(b"\0".join(parts))


def _check_manifest_untouched(forge: Forge, state: RebaseState) -> None:
    if state.phase == "write":
        return  # our own write is half done; the journal knows both versions
    try:
        m = manifest.load(forge.upstream_manifest, forge.root)
        same = inputs_digest(m) == state.inputs_sha256
    except BadInput:
        same = False
    if not same:
        raise NeedsHuman(
            f"{forge.rel(forge.upstream_manifest)} or the patch files changed since the "
            "rebase started; the rebase would overwrite those edits",
            hint="restore them (e.g. `git checkout -- manifests/ patches/`), or "
            "`dgr-forge rebase --abort` (it leaves your edits alone) and start again",
        )


def _drop_refs(src: Path) -> None:
    for ref in (REF_NEW, REF_OLD):
        git(src, "update-ref", "-d", ref, check=False)
    refs = out(src, "for-each-ref", "--format=%(refname)", "refs/dgr/rebase/remote/")
    for ref in refs.split():
        git(src, "update-ref", "-d", ref, check=False)


# ----------------------------------------------------------------------------- finish


def _noop_result(m: UpstreamManifest) -> RebaseResult:
    return RebaseResult(
        status="noop",
        old_commit=m.commit,
        new_commit=m.commit,
        new_tree=m.tree or "",
        result_tree=m.result_tree,
        patches=[{"file": e.file, "new_file": e.file, "outcome": "unchanged"} for e in m.series],
        report_json=None,
        report_md=None,
    )


def _stage(forge: Forge, state: RebaseState) -> None:
    """Compute the new series and manifest bytes; stage old and new copies in the journal."""
    src = Path(state.src_dir)
    m = manifest.load(forge.upstream_manifest, forge.root)
    # HEAD is state.head here: the replay moved it, a resumed run reset it there
    rendered = export.compute_series(src, state.new_commit)
    export.verify_round_trip(src, state.new_commit, rendered)
    kept = [s for s in state.patches if s.outcome != "dropped"]
    if [p.commit for p in rendered] != [s.new_commit for s in kept]:
        raise OperationFailed(
            f"export saw {len(rendered)} commits over {state.new_commit[:12]}, the replay "
            f"made {len(kept)}",
            hint="`dgr-forge rebase --abort` restores the workspace; then retry",
        )
    for step, p in zip(kept, rendered, strict=True):
        step.new_file = p.file
        if step.outcome == "resolved":
            continue
        old_bytes = m.patch_path(_entry(m, step.file)).read_bytes()
        if p.data == old_bytes:
            step.outcome = "unchanged"
        elif _patch_id(src, f"{step.old_commit}^", step.old_commit) == _patch_id(
            src, f"{p.commit}^", p.commit
        ):
            step.outcome = "refreshed"
        else:
            step.outcome = "merged"
    new_manifest = manifest_text(
        m.path.read_text(encoding="utf-8"),
        [manifest_edit.SeriesEntry(p.file, p.sha256, p.tree) for p in rendered],
        gitutil.tree_of(src, state.head),
        commit=state.new_commit,
        tree=state.new_tree,
        url=state.new_url if state.new_url != m.url else None,
    )
    entries = [(p.file, p.data) for p in rendered]
    jdir = journal_dir(forge)
    shutil.rmtree(jdir, ignore_errors=True)
    (jdir / "old" / "patches").mkdir(parents=True)
    (jdir / "new" / "patches").mkdir(parents=True)
    atomic_write_bytes(jdir / "old" / "manifest.toml", m.path.read_bytes())
    for old in sorted(m.patches_dir.glob("*.patch")):
        atomic_write_bytes(jdir / "old" / "patches" / old.name, old.read_bytes())
    for name, data in entries:
        atomic_write_bytes(jdir / "new" / "patches" / name, data)
    atomic_write_bytes(jdir / "new" / "manifest.toml", new_manifest.encode("utf-8"))


def manifest_text(
    text: str,
    series: list[manifest_edit.SeriesEntry],
    result_tree: str,
    *,
    commit: str,
    tree: str,
    url: str | None,
) -> str:
    """The manifest re-pinned: the patch helper's editor (comments and key order kept),
    plus the upstream URL when `--url` moved it."""
    new = manifest_edit.updated_text(
        text, series, result_tree, upstream_commit=commit, upstream_tree=tree
    )
    if url is None:
        return new
    doc = tomlkit.parse(new)
    upstream = doc["upstream"]
    assert isinstance(upstream, tomlkit.items.Table)
    upstream["url"] = url
    return tomlkit.dumps(doc)


def _entry(m: UpstreamManifest, file: str) -> manifest.PatchEntry:
    return next(e for e in m.series if e.file == file)


def _patches_dir(forge: Forge) -> Path:
    # read from the staged old manifest: the live one may be half-written
    data = tomllib.loads((journal_dir(forge) / "old" / "manifest.toml").read_text("utf-8"))
    rel = data.get("patches", {}).get("dir") or f"patches/{data['upstream']['name']}"
    return forge.root / rel


def _write_side(forge: Forge, side: str, out_: Reporter) -> None:
    """Make patches/ and the manifest equal to the journal's `side` (old or new): patch
    files first, stale ones removed, the manifest last. Idempotent, so a crash is redone."""
    jdir = journal_dir(forge) / side
    pdir = _patches_dir(forge)
    wanted = {p.name: p.read_bytes() for p in (jdir / "patches").glob("*.patch")}
    pdir.mkdir(parents=True, exist_ok=True)
    for name in sorted(wanted):
        target = pdir / name
        if not target.exists() or target.read_bytes() != wanted[name]:
            atomic_write_bytes(target, wanted[name])
    _pause("write")
    for p in sorted(pdir.glob("*.patch")):
        if p.name not in wanted:
            p.unlink()
    data = (jdir / "manifest.toml").read_bytes()
    if forge.upstream_manifest.read_bytes() != data:
        atomic_write_bytes(forge.upstream_manifest, data)


def _restore_journal(forge: Forge, out_: Reporter) -> None:
    out_.info("restoring the manifest and patches/ from the rebase journal")
    _write_side(forge, "old", out_)


def _finish(forge: Forge, state: RebaseState, out_: Reporter, staged: bool = False) -> RebaseResult:
    src = Path(state.src_dir)
    if not staged:
        # the phase turns to "write" only once the journal is complete: from then on a
        # crash is finished (or undone) from the staged copies
        _stage(forge, state)
        state.phase = "write"
        save_state(forge, state)
    _write_side(forge, "new", out_)
    git(src, "checkout", "-q", "-f", "--detach", state.head)
    result_tree = gitutil.tree_of(src, state.head)
    report_json, report_md = write_report(forge, state, result_tree)
    _drop_refs(src)
    shutil.rmtree(journal_dir(forge), ignore_errors=True)
    state_path(forge).unlink()
    rows = _rows(state)
    out_.table(
        f"rebase {state.old_commit[:12]} -> {state.new_commit[:12]}",
        ["patch", "now", "outcome"],
        [(r["file"], r["new_file"] or "-", r["outcome"]) for r in rows],
    )
    out_.info(f"report: {report_md}")
    out_.info(
        f"manifest re-pinned to {state.new_commit}; commit "
        f"{forge.rel(forge.upstream_manifest)} and {forge.rel(_live_patches_dir(forge))}/"
    )
    return RebaseResult(
        status="done",
        old_commit=state.old_commit,
        new_commit=state.new_commit,
        new_tree=state.new_tree,
        result_tree=result_tree,
        patches=rows,
        report_json=report_json,
        report_md=report_md,
    )


def _live_patches_dir(forge: Forge) -> Path:
    return manifest.load(forge.upstream_manifest, forge.root).patches_dir


def _rows(state: RebaseState) -> list[dict[str, Any]]:
    return [
        {
            "file": s.file,
            "new_file": s.new_file,
            "subject": s.subject,
            "outcome": s.outcome,
            "old_commit": s.old_commit,
            "new_commit": s.new_commit,
            "upstream_commits": s.upstream_commits,
        }
        for s in state.patches
    ]


# ----------------------------------------------------------------------------- report


def write_report(forge: Forge, state: RebaseState, result_tree: str) -> tuple[Path, Path]:
    """`reports/rebase-<old12>-<new12>.json` and `.md`: what goes into the pull request."""
    rows = _rows(state)
    counts = {o: sum(1 for r in rows if r["outcome"] == o) for o in OUTCOMES}
    stem = f"rebase-{state.old_commit[:12]}-{state.new_commit[:12]}"
    data = {
        "kind": "dgr-forge/rebase-report",
        "version": 1,
        "upstream": state.upstream,
        "onto": state.onto,
        "old": {"url": state.old_url, "commit": state.old_commit, "tree": state.old_tree},
        "new": {"url": state.new_url, "commit": state.new_commit, "tree": state.new_tree},
        "result_tree": result_tree,
        "counts": counts,
        "patches": rows,
    }
    json_path = forge.reports_dir / f"{stem}.json"
    md_path = forge.reports_dir / f"{stem}.md"
    write_json(json_path, data)
    md = [
        f"### Rebase {state.upstream}: `{state.old_commit[:12]}` → `{state.new_commit[:12]}`",
        "",
        f"- old pin: `{state.old_commit}` ({state.old_url})",
        f"- new pin: `{state.new_commit}` ({state.new_url})"
        + (f", from `{state.onto}`" if state.onto != state.new_commit else ""),
        f"- result tree: `{result_tree}`",
        "- " + ", ".join(f"{n} {o}" for o, n in counts.items() if n),
        "",
        "| patch | now | outcome |",
        "| --- | --- | --- |",
    ]
    for r in rows:
        extra = ""
        if r["upstream_commits"]:
            extra = (
                " (upstream: "
                + ", ".join(f"`{c['commit'][:12]}` {c['subject']}" for c in r["upstream_commits"])
                + ")"
            )
        now = f"`{r['new_file']}`" if r["new_file"] else "—"
        md.append(f"| `{r['file']}` | {now} | {OUTCOME_TEXT[r['outcome']]}{extra} |")
    atomic_write_bytes(md_path, ("\n".join(md) + "\n").encode("utf-8"))
    return json_path, md_path
