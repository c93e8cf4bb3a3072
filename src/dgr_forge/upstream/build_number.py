"""The upstream's own build number at the pin (issue 29): llama.cpp's `b<N>`, its
`git rev-list --count` at the commit, which its CMake compiles in as LLAMA_BUILD_NUMBER.

A depth-1 workspace cannot count it (its history is one commit), so the number is counted
once, where the history is, with the least transfer the server allows, and recorded in
the manifest (`[upstream] build_number`):

* the workspace itself when it holds the pin's whole history (not shallow): no transfer;
* a local upstream or mirror (file:// or a path) that is a full repository holding the
  commit (not shallow, not partial, no grafts): counted there, no transfer;
* else a commit-only fetch of the pin's history (`--filter=tree:0`: no trees, no blobs)
  into a scratch repository, from the upstream or the mirror; a local server gets the
  filter only when it allows filters (`uploadpack.allowFilter`: it would ignore it and
  send everything), and a shallow local server is refused before any fetch (git 2.39
  loops on a filtered fetch from one); a network server that ignores the filter sends
  more, never a wrong count. A shallow or partial server's history is refused (its count
  would be short).

Never a guess: when neither can count, the answer is None and the caller says so.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from dgr_forge.core import gitutil
from dgr_forge.core.urls import check_url, mask_text

# a commit-only fetch of llama.cpp's ~10k commits takes seconds; a stuck server, not forever
FETCH_TIMEOUT = 900

if TYPE_CHECKING:
    from dgr_forge.core.forge import Forge
    from dgr_forge.core.output import Reporter
    from dgr_forge.upstream.manifest import UpstreamManifest


def _held(repo: Path, commit: str) -> tuple[bool, bool]:
    """(whether `commit` is here, whether the repository is shallow), in one git call."""
    asked = gitutil.git(
        repo, "rev-parse", "--is-shallow-repository", "--verify", "--quiet",
        "--end-of-options", f"{commit}^{{commit}}", check=False,
    )  # fmt: skip
    lines = asked.stdout.split()
    return asked.returncode == 0 and lines[1:] == [commit], lines[:1] == ["true"]


def local_count(src: Path, commit: str) -> int | None:
    """The count at `commit` from a repository holding its whole history, else None."""
    if not (src / ".git").exists():
        return None
    here, shallow = _held(src, commit)
    if not here or shallow:
        return None
    return int(gitutil.out(src, "rev-list", "--count", commit, "--"))


def _local_git_dir(url: str) -> tuple[Path, bool] | None:
    """The repository a local URL (file:// or an absolute path) names, exactly that one (a
    directory inside another repository is not it: discovery stops at the path), and
    whether git calls it shallow."""
    if url.startswith("file://"):
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            return None
        path = Path(unquote(parts.path))
    elif url.startswith("/"):
        path = Path(url)
    else:
        return None
    if not path.is_dir():
        return None  # a missing path, a file, a device: no repository
    found = gitutil.git(
        path,
        "rev-parse",
        "--absolute-git-dir",
        "--is-shallow-repository",
        check=False,
        env={"GIT_CEILING_DIRECTORIES": str(path.parent)},
    )
    lines = found.stdout.splitlines()
    if found.returncode != 0 or len(lines) != 2:
        return None
    git_dir = Path(lines[0])
    # the path itself or its .git: never a repository above it
    if git_dir not in (path.resolve(), (path / ".git").resolve()):
        return None
    return git_dir, lines[1] == "true"


def _server_git(
    git_dir: Path, *args: str, isolated: bool = True
) -> subprocess.CompletedProcess[str]:
    """git in a local server's (or the scratch) repository: the pinned config (`isolated`;
    else the user's too), no replace refs and no lazy fetch (a count is of the commits it
    holds), its exit status left to the caller."""
    return gitutil.git(
        None, f"--git-dir={git_dir}", "--no-replace-objects", *args,
        check=False, env={"GIT_NO_LAZY_FETCH": "1"}, isolated=isolated,
    )  # fmt: skip


def _partial_dir(git_dir: Path) -> bool:
    """A partial clone (a promisor remote): it may lack objects it would fetch lazily."""
    config = _server_git(
        git_dir, "config", "--get-regexp", r"^(remote\..*\.promisor|extensions\.partialclone)$"
    )
    return bool(config.stdout.strip()) or any((git_dir / "objects" / "pack").glob("*.promisor"))


def _server_count(git_dir: Path, commit: str) -> int | None:
    """The count at `commit` in a local repository holding it, not shallow (the caller
    asked), not partial and without grafts; else None."""
    if _partial_dir(git_dir) or (git_dir / "info" / "grafts").exists():
        return None
    # `commit` missing, not a commit, or a commit of its history missing: no count (never
    # a short one)
    counted = _server_git(git_dir, "rev-list", "--count", commit, "--")
    if counted.returncode != 0 or not counted.stdout.strip().isdigit():
        return None
    return int(counted.stdout)


def _allows_filter(git_dir: Path) -> bool:
    """Whether the local server's upload-pack honours a filter (its config and the user's,
    as the fetch's upload-pack reads them)."""
    allowed = _server_git(
        git_dir, "config", "--type=bool", "--get", "uploadpack.allowFilter", isolated=False
    )
    return allowed.stdout.strip() == "true"


