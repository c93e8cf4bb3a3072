"""Put the upstream at exactly the pinned commit in `<workspace>/src/<name>`: the commit and
tree verified before the work tree moves, an edit never lost, the transfer and the checkout
journaled (docs/architecture.md, 'Fetch').
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Annotated, cast

from msgspec.structs import asdict, replace

from dgr_forge.core import fault, gitutil
from dgr_forge.core.errors import NeedsHuman, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import atomic_write_bytes
from dgr_forge.core.output import Reporter
from dgr_forge.core.structs import Form, d
from dgr_forge.core.urls import check_url, mask
from dgr_forge.upstream import workspace
from dgr_forge.upstream.manifest import UpstreamManifest
from dgr_forge.upstream.series_base import log_path, save_changes
from dgr_forge.upstream.transfer import resolve_mirror as resolve_mirror  # the commands' way in
from dgr_forge.upstream.transfer import transfer
from dgr_forge.upstream.workspace import FORGE_EMAIL

# a checkout of a whole tree writes its files from parallel workers (one a core): on the
# real llama.cpp tree (3,004 files at the pin) it is most of a fetch's time after the transfer
PARALLEL_CHECKOUT = ("checkout.workers=0",)


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
    """The `fetch` command (under the workspace and root locks), recording the build number."""
    from dgr_forge.upstream import build_number

    started = time.monotonic()
    result = fetch_locked(forge, m, out, mirror=mirror, offline=offline, force=force)
    m = build_number.record(forge, m, None if offline else mirror or m.url, out)
    seconds = round(time.monotonic() - started, 3)
    return replace(result, build_number=m.build_number, seconds=seconds)


def local_commits(src: Path, head: str, pin: str | None) -> list[str]:
    """ "<id> <subject>" of HEAD's commits neither the upstream's nor the forge's."""
    args = ["log", "--format=%H%x00%ce%x00%s", head, "--not", "--glob=refs/dgr/*"]
    if pin is not None:
        args.append(pin)
    proc = gitutil.git(src, *args, "--", check=False, env=workspace.READ_ONLY_ENV)
    rows = [[*line.split("\0"), "", ""][:3] for line in proc.stdout.splitlines()]
    return [f"{commit[:12]} {subject}" for commit, email, subject in rows if email != FORGE_EMAIL]


def _checked_tree(m: UpstreamManifest, actual: str, url: str | None) -> str:
    if m.tree is None or actual == m.tree:
        return actual
    where = f" fetched from {mask(url)}" if url else ""
    raise OperationFailed(
        f"tree mismatch for {m.name} commit {m.commit}{where}: the manifest pins tree "
        f"{m.tree}, the commit has tree {actual}",
        hint=f"check `tree` in {m.path.name}: `git rev-parse {m.commit}^{{tree}}` in a "
        "trusted clone gives the right value; if a mirror served this, the mirror is wrong",
        details={"commit": m.commit, "expected_tree": m.tree, "actual_tree": actual},
    )


def _verify_fetched(src: Path, m: UpstreamManifest, url: str, method: str) -> str:
    """The pin's tree, checked before the work tree moves (a wrong pin leaves it as it was)."""
    if (found := gitutil.commit_and_tree(src, m.commit)) is None or found[0] != m.commit:
        raise OperationFailed(
            f"commit {m.commit} not found at {mask(url)}",
            hint="check `commit` in the manifest (is it pushed to that repository?) and the URL",
            details={"commit": m.commit, "url": mask(url)},
        )
    return _checked_tree(m, found[1], url if method != "local" else None)


