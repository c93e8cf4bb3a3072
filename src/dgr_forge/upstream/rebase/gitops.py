"""Git plumbing of the rebase around the replay: stale state, resolving and fetching REV,
the range a conflict is explained from, patch ids."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from dgr_forge.core import gitutil
from dgr_forge.core.errors import BadInput, NeedsHuman
from dgr_forge.core.gitutil import HEX40, git, out
from dgr_forge.core.output import Reporter
from dgr_forge.core.urls import mask, mask_text
from dgr_forge.upstream import transfer
from dgr_forge.upstream.rebase.state import MERGE_LEFTOVERS, REF_PREFIX, STALE_GIT_STATE
from dgr_forge.upstream.replay import git_bytes
from dgr_forge.upstream.workspace import PATCH_JOURNAL, git_dir, remove_partial_objects


def stale_git_state(src: Path) -> list[str]:
    """Half-finished git operations in the workspace repo (left by a crash or by hand)."""
    if not (src / ".git").exists():
        return []
    gdir = git_dir(src)
    found = [f"{gdir / n} ({what})" for n, what in STALE_GIT_STATE.items() if (gdir / n).exists()]
    if (gdir / "index.lock").exists():
        found.append(f"{gdir / 'index.lock'} (a git command is running, or one crashed)")
    return found


def refuse_stale(src: Path, out_: Reporter) -> None:
    """Before a rebase starts: a person's half-finished git operation is refused (exit 3);
    what a killed forge run left is cleared: an index.lock (no git runs while we hold the
    workspace lock) and an interrupted `dgr-forge patch` (its own journal rolls it back)."""
    if not (src / ".git").exists():
        return
    gdir = git_dir(src)
    remove_partial_objects(gdir)  # a killed fetch's temporary packs (we hold the lock)
    if (gdir / PATCH_JOURNAL).exists():
        return  # ensure_patched recovers it
    lock = gdir / "index.lock"
    if lock.exists():
        out_.warn(f"removing stale {lock} (no git command runs under the workspace lock)")
        lock.unlink()
    if stale := stale_git_state(src):
        raise NeedsHuman(
            f"{src}: unfinished git state: " + "; ".join(stale),
            hint=f"if you started it, finish it (e.g. `git -C {src} am --abort` or "
            f"`git -C {src} cherry-pick --abort`); if no git command is running, delete a "
            f"stale index.lock; or reset the workspace with `dgr-forge fetch --force`",
            details={"stale": stale},
        )


def clear_leftovers(src: Path, out_: Reporter, *, index_lock: bool) -> None:
    gdir = git_dir(src)
    for name in MERGE_LEFTOVERS:
        (gdir / name).unlink(missing_ok=True)
    lock = gdir / "index.lock"
    if index_lock and lock.exists():
        # we hold the workspace lock and our own step was interrupted: the lock is ours
        out_.warn(f"removing stale {lock} left by the interrupted rebase step")
        lock.unlink()


def patch_ids(src: Path, commits: list[str]) -> dict[str, str]:
    """The stable patch id of each commit's change (an empty change has none: "")."""
    if not commits:
        return {}
    listed = "".join(f"{c}\n" for c in commits).encode()
    diffs = git_bytes(src, "diff-tree", "--stdin", "-p", "--full-index", input=listed)
    text = git_bytes(src, "patch-id", "--stable", input=diffs).decode("ascii", "replace")
    found = {commit: pid for pid, _, commit in (line.partition(" ") for line in text.splitlines())}
    return {commit: found.get(commit, "") for commit in commits}


_ABBREV = re.compile(r"[0-9a-fA-F]{4,39}")
_MAX_REV = 256


def check_rev(rev: str, option: str = "--onto") -> str:
    """`--onto`'s (or `option`'s) value as data: no option nor control character, bounded."""
    rev = rev.strip()
    if (
        not rev
        or rev.startswith("-")
        or len(rev) > _MAX_REV
        or any(ord(c) < 33 or ord(c) == 127 for c in rev)
        or ".." in rev
    ):
        raise BadInput(
            f"{option} {rev[:80]!r}: not a commit id, tag or branch name",
            hint="pass a commit id (full or abbreviated), a tag or a branch of the upstream",
        )
    return rev


def _remote(src: Path | None, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A git call that contacts `url`, under the forge's transport policy (no
    command-running transports; the local one only for a local URL), as `fetch`'s is."""
    # fetch.unpackLimit=1: objects arrive as one pack, published only when complete
    policy = (*gitutil.protocol_policy(url), "fetch.unpackLimit=1")
    return git(src, *args, check=False, isolated=False, config=policy)


def _one(refs: Iterable[tuple[str, str]]) -> str | None:
    """The one id these (name, id) refs name (peeled tags first), else None."""
    listed = list(refs)
    peeled = {sha for name, sha in listed if name.endswith("^{}")}
    candidates = peeled or {sha for _name, sha in listed}
    return candidates.pop() if len(candidates) == 1 else None


