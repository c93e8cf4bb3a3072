"""Put the upstream at exactly the pinned commit in `<workspace>/src/<name>` (DESIGN.md, fetch).

How it works, and why:

* **Fetch only the pin.** `git fetch --depth 1 -- URL <commit>`: protocol v2 servers (and
  v0 servers with `uploadpack.allowAnySHA1InWant`/`allowReachableSHA1InWant`) send just
  that commit's tree. When the server refuses a SHA want, fall back to fetching all
  branches and tags; the pin must then be among them, or the run fails naming it
  (`transfer.py`). URLs are validated data, never options.
* **Verify before touching the work tree.** The commit id and, when pinned, the tree id
  are checked first; a mismatch fails (exit 1) and leaves the workspace as it was.
* **What "already there" means.** HEAD is the pin, or HEAD has the pin as an ancestor
  (the forge's own patch commits on top: whether they are the *right* commits is the
  patch step's exact tree comparison, not fetch's), and the work tree is clean. Then fetch
  is a no-op that needs no network and two git calls (`workspace.inspect`).
* **Never lose an edit.** Tracked or untracked changes (ignored files excepted) are a
  `NeedsHuman` (exit 3) naming the files; `--force` first writes them to a patch under
  `<workspace>/logs/` (a `git diff --binary` through a temporary index, so untracked files
  are in it), then discards them.
* **Crash-safe: a fetch is complete or absent.** Runs are serialized by the workspace
  lock, so any `*.lock`, temporary pack or quarantine file found under `.git` is a dead
  run's leftover and is removed; `git init` happens in a temporary directory renamed into
  place; objects arrive as one pack git publishes only when complete; a transfer is
  journaled (`.git/dgr-fetching`) and a pin found under that journal, or about to be
  checked out without having been fetched now, is used only when its whole tree is
  connected (else fetched again); a checkout is journaled (`.git/dgr-checkout`) so an
  interrupted one is completed rather than mistaken for user edits.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Annotated, cast

from msgspec import Struct
from msgspec.structs import asdict

from dgr_forge.core import fault, gitutil
from dgr_forge.core.errors import NeedsHuman, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import atomic_write_bytes
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import Form, d
from dgr_forge.core.urls import check_url, mask
from dgr_forge.upstream.manifest import UpstreamManifest
from dgr_forge.upstream.series_base import log_path, save_changes
from dgr_forge.upstream.transfer import resolve_mirror as resolve_mirror  # the commands' way in
from dgr_forge.upstream.transfer import transfer
from dgr_forge.upstream.workspace import (
    CHECKOUT_JOURNAL,
    FETCH_JOURNAL,
    FORGE_EMAIL,
    JOURNALS,
    PATCH_JOURNAL,
    PIN_REF,
    READ_ONLY_ENV,
    LocalChange,
    connected,
    inspect,
    pin_tree,
    record_fetch_failure,
    remove_git_leftovers,
)

# a checkout of a whole tree writes its files from parallel workers (one a core): on the
# real llama.cpp tree (3,004 files at the pin) it is most of a fetch's time after the transfer
PARALLEL_CHECKOUT = ("checkout.workers=0",)


class FetchResult(Struct, frozen=True):
    src_dir: Path
    commit: str
    tree: str
    changed: bool
    # how the pin got here: "none" (already there), "local" (objects were present),
    # "shallow" (depth-1 fetch of the pin), "full" (fallback: all branches and tags)
    method: str = "none"
    url: str | None = None
    saved_patch: Path | None = None


class Fetch(Form, kw_only=True):
    """`fetch`'s result (its `--json` object)."""

    title = "fetch"

    upstream: Annotated[str, d("the upstream's name")]
    url: Annotated[str, d("where it was fetched from, masked")]
    src_dir: Annotated[Path, d("the workspace's checkout")]
    commit: Annotated[str, d("the pinned commit, checked out")]
    tree: Annotated[str | None, d("its tree, verified")]
    changed: Annotated[bool, d("the checkout moved")]
    method: Annotated[str, d("how the commit arrived, e.g. `none`, `fetch`, `clone`")]
    shallow: Annotated[bool, d("the checkout is shallow")]
    saved_patch: Annotated[
        Path | None, d("`--force`: where the discarded local changes were saved")
    ]
    build_number: Annotated[
        int | None, d("the upstream's own build number at the pin (null: not countable here)")
    ]
    seconds: Annotated[float, d("time taken")]


