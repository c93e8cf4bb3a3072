"""Put the upstream at exactly the pinned commit in `<workspace>/src/<name>` (DESIGN.md, fetch).

How it works, and why:

* **Fetch only the pin.** `git fetch --depth 1 URL <commit>`: protocol v2 servers (and v0
  servers with `uploadpack.allowAnySHA1InWant`/`allowReachableSHA1InWant`) send just that
  commit's tree. When the server refuses a SHA want, fall back to fetching all branches
  and tags; the pin must then be among them, or the run fails naming it.
* **Verify before touching the work tree.** The commit id and, when pinned, the tree id
  are checked first; a mismatch fails (exit 1) and leaves the workspace as it was.
* **What "already there" means.** HEAD is the pin, or HEAD has the pin as an ancestor
  (the forge's own patch commits on top: whether they are the *right* commits is the
  patch step's exact tree comparison, not fetch's), and the work tree is clean. Then fetch
  is a no-op that needs no network and two git calls.
* **Never lose an edit.** Tracked or untracked changes (ignored files excepted) are a
  `NeedsHuman` (exit 3) naming the files; `--force` first writes them to a patch under
  `<workspace>/logs/` (a `git diff --binary` through a temporary index, so untracked files
  are in it), then discards them.
* **Crash-safe.** Runs are serialized by the workspace lock, so any `*.lock`, temporary
  pack or quarantine file found under `.git` is a dead run's leftover and is removed;
  `git init` happens in a temporary directory renamed into place; a checkout is journaled
  (`.git/dgr-checkout`) so an interrupted one is completed rather than mistaken for user
  edits. Git itself writes objects, refs, the index and `shallow` atomically.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlparse

from dgr_forge.core import gitutil
from dgr_forge.core.errors import NeedsHuman, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import atomic_write_bytes
from dgr_forge.core.lock import workspace_lock
from dgr_forge.core.output import ProgressSink, Reporter
from dgr_forge.upstream.manifest import UpstreamManifest

PIN_REF = "refs/dgr/pin"
# where the full-fetch fallback keeps the upstream's branches and tags
UPSTREAM_REFS = ("+refs/heads/*:refs/dgr/upstream/heads/*", "+refs/tags/*:refs/dgr/upstream/tags/*")
CHECKOUT_JOURNAL = "dgr-checkout"
# the patch step's journal (patches.PATCH_JOURNAL): a `git am` was killed mid-series; its
# half-applied work tree is the forge's, not the user's, and is rolled back to the pin
PATCH_JOURNAL = "dgr-patching"
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
# read-only git calls must not take index.lock (status would otherwise refresh the index)
READ_ONLY_ENV = {"GIT_OPTIONAL_LOCKS": "0"}


@dataclass(frozen=True)
class FetchResult:
    src_dir: Path
    commit: str
    tree: str
    changed: bool
    # how the pin got here: "none" (already there), "local" (objects were present),
    # "shallow" (depth-1 fetch of the pin), "full" (fallback: all branches and tags)
    method: str = "none"
    url: str | None = None
    saved_patch: Path | None = None


@dataclass(frozen=True)
class LocalChange:
    path: str
    change: str  # modified, added, deleted, renamed, type-changed, untracked, unmerged


@dataclass
class _Worktree:
    head: str | None  # None: unborn HEAD (initialised, nothing checked out yet)
    changes: list[LocalChange]


# ----------------------------------------------------------------------------- inspection


def _is_repo(src: Path) -> bool:
    return (src / ".git" / "HEAD").is_file() and (src / ".git" / "objects").is_dir()


_XY = {
    "M": "modified",
    "A": "added",
    "D": "deleted",
    "R": "renamed",
    "C": "added",
    "T": "type-changed",
}


def _inspect(src: Path) -> _Worktree:
    """HEAD and local changes in one git call (porcelain v2 carries the HEAD id)."""
    proc = gitutil.git(
        src,
        "status",
        "--porcelain=v2",
        "--branch",
        "-z",
        "--untracked-files=all",
        "--ignore-submodules=none",
        env=READ_ONLY_ENV,
    )
    head: str | None = None
    changes: list[LocalChange] = []
    fields = proc.stdout.split("\0")
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if entry.startswith("# branch.oid "):
            oid = entry.split(" ", 2)[2]
            head = oid if gitutil.HEX40.fullmatch(oid) else None
        elif entry.startswith("1 "):
            parts = entry.split(" ", 8)
            xy = parts[1].replace(".", "")
            changes.append(LocalChange(parts[8], _XY.get(xy[-1:], "modified")))
        elif entry.startswith("2 "):
            parts = entry.split(" ", 9)
            changes.append(LocalChange(parts[9], "renamed"))
            i += 1  # the original path follows in its own field
        elif entry.startswith("u "):
            changes.append(LocalChange(entry.split(" ", 10)[10], "unmerged"))
        elif entry.startswith("? "):
            changes.append(LocalChange(entry[2:], "untracked"))
    return _Worktree(head=head, changes=changes)


def _commit_tree(src: Path, commit: str) -> str | None:
    """Tree of `commit` when the commit is present here, else None."""
    proc = gitutil.git(
        src,
        "rev-parse",
        "--verify",
        "--quiet",
        f"{commit}^{{tree}}",
        check=False,
        env=READ_ONLY_ENV,
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


FORGE_EMAIL = gitutil.FORGE_IDENTITY["GIT_COMMITTER_EMAIL"]


def commits_on_pin(src: Path, head: str, pin: str) -> int | None:
    """How many of the forge's own commits HEAD has on top of the pin (0: HEAD is the pin).

    None when HEAD is anything else: not a descendant, or reached through commits the forge
    did not make. The forge's commits (patch, rebase) are the ones whose committer is
    `gitutil.FORGE_IDENTITY`; they must form a linear chain whose root's parent is the pin.
    Whether they are the *right* patch commits is the patch step's exact tree check.
    """
    if head == pin:
        return 0
    proc = gitutil.git(
        src,
        "log",
        "--topo-order",
        "--format=%H %P%x00%ce",
        f"{pin}..{head}",
        check=False,
        env=READ_ONLY_ENV,
    )
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or not lines:
        return None
    expected = head
    for line in lines:
        ids, _, email = line.partition("\0")
        commit, *parents = ids.split()
        if commit != expected or len(parents) != 1 or email != FORGE_EMAIL:
            return None
        expected = parents[0]
    return len(lines) if expected == pin else None


def local_commits(src: Path, head: str, pin: str | None) -> list[str]:
    """Commits in HEAD that are neither the upstream's (fetched refs, the pin) nor the forge's:
    someone committed in the workspace. Lines are "<id> <subject>"."""
    args = ["log", "--format=%H%x00%ce%x00%s", head, "--not", "--glob=refs/dgr/*"]
    if pin is not None:
        args.append(pin)
    proc = gitutil.git(src, *args, check=False, env=READ_ONLY_ENV)
    found = []
    for line in proc.stdout.splitlines():
        commit, email, subject = [*line.split("\0"), "", ""][:3]
        if email != FORGE_EMAIL:
            found.append(f"{commit[:12]} {subject}")
    return found


def _tree_mismatch(m: UpstreamManifest, actual: str, url: str | None) -> OperationFailed:
    where = f" fetched from {display_url(url)}" if url else ""
    return OperationFailed(
        f"tree mismatch for {m.name} commit {m.commit}{where}: the manifest pins tree "
        f"{m.tree}, the commit has tree {actual}",
        hint=f"check `tree` in {m.path.name}: `git rev-parse {m.commit}^{{tree}}` in a "
        "trusted clone gives the right value; if a mirror served this, the mirror is wrong",
        details={"commit": m.commit, "expected_tree": m.tree, "actual_tree": actual},
    )


# ----------------------------------------------------------------------------- status


@dataclass
class UpstreamStatus:
    """The workspace as `status` shows it; `to_dict()` is the `--json` `upstream` object."""

    name: str
    url: str
    commit: str  # the pin
    tree: str | None  # the pinned tree, when the manifest has one
    src_dir: Path
    present: bool  # the work tree exists and is a git repository
    head: str | None = None
    pin_present: bool = False  # the pinned commit's objects are in the workspace
    at_pin: bool = False  # HEAD is exactly the pin
    commits_on_top: int = 0  # commits between the pin and HEAD (the applied patches)
    commit_verified: bool = False  # HEAD is the pin or descends from it
    pin_tree: str | None = None  # the tree of the pinned commit, as found here
    tree_verified: bool | None = None  # pin_tree == tree (None: no tree pinned)
    shallow: bool = False
    interrupted: bool = False  # a checkout was cut short; the next fetch completes it
    local_changes: list[LocalChange] = field(default_factory=list)
    local_commits: list[str] = field(default_factory=list)  # "<id> <subject>", not the forge's

    @property
    def verified(self) -> bool:
        return (
            self.commit_verified
            and self.tree_verified is not False
            and not self.interrupted
            and not self.local_changes
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["src_dir"] = str(self.src_dir)
        data["verified"] = self.verified
        return data


def workspace_status(forge: Forge, m: UpstreamManifest) -> UpstreamStatus:
    """Read-only look at the upstream work tree (takes no lock, writes nothing)."""
    src = forge.src_dir(m.name)
    st = UpstreamStatus(
        name=m.name, url=m.url, commit=m.commit, tree=m.tree, src_dir=src, present=_is_repo(src)
    )
    if not st.present:
        return st
    wt = _inspect(src)
    st.head = wt.head
    st.local_changes = wt.changes
    st.shallow = (src / ".git" / "shallow").exists()
    st.interrupted = any((src / ".git" / j).exists() for j in (CHECKOUT_JOURNAL, PATCH_JOURNAL))
    st.pin_tree = _commit_tree(src, m.commit)
    st.pin_present = st.pin_tree is not None
    if st.pin_tree is not None and m.tree is not None:
        st.tree_verified = st.pin_tree == m.tree
    if wt.head is not None and st.pin_present:
        st.at_pin = wt.head == m.commit
        on_top = commits_on_pin(src, wt.head, m.commit)
        st.commit_verified = on_top is not None
        st.commits_on_top = on_top or 0
    if wt.head is not None and not st.commit_verified:
        st.local_commits = local_commits(src, wt.head, m.commit if st.pin_present else None)
    return st


# ----------------------------------------------------------------------------- fetch


def resolve_mirror(mirror: str | None) -> str | None:
    """--mirror, else DGR_MIRROR; an existing local path becomes a file:// URL."""
    value = mirror if mirror else os.environ.get("DGR_MIRROR", "").strip() or None
    if value is None:
        return None
    if "://" in value or (re.match(r"^[^/]+:", value) and not Path(value).exists()):
        return value  # a URL, or scp-like user@host:path
    # a path: made absolute here, since git runs inside the work tree
    return Path(value).expanduser().resolve().as_uri()