def resolve_rev(url: str, rev: str, src: Path | None, option: str = "--onto") -> str | None:
    """REV as the remote names it: a full id (of a commit or of an annotated tag: `rev_parse`
    turns it into the commit), None for an abbreviated id (found locally after a fetch)."""
    if HEX40.match(rev.lower()):
        return rev.lower()
    proc = _remote(src, url, "ls-remote", "--", url, rev)
    if proc.returncode != 0:
        raise transfer.fetch_failed("the refs", url, proc.stderr)
    refs = {name: sha for sha, _, name in (ln.partition("\t") for ln in proc.stdout.splitlines())}
    names = (f"{rev}^{{}}", rev, f"refs/tags/{rev}^{{}}", f"refs/tags/{rev}", f"refs/heads/{rev}")
    # else ls-remote matches ref tails: take one unambiguous match (peeled tags first)
    found = next((refs[n] for n in names if n in refs), None) or _one(refs.items())
    if found is not None:
        return found
    if not refs and _ABBREV.fullmatch(rev):
        return None  # not a ref (llama.cpp tags like b4567 look like hex): an abbreviated id
    if not refs:
        raise BadInput(
            f"{option} {rev}: no such ref at {mask(url)}",
            hint="pass a commit id, or a tag/branch name the upstream has",
        )
    raise BadInput(
        f"{option} {rev}: ambiguous at {mask(url)}: " + ", ".join(sorted(refs)),
        hint="pass the full ref name (refs/tags/... or refs/heads/...) or the commit id",
    )


def pin_commit(
    src: Path, url: str, rev: str, sha: str | None, out_: Reporter, *, since: str | None = None
) -> tuple[str, str]:
    """The commit to pin for `--onto rev` (`sha` from resolve_rev) and its tree, fetched
    (with `since`, the old pin: the range after it as well) and peeled to `^{commit}`."""
    if sha is None and _ABBREV.fullmatch(rev):
        # a branch or tag tip whose id starts with it: what ls-remote lists, no objects move
        proc = _remote(src, url, "ls-remote", "--", url)
        tips = [ln.split("\t", 1) for ln in proc.stdout.splitlines() if "\t" in ln]
        if proc.returncode == 0:
            sha = _one((name, tip) for tip, name in tips if tip.startswith(rev.lower()))
    if sha is not None:
        found = fetch_commit(src, url, sha, out_, since=since)
    else:
        if (commit := gitutil.rev_parse(src, rev)) is None:
            out_.info(f"--onto {rev}: an abbreviated id; fetching the upstream's branches and tags")
            _fetch_all(src, url, f"to find the abbreviated commit id {rev}")
            commit = gitutil.rev_parse(src, rev)
        if commit is None:
            many = git(src, "rev-parse", "--disambiguate=" + rev, check=False).stdout.split()
            raise BadInput(
                f"--onto {rev} (an abbreviated commit id): "
                + (
                    f"ambiguous ({len(many)} objects start with it)"
                    if len(many) > 1
                    else "no commit starting with it is reachable from the branches and tags "
                    f"of {mask(url)}"
                ),
                hint="pass more digits, or the full 40-hex commit id",
            )
        found = gitutil.commit_and_tree(src, commit)
    if found is None:
        raise BadInput(
            f"--onto {rev}: {sha} is not a commit (nor a tag of one)",
            hint="pass a commit id, a tag or a branch",
        )
    return found


def _fetch(src: Path, url: str, refs: Sequence[str], *how: str) -> subprocess.CompletedProcess[str]:
    proc = _remote(src, url, "fetch", "--no-tags", "--no-write-fetch-head", *how, "--", url, *refs)
    if proc.returncode != 0:
        remove_partial_objects(git_dir(src))
    return proc


def _is_shallow(src: Path) -> bool:
    """git's own test (a `shallow` file in the git dir), as `inspect` makes it: no process.
    A linked worktree's is in the common dir, which git itself is asked for."""
    if (src / ".git").is_dir():
        return (src / ".git" / "shallow").exists()
    return out(src, "rev-parse", "--is-shallow-repository") == "true"


def _cut_fetch(
    src: Path,
    url: str,
    refs: Sequence[str],
    since: str | None,
    shallow: bool,
    fallback: tuple[str, ...],
    out_: Reporter | None = None,
) -> subprocess.CompletedProcess[str]:
    """Fetch `refs`; on a shallow workspace cut at `since`'s date (the commits after it come
    in the same transfer), else at depth 1 (it stays shallow). A server that refuses the
    cut is asked again with `fallback`."""
    cut: list[str] = []
    if shallow and since is not None:
        date = git(src, "log", "-1", "--format=%ct", "--end-of-options", since, "--", check=False)
        if date.returncode == 0 and date.stdout.strip().isdigit():
            cut = [f"--shallow-since={date.stdout.strip()}"]
    proc = _fetch(src, url, refs, *(cut or (["--depth=1"] if shallow else [])))
    if proc.returncode != 0 and cut and transfer.diagnose(proc.stderr) in transfer.CAN_RETRY:
        if out_ is not None:
            out_.info("the server refused a --shallow-since fetch; fetching without it")
        proc = _fetch(src, url, refs, *fallback)
    return proc