def fetch(
    forge: Forge,
    m: UpstreamManifest,
    out: Reporter,
    *,
    mirror: str | None,
    offline: bool,
    force: bool,
) -> Fetch:
    """The `fetch` command under the workspace and root locks: the pin checked out and
    verified (`fetch_locked`), then the upstream's build number recorded in the manifest."""
    from dgr_forge.upstream import build_number

    started = time.monotonic()
    result = fetch_locked(forge, m, out, mirror=mirror, offline=offline, force=force)
    m = build_number.record(forge, m, None if offline else mirror or m.url, out)
    return Fetch(
        upstream=m.name,
        url=mask(result.url or m.url),
        src_dir=result.src_dir,
        commit=result.commit,
        tree=result.tree,
        changed=result.changed,
        method=result.method,
        shallow=(result.src_dir / ".git" / "shallow").exists(),
        saved_patch=result.saved_patch,
        build_number=m.build_number,
        seconds=round(time.monotonic() - started, 3),
    )


def local_commits(src: Path, head: str, pin: str | None) -> list[str]:
    """Commits in HEAD that are neither the upstream's (fetched refs, the pin) nor the forge's:
    someone committed in the workspace. Lines are "<id> <subject>"."""
    args = ["log", "--format=%H%x00%ce%x00%s", head, "--not", "--glob=refs/dgr/*"]
    if pin is not None:
        args.append(pin)
    proc = gitutil.git(src, *args, "--", check=False, env=READ_ONLY_ENV)
    found = []
    for line in proc.stdout.splitlines():
        commit, email, subject = [*line.split("\0"), "", ""][:3]
        if email != FORGE_EMAIL:
            found.append(f"{commit[:12]} {subject}")
    return found


def _tree_mismatch(m: UpstreamManifest, actual: str, url: str | None) -> OperationFailed:
    where = f" fetched from {mask(url)}" if url else ""
    return OperationFailed(
        f"tree mismatch for {m.name} commit {m.commit}{where}: the manifest pins tree "
        f"{m.tree}, the commit has tree {actual}",
        hint=f"check `tree` in {m.path.name}: `git rev-parse {m.commit}^{{tree}}` in a "
        "trusted clone gives the right value; if a mirror served this, the mirror is wrong",
        details={"commit": m.commit, "expected_tree": m.tree, "actual_tree": actual},
    )


def _verify_fetched(src: Path, m: UpstreamManifest, url: str, method: str) -> str:
    """Before the work tree moves: a wrong pin leaves everything as it was. The pin's
    tree."""
    found = gitutil.commit_and_tree(src, m.commit)
    if found is None or found[0] != m.commit:
        raise OperationFailed(
            f"commit {m.commit} not found at {mask(url)}",
            hint="check `commit` in the manifest (is it pushed to that repository?) and the URL",
            details={"commit": m.commit, "url": mask(url)},
        )
    tree = found[1]
    if m.tree is not None and tree != m.tree:
        raise _tree_mismatch(m, tree, url if method != "local" else None)
    return tree