def count(src: Path, url: str | None, commit: str, tmp_root: Path) -> tuple[int | None, str]:
    """(the upstream's count at `commit`, how it was found or why not)."""
    here = local_count(src, commit)
    if here is not None:
        return here, "counted in the workspace's full history"
    if url is None:
        return None, "the workspace is shallow and no upstream may be contacted (--offline)"
    check_url(url, "upstream url")  # data, never an option
    only_commits = ["--filter=tree:0"]
    if gitutil.is_local_url(url):
        local = _local_git_dir(url)
        if local is not None:
            git_dir, shallow = local
            if shallow or (git_dir / "shallow").exists():
                return None, "the server's own history is shallow: its count would be short"
            there = _server_count(git_dir, commit)
            if there is not None:
                return there, "counted in the local repository's full history (no transfer)"
        # a local server that does not allow filters would ignore the filter
        if local is None or not _allows_filter(local[0]):
            only_commits = []
    tmp_root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="build-number-", dir=tmp_root))
    try:
        gitutil.git(None, "init", "-q", "--bare", str(scratch))
        # commits only where the server filters; --update-shallow: a shallow server's
        # history is taken as shallow, and refused below, never counted short
        try:
            proc = gitutil.git(
                scratch,
                "fetch",
                "-q",
                "--no-tags",
                "--update-shallow",
                *only_commits,
                "--",
                url,
                commit,
                check=False,
                isolated=False,  # a network call: the user's credentials and proxies apply
                config=gitutil.protocol_policy(url),
                env={"GIT_NO_LAZY_FETCH": "1"},
                timeout=FETCH_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            return None, f"fetching the pin's history took over {FETCH_TIMEOUT} s"
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["git fetch failed"])[-1]
            return None, f"fetching the pin's history failed: {mask_text(last)}"
        here, shallow = _held(scratch, commit)
        if not here:
            return None, "the server did not send the pinned commit"
        if shallow:
            return None, "the server's own history is shallow: its count would be short"
        # a commit the server lacks (its copy is shallow or partial) is never asked for
        # again behind our back (a promisor remote's lazy fetch): the count fails instead
        counted = _server_git(scratch, "rev-list", "--count", commit, "--")
        if counted.returncode != 0 or not counted.stdout.strip().isdigit():
            return None, (
                "the server's history of the pin is incomplete (a shallow or partial copy): "
                "its count would be short"
            )
        shown = "its commits only" if only_commits else "a server that sends whole history"
        return int(counted.stdout), f"counted from the pin's history ({shown})"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def record(
    forge: Forge,
    m: UpstreamManifest,
    url: str | None,
    out: Reporter,
    deferred: list[str] | None = None,
) -> UpstreamManifest:
    """`m` with its build number: as the manifest records it, else counted and written to
    the manifest (`[upstream] build_number`; the caller holds the root lock) and `m`
    loaded again. Not countable here: `m` as it was, and a warning saying how to fix it
    (never a guess), appended to `deferred` when given: `build` says it only after its
    own fetch got through (a fetch that fails says the cause first, and once)."""
    if m.build_number is not None:
        return m
    from dgr_forge.core.fsutil import atomic_write_text
    from dgr_forge.upstream import manifest, manifest_edit

    number, how = count(forge.src_dir(m.name), url, m.commit, forge.tmp_dir)
    if number is None:
        (deferred.append if deferred is not None else out.warn)(
            f"{m.name}: the upstream's build number at {m.commit[:12]} is unknown ({how}); "
            "`build` needs it for an upstream that compiles it in: run `dgr-forge fetch` "
            "with network access (or --mirror a full clone), or set [upstream] build_number "
            f"in {forge.rel(m.path)} to `git rev-list --count {m.commit}` of a full clone"
        )
        return m
    text = manifest.read_raw(m.path).decode("utf-8")  # bounded, as `m` was loaded
    atomic_write_text(m.path, manifest_edit.with_build_number(text, number))
    out.info(
        f"{m.name}: build number b{number} at {m.commit[:12]} ({how}), recorded in "
        f"{forge.rel(m.path)}"
    )
    return manifest.load(m.path, forge.root)