def _fetch_all(src: Path, url: str, why: str) -> None:
    refs = [f"+refs/{kind}/*:{REF_PREFIX}remote/{kind}/*" for kind in ("heads", "tags")]
    proc = _cut_fetch(src, url, refs, None, _is_shallow(src), ())
    if proc.returncode != 0:
        raise transfer.fetch_failed(f"the branches and tags {why}", url, proc.stderr)


def fetch_commit(
    src: Path, url: str, commit: str, out_: Reporter, *, since: str | None = None
) -> tuple[str, str] | None:
    """`commit` (a tag peeled) and its tree, fetched when not here: one commit where
    possible; with `since` (the old pin) a shallow workspace gets the range after it in
    the same fetch (what explains a conflict or a dropped patch). None when no commit."""
    if gitutil.has_object(src, commit):
        return gitutil.commit_and_tree(src, commit)
    out_.step(f"fetching {commit[:12]} from {mask(url)}")
    proc = _cut_fetch(src, url, [commit], since, _is_shallow(src), ("--depth=1",))
    if proc.returncode == 0 and (found := gitutil.commit_and_tree(src, commit)) is not None:
        return found
    if proc.returncode != 0:
        cause = transfer.diagnose(proc.stderr)
        if cause not in transfer.CAN_RETRY:
            # the server died reading its own objects, or none answered: fetching its
            # branches and tags would fail the same way
            raise transfer.fetch_failed(f"commit {commit[:12]}", url, proc.stderr, cause)
        said = "refused" if cause == "refused" else "failed"
        out_.info(
            f"the server {said} a single-commit fetch ({transfer.last_error(proc.stderr)}); "
            "fetching branches and tags"
        )
    if proc.returncode != 0 or not gitutil.has_object(src, commit):
        _fetch_all(src, url, f"to find {commit[:12]}")
    if (found := gitutil.commit_and_tree(src, commit)) is None:
        raise BadInput(
            f"--onto: commit {commit} is not available from {mask(url)}",
            hint="check the commit id and that the URL is the repository that has it",
        )
    return found


def ensure_history(
    src: Path, url: str, old: str, new: str, out_: Reporter | None = None, *, to: str = ""
) -> bool:
    """Make old..new walkable (`new` fetched by id when not here), fetching that range only;
    True when it is (docs/architecture.md, "The range fetch"). A failed fetch answers
    False, or with `to` (bump's --to) is the error naming it."""

    def connected() -> bool:
        return git(src, "merge-base", old, new, check=False).returncode == 0

    here = gitutil.has_object(src, new)
    if here and connected():
        return True
    shallow = _is_shallow(src)
    if here and not shallow:
        return False  # the whole history is here: they are not related
    # both pins as refs while fetching: each fetch offers them (and what an earlier round
    # brought) as "have", so no round sends again what the workspace holds
    for ref, commit in ((_RANGE_OLD, old), (_RANGE_NEW, new)):
        if gitutil.has_object(src, commit):
            git(src, "update-ref", ref, commit)
    try:
        if out_ is not None:
            out_.step(f"fetching the first-parent history {old[:12]}..{new[:12]} from {mask(url)}")
        proc = _cut_fetch(src, url, [new], old, shallow, (), out_)
        if proc.returncode != 0 and to:
            if transfer.diagnose(proc.stderr) not in transfer.CAN_RETRY:
                raise transfer.fetch_failed(
                    f"{new[:12]} (the range after the pin)", url, proc.stderr
                )
            # the server answered: it has no such commit (or serves none by id)
            said = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
            raise BadInput(
                f"--to {to}: commit not available from {mask(url)}: {mask_text(said)}",
                hint="check the commit id; a server that serves no commit by id needs a tag "
                "or branch name",
                details={"target": to},
            )
        if (walkable := connected()) or not shallow:
            return walkable
        if not here and proc.returncode == 0:  # what arrived is a "have" of the next rounds
            git(src, "update-ref", _RANGE_NEW, new)
        depth = 2 * max(1, int(out(src, "rev-list", "--count", new)))
        for _ in range(_DEPTH_ROUNDS):
            if _fetch(src, url, [new], f"--depth={depth}").returncode != 0:
                break  # a server without shallow support: only everything is left
            if connected():
                return True
            depth *= 2
        if _is_shallow(src):
            _fetch(src, url, [new], "--unshallow")
        return connected()
    finally:
        for ref in (_RANGE_OLD, _RANGE_NEW):
            git(src, "update-ref", "-d", ref, check=False)


# under the rebase's prefix: a run killed mid-fetch leaves them to the rebase's cleanup
_RANGE_OLD, _RANGE_NEW = f"{REF_PREFIX}range-old", f"{REF_PREFIX}range-new"
_DEPTH_ROUNDS = 6  # 2x..64x the range found by date, then everything