def refuse_during_rebase(forge: Forge) -> None:
    """A workspace mid-rebase belongs to the rebase: fetch, patch, export and build would
    move or read a half-replayed series (and `fetch --force` would discard a resolution)."""
    if forge.rebase_state.exists():
        raise NeedsHuman(
            f"a rebase is in progress in this workspace (state in {forge.rel(forge.rebase_state)})",
            hint="finish it with `dgr-forge rebase --continue`, or undo it with "
            "`dgr-forge rebase --abort`",
            details={"state": str(forge.rebase_state)},
        )


def ensure_fetched(
    forge: Forge,
    m: UpstreamManifest,
    out: Reporter,
    *,
    mirror: str | None = None,
    offline: bool = False,
    force: bool = False,
) -> FetchResult:
    """Put `<workspace>/src/<name>` detached at the pinned commit, verified; see the module doc."""
    with workspace_lock(forge, out):
        refuse_during_rebase(forge)
        return _ensure(forge, m, out, resolve_mirror(mirror), offline, force)


def _ensure(
    forge: Forge,
    m: UpstreamManifest,
    out: Reporter,
    mirror: str | None,
    offline: bool,
    force: bool,
) -> FetchResult:
    src = forge.src_dir(m.name)
    gitdir = src / ".git"
    journal = gitdir / CHECKOUT_JOURNAL
    patching = gitdir / PATCH_JOURNAL

    # The fast path: already verified at the pin (or pin + patch commits), clean: 2 git calls.
    wt: _Worktree | None = None
    if _is_repo(src) and not journal.exists() and not patching.exists():
        wt = _inspect(src)
        if wt.head is not None and not wt.changes:
            pin_tree = _commit_tree(src, m.commit)
            if pin_tree is not None and commits_on_pin(src, wt.head, m.commit) is not None:
                if m.tree is not None and pin_tree != m.tree:
                    raise _tree_mismatch(m, pin_tree, None)
                return FetchResult(src, m.commit, pin_tree, changed=False)

    if not _is_repo(src):
        _init(src)
        wt = None
    _remove_leftovers(gitdir)
    recovering = journal.exists() or patching.exists()
    if patching.exists() and (gitdir / "rebase-apply").exists():
        gitutil.git(src, "am", "--abort", check=False)
    if wt is None or recovering:
        wt = _inspect(src)

    # refuse before any network traffic; with --force, save and discard only once the pin
    # is fetched and verified (a failed fetch then leaves the edits where they are)
    dirty = bool(wt.changes) and not recovering
    if dirty and not force:
        raise _dirty_error(forge, src, wt.changes)
    pin_here = _commit_tree(src, m.commit) is not None
    moving = wt.head is None or commits_on_pin(src, wt.head, m.commit) is None
    commits: list[str] = []
    if moving and wt.head is not None and not recovering:
        commits = local_commits(src, wt.head, m.commit if pin_here else None)
        if commits and not force:
            raise _local_commits_error(forge, src, commits)

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
        method = _transfer(src, url, m.commit, out, m.name)

    # verify before the work tree moves: a wrong pin leaves everything as it was
    actual = gitutil.rev_parse(src, m.commit)
    if actual != m.commit:
        raise OperationFailed(
            f"commit {m.commit} not found at {display_url(url)}",
            hint="check `commit` in the manifest (is it pushed to that repository?) and the URL",
            details={"commit": m.commit, "url": display_url(url)},
        )
    pin_tree = gitutil.tree_of(src, m.commit)
    if m.tree is not None and pin_tree != m.tree:
        raise _tree_mismatch(m, pin_tree, url if method != "local" else None)

    saved: Path | None = None
    if dirty:
        saved = _save_changes(forge, m, src, wt.head)
        out.info(f"saved local changes of {forge.rel(src)} to {saved}")
        out.info(f"  re-apply them with: git -C {src} apply {saved}")
        _discard_changes(src, wt.head)
    if commits:
        assert wt.head is not None
        saved_commits = _save_commits(forge, m, src, wt.head, m.commit if pin_here else None)
        out.info(f"saved the workspace's own commits to {saved_commits}")
        out.info(f"  re-apply them with: git -C {src} am {saved_commits}")

    # a clean HEAD at the pin + patch commits (clean again after --force) stays as it is
    if recovering or moving:
        _checkout(src, m.commit, journal)
        patching.unlink(missing_ok=True)
    else:
        gitutil.git(src, "update-ref", PIN_REF, m.commit)
    if method in ("shallow", "full"):
        out.info(f"{m.name} at {m.commit} (tree {pin_tree}) verified")
    return FetchResult(
        src, m.commit, pin_tree, changed=True, method=method, url=url, saved_patch=saved
    )


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