def fetch_locked(
    forge: Forge,
    m: UpstreamManifest,
    out: Reporter,
    *,
    mirror: str | None,
    offline: bool,
    force: bool,
) -> Fetch:
    """`<workspace>/src/<name>` detached at the verified pin. The caller holds the workspace
    lock and resolved `mirror` (`resolve_mirror`)."""
    check_url(m.url, f"{forge.rel(m.path)}: [upstream] url")  # never reaching git
    src = forge.src_dir(m.name)
    gitdir = src / ".git"

    ws = workspace.inspect(src, m.commit, len(m.series))
    if ws.exists and not ws.journals and ws.head is not None and not ws.changes:
        tree = ws.tree_of(m.commit)
        if tree is not None and ws.commits_on(m.commit) is not None:
            _checked_tree(m, tree, None)
            return Fetch(
                upstream=m.name, url=mask(m.url), src_dir=src, commit=m.commit, tree=tree,
                changed=False, method="none", shallow=ws.shallow, saved_patch=None,
                build_number=m.build_number, seconds=0.0
            )  # fmt: skip

    if not ws.exists:
        _init(src)
    workspace.remove_git_leftovers(gitdir)
    recovering = bool(ws.journals & {workspace.CHECKOUT_JOURNAL, workspace.PATCH_JOURNAL})
    if workspace.PATCH_JOURNAL in ws.journals and (gitdir / "rebase-apply").exists():
        abort_am(src)
    if ws.exists:
        ws = workspace.inspect(src, m.commit, len(m.series))

    # refused before any transfer; --force saves and discards only after the pin is verified
    dirty = bool(ws.changes) and not recovering
    if dirty and not force:
        shown = ", ".join(f"{c.path} ({c.change})" for c in ws.changes[:10])
        more = f" and {len(ws.changes) - 10} more" if len(ws.changes) > 10 else ""
        raise NeedsHuman(
            f"the workspace {forge.rel(src)} has local changes: {shown}{more}",
            hint="keep them (e.g. `git -C "
            f"{src} diff > my.patch`, or turn them into a patch in the series), or re-run with "
            f"--force to save them as a patch under {forge.rel(forge.logs_dir)} and continue",
            details={"local_changes": [asdict(c) for c in ws.changes]},
        )
    tree_here = workspace.pin_tree(ws, m.commit)
    moving = ws.head is None or ws.commits_on(m.commit) is None
    commits: list[str] = []
    if moving and ws.head is not None and not recovering:
        commits = local_commits(src, ws.head, m.commit if tree_here else None)
        if commits and not force:
            more = f" and {len(commits) - 5} more" if len(commits) > 5 else ""
            raise NeedsHuman(
                f"the workspace {forge.rel(src)} has commits of its own on top of the "
                f"upstream: {'; '.join(commits[:5])}{more}",
                hint=f"keep them (e.g. `git -C {src} format-patch` them, or turn them into "
                "patches in the series), or re-run with --force to save them as an mbox "
                f"under {forge.rel(forge.logs_dir)} and continue",
                details={"local_commits": commits},
            )
    # a pin not fetched now, or left by a killed transfer, counts only with its whole tree
    unsure = moving or recovering or workspace.FETCH_JOURNAL in ws.journals
    pin_here = tree_here is not None and (not unsure or workspace.connected(src, m.commit))

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
        (gitdir / workspace.FETCH_JOURNAL).write_text(m.commit + "\n")
        fault.point("fetch.journal")
        try:
            method = transfer(src, url, m.commit, out, m.name)
            fault.point("fetch.objects")
            tree = _verify_fetched(src, m, url, method)
        except Exception as err:  # a failure, not a kill: `status` tells its cause
            workspace.record_fetch_failure(gitdir, m.commit, str(err))
            raise
    else:
        tree = _verify_fetched(src, m, url, method)
    (gitdir / workspace.FETCH_JOURNAL).unlink(missing_ok=True)  # complete: git checked connectivity
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

    journal = gitdir / workspace.CHECKOUT_JOURNAL
    if recovering or moving:  # journaled: a killed checkout is finished next time
        journal.write_text(m.commit + "\n")
        fault.point("fetch.checkout")
        gitutil.git(src, "checkout", "-q", "-f", "--detach", m.commit, config=PARALLEL_CHECKOUT)
        fault.point("fetch.checked-out")
    # the ref first: a crash after the journal is gone must leave the pin marked as upstream
    gitutil.git(src, "update-ref", workspace.PIN_REF, m.commit)
    if recovering or moving:
        journal.unlink()
        (gitdir / workspace.PATCH_JOURNAL).unlink(missing_ok=True)
    if method in ("shallow", "full"):
        out.info(f"{m.name} at {m.commit} (tree {tree}) verified")
    return Fetch(
        upstream=m.name, url=mask(url), src_dir=src, commit=m.commit, tree=tree, changed=True,
        method=method, shallow=(gitdir / "shallow").exists(), saved_patch=saved,
        build_number=m.build_number, seconds=0.0
    )  # fmt: skip


def abort_am(src: Path) -> None:
    """Undo the forge's half-done `git am` (`--quit` where `--abort` cannot, e.g. after a
    full disk); the caller checks out the pin."""
    if gitutil.git(src, "am", "--abort", check=False).returncode != 0:
        gitutil.git(src, "am", "--quit", check=False)
        shutil.rmtree(src / ".git" / "rebase-apply", ignore_errors=True)


def save_commits(forge: Forge, stem: str, src: Path, head: str, exclude: list[str]) -> Path:
    args = ["format-patch", "--stdout", "--binary", "--no-signature", head, "--not"]
    args += ["--glob=refs/dgr/*", *exclude, "--"]
    proc = gitutil.git(src, *args, text=False)
    target = log_path(forge, stem, ".mbox")
    atomic_write_bytes(target, cast(bytes, proc.stdout))
    return target


def _init(src: Path) -> None:
    if src.exists():
        if leftovers := [p for p in src.iterdir() if p.name != ".git"]:
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