def fetch_locked(
    forge: Forge,
    m: UpstreamManifest,
    out: Reporter,
    *,
    mirror: str | None,
    offline: bool,
    force: bool,
) -> FetchResult:
    """Put `<workspace>/src/<name>` detached at the pinned commit, verified; see the module
    doc. The caller holds the workspace lock and resolved `mirror` (`resolve_mirror`)."""
    check_url(m.url, f"{forge.rel(m.path)}: [upstream] url")  # never reaching git
    src = forge.src_dir(m.name)
    gitdir = src / ".git"
    journal = gitdir / CHECKOUT_JOURNAL

    # The fast path: already verified at the pin (or pin + patch commits), clean: 2 git calls.
    ws = inspect(src, m.commit, len(m.series))
    if ws.exists and not ws.journals and ws.head is not None and not ws.changes:
        tree = ws.tree_of(m.commit)
        if tree is not None and ws.commits_on(m.commit) is not None:
            if m.tree is not None and tree != m.tree:
                raise _tree_mismatch(m, tree, None)
            return FetchResult(src, m.commit, tree, changed=False)

    fresh = not ws.exists
    if fresh:
        _init(src)  # empty: what `ws` says of it holds (no HEAD, no changes, no pin)
    remove_git_leftovers(gitdir)
    journals = {j for j in JOURNALS if (gitdir / j).exists()}
    recovering = bool(journals & {CHECKOUT_JOURNAL, PATCH_JOURNAL})
    if PATCH_JOURNAL in journals and (gitdir / "rebase-apply").exists():
        abort_am(src)
    if not fresh:
        ws = inspect(src, m.commit, len(m.series))

    # refuse before any network traffic; with --force, save and discard only once the pin
    # is fetched and verified (a failed fetch then leaves the edits where they are)
    dirty = bool(ws.changes) and not recovering
    if dirty and not force:
        raise _dirty_error(forge, src, ws.changes)
    tree_here = pin_tree(ws, m.commit)
    moving = ws.head is None or ws.commits_on(m.commit) is None
    commits: list[str] = []
    if moving and ws.head is not None and not recovering:
        commits = local_commits(src, ws.head, m.commit if tree_here else None)
        if commits and not force:
            raise _local_commits_error(forge, src, commits)
    # a pin that is about to be checked out without having been fetched now, or that a
    # killed transfer left, counts only with its whole tree (else it is fetched again)
    unsure = moving or recovering or FETCH_JOURNAL in journals
    pin_here = tree_here is not None and (not unsure or connected(src, m.commit))

    url = mirror or m.url
    method = "local"
    if not pin_here:
        if offline:
            raise OperationFailed(
                f"commit {m.commit} is not in the workspace ({forge.rel(src)}) and --offline "
                "forbids fetching it",
                hint="run `dgr-forge fetch` once with network access, or fetch from a local "
                "copy with --mirror PATH (or DGR_MIRROR), e.g. a `git clone --mirror` carried "
                "to this host",
                details={"commit": m.commit},
            )
        (gitdir / FETCH_JOURNAL).write_text(m.commit + "\n")
        fault.point("fetch.journal")
        try:
            method = transfer(src, url, m.commit, out, m.name)
            fault.point("fetch.objects")
            tree = _verify_fetched(src, m, url, method)
        except Exception as err:  # a failure, not a kill: `status` tells its cause
            record_fetch_failure(gitdir, m.commit, str(err))
            raise
    else:
        tree = _verify_fetched(src, m, url, method)
    (gitdir / FETCH_JOURNAL).unlink(missing_ok=True)  # complete: git checked connectivity
    fault.point("fetch.verified")

    saved: Path | None = None
    if dirty:
        saved = save_changes(
            forge, f"fetch-saved-{m.name}", src, ws.head, "dgr-forge fetch --force"
        )
        out.info(f"saved local changes of {forge.rel(src)} to {saved}")
        out.info(f"  re-apply them with: git -C {src} apply {saved}")
        discard_changes(src, ws.head)
    if commits:
        assert ws.head is not None
        pin = [m.commit] if tree_here else []
        saved_commits = save_commits(forge, f"fetch-saved-commits-{m.name}", src, ws.head, pin)
        out.info(f"saved the workspace's own commits to {saved_commits}")
        out.info(f"  re-apply them with: git -C {src} am {saved_commits}")

    # a clean HEAD at the pin + patch commits (clean again after --force) stays as it is
    if recovering or moving:
        _checkout(src, m.commit, journal)
        (gitdir / PATCH_JOURNAL).unlink(missing_ok=True)
    else:
        gitutil.git(src, "update-ref", PIN_REF, m.commit)
    if method in ("shallow", "full"):
        out.info(f"{m.name} at {m.commit} (tree {tree}) verified")
    return FetchResult(src, m.commit, tree, changed=True, method=method, url=url, saved_patch=saved)