def _save_commits(forge: Forge, m: UpstreamManifest, src: Path, head: str, pin: str | None) -> Path:
    """The workspace's own commits as one mbox (`git am` re-applies them)."""
    args = ["format-patch", "--stdout", "--binary", "--no-signature", head, "--not"]
    args += ["--glob=refs/dgr/*", *([pin] if pin else [])]
    proc = gitutil.git(src, *args, text=False)
    target = _log_path(forge, f"fetch-saved-commits-{m.name}", ".mbox")
    atomic_write_bytes(target, cast(bytes, proc.stdout))
    return target


def _log_path(forge: Forge, stem: str, suffix: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    forge.logs_dir.mkdir(parents=True, exist_ok=True)
    target = forge.logs_dir / f"{stem}-{stamp}{suffix}"
    n = 1
    while target.exists():
        n += 1
        target = forge.logs_dir / f"{stem}-{stamp}-{n}{suffix}"
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


def _remove_leftovers(gitdir: Path) -> None:
    """Remove what a killed git leaves behind. Safe: we hold the workspace lock."""
    for entry in gitdir.iterdir():
        if entry.name == "objects":
            continue
        locks = entry.rglob("*.lock") if entry.is_dir() else [entry]
        for lock in locks:
            if lock.name.endswith(".lock"):
                lock.unlink(missing_ok=True)
    objects = gitdir / "objects"
    for tmp in [
        *objects.glob("incoming-*"),
        *objects.glob("pack/tmp_*"),
        *objects.glob("*/tmp_obj_*"),
    ]:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
    for pack in objects.glob("pack/pack-*.pack"):
        if not pack.with_suffix(".idx").exists():  # renamed into place, never indexed
            for sibling in pack.parent.glob(pack.stem + ".*"):
                sibling.unlink(missing_ok=True)
    for keep in objects.glob("pack/pack-*.keep"):
        try:
            if keep.read_text().startswith("fetch-pack"):  # fetch's own, only kept mid-fetch
                keep.unlink()
        except OSError:
            pass


def _save_changes(forge: Forge, m: UpstreamManifest, src: Path, head: str | None) -> Path:
    """Write tracked and untracked changes as one binary patch under logs/; return its path."""
    gitdir = src / ".git"
    tmp_index = gitdir / "dgr-save.index"
    if (gitdir / "index").exists():
        shutil.copyfile(gitdir / "index", tmp_index)
    else:
        tmp_index.unlink(missing_ok=True)
    env = {"GIT_INDEX_FILE": str(tmp_index)}
    try:
        gitutil.git(src, "add", "-A", env=env)
        proc = gitutil.git(
            src,
            "diff",
            "--cached",
            "--binary",
            "--full-index",
            head or EMPTY_TREE,
            env=env,
            text=False,
        )
    finally:
        tmp_index.unlink(missing_ok=True)
    target = _log_path(forge, f"fetch-saved-{m.name}", ".patch")
    header = (
        f"# Local changes of {src}, saved by `dgr-forge fetch --force`.\n"
        f"# Base commit: {head or '(none)'}\n"
        f"# Re-apply on that base: git -C {src} apply {target}\n\n"
    ).encode()
    atomic_write_bytes(target, header + cast(bytes, proc.stdout))
    return target


def _discard_changes(src: Path, head: str | None) -> None:
    if head is not None:
        gitutil.git(src, "reset", "-q", "--hard", head)
    else:
        (src / ".git" / "index").unlink(missing_ok=True)
    gitutil.git(src, "clean", "-fdq")


def _checkout(src: Path, commit: str, journal: Path) -> None:
    """Detach HEAD at `commit`, journaled so a killed checkout is finished next time."""
    journal.write_text(commit + "\n")
    gitutil.git(src, "checkout", "-q", "-f", "--detach", commit)
    # the ref first: a crash after the journal is gone must leave the pin marked as upstream
    gitutil.git(src, "update-ref", PIN_REF, commit)
    journal.unlink()


# ----------------------------------------------------------------------------- transfer

_PROGRESS = re.compile(
    r"^(Receiving objects|Resolving deltas|Unpacking objects):\s+(\d+)% \((\d+)/(\d+)\)(.*)$"
)


# git's words when no server answered at all (as opposed to a server refusing a SHA want)
_UNREACHABLE = (
    "Could not resolve host",
    "Failed to connect",
    "Connection refused",
    "Connection timed out",
    "Network is unreachable",
    "does not appear to be a git repository",
    "Could not read from remote repository",
)


def _transfer(src: Path, url: str, commit: str, out: Reporter, name: str) -> str:
    """Fetch `commit` from `url`: shallow when the server allows it, else everything."""
    out.step(f"fetching {name} {commit[:12]} from {display_url(url)}")
    shallow = _run_fetch(src, out, ["--depth=1", url, commit])
    if shallow.returncode == 0:
        return "shallow"
    if any(marker in shallow.stderr for marker in _UNREACHABLE):
        full = shallow  # no server answered: a full fetch would fail the same way
    else:
        out.info(
            "the server refused a depth-1 fetch of the commit "
            f"({_last_error(shallow.stderr)}); fetching all branches and tags instead"
        )
        args = [url, *UPSTREAM_REFS]
        if (src / ".git" / "shallow").exists():
            args.insert(0, "--unshallow")
        full = _run_fetch(src, out, args)
    if full.returncode != 0:
        raise OperationFailed(
            f"fetching {name} from {display_url(url)} failed: {_last_error(full.stderr)}",
            hint="check the URL and network access; on an air-gapped host fetch from a local "
            "copy with --mirror PATH (or DGR_MIRROR)",
            details={"url": display_url(url), "git_stderr": full.stderr[-4000:]},
        )
    if gitutil.rev_parse(src, commit) != commit:
        raise OperationFailed(
            f"commit {commit} not found at {display_url(url)}",
            hint="check `commit` in the manifest (is it pushed to that repository's branches "
            "or tags?) and the URL",
            details={"commit": commit, "url": display_url(url)},
        )
    return "full"


def display_url(url: str) -> str:
    """The URL without credentials (an http user part is often a token), for messages."""
    parsed = urlparse(url)
    if parsed.scheme in ("http", "https") and "@" in parsed.netloc:
        return parsed._replace(netloc="***@" + parsed.netloc.rsplit("@", 1)[1]).geturl()
    return url


def _last_error(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
    return (errors or lines or ["no output"])[-1]


@dataclass
class _FetchRun:
    returncode: int
    stderr: str


def _run_fetch(src: Path, out: Reporter, args: list[str]) -> _FetchRun:
    """`git fetch --progress ...`, its progress lines turned into Reporter progress."""
    cmd = ["git"]
    for setting in gitutil.CONFIG:
        cmd += ["-c", setting]
    cmd += ["fetch", "--no-tags", "--no-write-fetch-head", "--progress", *args]
    # network calls keep the user's git config: credentials, proxies, insteadOf mirrors
    env = gitutil.base_env(isolated=False)
    kept: list[str] = []
    started = time.monotonic()
    with (
        out.progress(transfer=False) as sink,
        subprocess.Popen(
            cmd,
            cwd=src,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        ) as proc,
    ):
        assert proc.stderr is not None
        tasks: dict[str, Any] = {}
        buf = b""
        while True:
            chunk = os.read(proc.stderr.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            *lines, buf = re.split(rb"[\r\n]", buf)
            for raw in lines:
                _progress_line(raw.decode(errors="replace").strip(), sink, tasks, kept)
        if buf:
            _progress_line(buf.decode(errors="replace").strip(), sink, tasks, kept)
        rc = proc.wait()
    if rc == 0 and tasks:
        size = tasks.get("size")
        amount = f"{size.split(' |')[0]} " if size else ""
        out.info(f"fetched {amount}in {time.monotonic() - started:.1f} s")
    return _FetchRun(rc, "\n".join(kept[-50:]))


def _progress_line(line: str, sink: ProgressSink, tasks: dict[str, Any], kept: list[str]) -> None:
    if not line:
        return
    match = _PROGRESS.match(line)
    if match is None:
        if not line.startswith("remote: ") or "error" in line.lower():
            kept.append(line)
        return
    phase, _pct, done, total, rest = match.groups()
    detail = rest.split(", done")[0].strip(", ")
    if phase == "Receiving objects" and detail:
        tasks["size"] = detail  # "12.5 MiB | 3.1 MiB/s": the last one is the total
    description = f"{phase.lower()}" + (f" ({detail})" if detail else "")
    if phase not in tasks:
        tasks[phase] = sink.add(phase.lower(), total=float(total))
    sink.update(tasks[phase], completed=float(done), total=float(total), description=description)