def abort_am(src: Path) -> None:
    """Undo a `git am` the forge left half-done; `am --quit` when `--abort` cannot (e.g. it
    failed on a full disk and the index no longer matches): the caller checks out the pin."""
    if gitutil.git(src, "am", "--abort", check=False).returncode != 0:
        gitutil.git(src, "am", "--quit", check=False)
        shutil.rmtree(src / ".git" / "rebase-apply", ignore_errors=True)


def _dirty_error(forge: Forge, src: Path, changes: list[LocalChange]) -> NeedsHuman:
    shown = ", ".join(f"{c.path} ({c.change})" for c in changes[:10])
    more = f" and {len(changes) - 10} more" if len(changes) > 10 else ""
    return NeedsHuman(
        f"the workspace {forge.rel(src)} has local changes: {shown}{more}",
        hint="keep them (e.g. `git -C "
        f"{src} diff > my.patch`, or turn them into a patch in the series), or re-run with "
        f"--force to save them as a patch under {forge.rel(forge.logs_dir)} and continue",
        details={"local_changes": [asdict(c) for c in changes]},
    )


def _local_commits_error(forge: Forge, src: Path, commits: list[str]) -> NeedsHuman:
    shown = "; ".join(commits[:5]) + (f" and {len(commits) - 5} more" if len(commits) > 5 else "")
    return NeedsHuman(
        f"the workspace {forge.rel(src)} has commits of its own on top of the upstream: {shown}",
        hint=f"keep them (e.g. `git -C {src} format-patch` them, or turn them into patches in "
        "the series), or re-run with --force to save them as an mbox under "
        f"{forge.rel(forge.logs_dir)} and continue",
        details={"local_commits": commits},
    )


def save_commits(forge: Forge, stem: str, src: Path, head: str, exclude: list[str]) -> Path:
    """Commits on `head` that are neither under refs/dgr/* nor `exclude`, as one mbox in
    logs/ (`git am` re-applies them); its path. Shared with the worker checkout."""
    args = ["format-patch", "--stdout", "--binary", "--no-signature", head, "--not"]
    args += ["--glob=refs/dgr/*", *exclude, "--"]
    proc = gitutil.git(src, *args, text=False)
    target = log_path(forge, stem, ".mbox")
    atomic_write_bytes(target, cast(bytes, proc.stdout))
    return target


def _init(src: Path) -> None:
    """A fresh repository, made in a temporary directory and renamed into place."""
    if src.exists():
        leftovers = [p for p in src.iterdir() if p.name != ".git"]
        if leftovers:
            raise NeedsHuman(
                f"{src} exists but is not a git work tree (it holds {leftovers[0].name}"
                f"{' and more' if len(leftovers) > 1 else ''})",
                hint=f"move it away or delete it (the workspace is scratch space): rm -rf {src}",
                details={"src_dir": str(src)},
            )
        shutil.rmtree(src)  # an empty dir or a half-made .git from an interrupted init
    src.parent.mkdir(parents=True, exist_ok=True)
    for stale in src.parent.glob(f".{src.name}.init-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = src.parent / f".{src.name}.init-{os.getpid()}"
    gitutil.git(None, "init", "-q", str(tmp))
    os.replace(tmp, src)


def discard_changes(src: Path, head: str | None) -> None:
    if head is not None:
        gitutil.git(src, "reset", "-q", "--hard", head)
    else:
        (src / ".git" / "index").unlink(missing_ok=True)
    gitutil.git(src, "clean", "-fdq")


def _checkout(src: Path, commit: str, journal: Path) -> None:
    """Detach HEAD at `commit`, journaled so a killed checkout is finished next time."""
    journal.write_text(commit + "\n")
    fault.point("fetch.checkout")
    gitutil.git(src, "checkout", "-q", "-f", "--detach", commit, config=PARALLEL_CHECKOUT)
    fault.point("fetch.checked-out")
    # the ref first: a crash after the journal is gone must leave the pin marked as upstream
    gitutil.git(src, "update-ref", PIN_REF, commit)
    journal.unlink()
