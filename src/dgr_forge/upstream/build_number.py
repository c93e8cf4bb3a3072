"""The upstream's own build number at the pin (issue 29): llama.cpp's `b<N>`, its
`git rev-list --count` at the commit, which its CMake compiles in as LLAMA_BUILD_NUMBER.
Counted once where the history is; never a guess: None, and the caller says so
(docs/architecture.md, 'The build number').
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from dgr_forge.core import gitutil
from dgr_forge.core.urls import check_url, mask, mask_text
from dgr_forge.upstream.series_journal import scratch_dir

# a commit-only fetch of llama.cpp's ~10k commits takes seconds; a stuck server, not forever
FETCH_TIMEOUT = 900

if TYPE_CHECKING:
    from dgr_forge.core.forge import Forge
    from dgr_forge.core.output import Reporter
    from dgr_forge.upstream.manifest import UpstreamManifest


def _held(repo: Path, commit: str) -> tuple[bool, bool]:
    asked = gitutil.git(
        repo, "rev-parse", "--is-shallow-repository", "--verify", "--quiet",
        "--end-of-options", f"{commit}^{{commit}}", check=False
    )  # fmt: skip
    lines = asked.stdout.split()
    return asked.returncode == 0 and lines[1:] == [commit], lines[:1] == ["true"]


def _local_git_dir(url: str) -> tuple[Path, bool] | None:
    """The repository a local URL names, exactly that one (never one above it), and whether
    it is shallow."""
    if not url.startswith("file://"):
        path = Path(url)  # a "/" path: the caller asked is_local_url
    elif (parts := urlsplit(url)).netloc not in ("", "localhost"):
        return None
    else:
        path = Path(unquote(parts.path))
    if not path.is_dir():
        return None  # a missing path, a file, a device: no repository
    found = gitutil.git(
        path, "rev-parse", "--absolute-git-dir", "--is-shallow-repository",
        check=False, env={"GIT_CEILING_DIRECTORIES": str(path.parent)}
    )  # fmt: skip
    lines = found.stdout.splitlines()
    if found.returncode != 0 or len(lines) != 2:
        return None
    if (git_dir := Path(lines[0])) not in (path.resolve(), (path / ".git").resolve()):
        return None
    return git_dir, lines[1] == "true"


def _server_git(
    git_dir: Path, *args: str, isolated: bool = True
) -> subprocess.CompletedProcess[str]:
    """git in a local server's (or the scratch) repository: no replace refs and no lazy
    fetch (a count is of the commits it holds)."""
    return gitutil.git(
        None, f"--git-dir={git_dir}", "--no-replace-objects", *args,
        check=False, env={"GIT_NO_LAZY_FETCH": "1"}, isolated=isolated
    )  # fmt: skip


def _server_count(git_dir: Path, commit: str) -> int | None:
    # a partial clone (a promisor remote) may lack objects it would fetch lazily
    config = _server_git(
        git_dir, "config", "--get-regexp", r"^(remote\..*\.promisor|extensions\.partialclone)$"
    )
    partial = bool(config.stdout.strip()) or any((git_dir / "objects/pack").glob("*.promisor"))
    if partial or (git_dir / "info" / "grafts").exists():
        return None
    # `commit` missing, not a commit, or a commit of its history missing: no count (never
    # a short one)
    counted = _server_git(git_dir, "rev-list", "--count", commit, "--")
    if counted.returncode != 0 or not counted.stdout.strip().isdigit():
        return None
    return int(counted.stdout)


def count(
    src: Path, url: str | None, commit: str, tmp_root: Path, out: Reporter | None = None
) -> tuple[int | None, str]:
    """(the upstream's count at `commit`, how it was found or why not); a fetch of the
    history is a step `out` says first."""
    if (src / ".git").exists() and _held(src, commit) == (True, False):
        return int(gitutil.out(src, "rev-list", "--count", commit, "--")), (
            "counted in the workspace's full history"
        )
    if url is None:
        return None, "the workspace is shallow and no upstream may be contacted (--offline)"
    check_url(url, "upstream url")  # data, never an option
    only_commits = ["--filter=tree:0"]
    if gitutil.is_local_url(url):
        if (local := _local_git_dir(url)) is not None:
            git_dir, shallow = local
            if shallow or (git_dir / "shallow").exists():
                return None, "the server's own history is shallow: its count would be short"
            if (there := _server_count(git_dir, commit)) is not None:
                return there, "counted in the local repository's full history (no transfer)"
        # a local server that does not allow filters would ignore the filter
        asked = ["config", "--type=bool", "--get", "uploadpack.allowFilter"]
        if local is None or _server_git(local[0], *asked, isolated=False).stdout.strip() != "true":
            only_commits = []
    if out is not None:
        sent = "commits only" if only_commits else "whole"
        where = f"{commit[:12]}: fetching its history ({sent}) from {mask(url)}"
        out.step(f"counting the build number at {where}")
    with scratch_dir(tmp_root, "build-number-") as scratch:
        gitutil.git(None, "init", "-q", "--bare", str(scratch))
        # commits only where the server filters; --update-shallow: a shallow server's
        # history is taken as shallow, and refused below, never counted short
        try:
            proc = gitutil.git(
                scratch, "fetch", "-q", "--no-tags", "--update-shallow", *only_commits, "--",
                url, commit, check=False,
                isolated=False,  # a network call: the user's credentials and proxies apply
                config=gitutil.protocol_policy(url), env={"GIT_NO_LAZY_FETCH": "1"},
                timeout=FETCH_TIMEOUT
            )  # fmt: skip
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


def record(
    forge: Forge,
    m: UpstreamManifest,
    url: str | None,
    out: Reporter,
    deferred: list[str] | None = None,
) -> UpstreamManifest:
    """`m` with its build number, counted and written to the manifest when it has none
    (the caller holds the root lock). Not countable: `m` as it was, and a warning, put in
    `deferred` when given (`build` says it only after its own fetch got through)."""
    if m.build_number is not None:
        return m
    from dgr_forge.core.fsutil import atomic_write_text
    from dgr_forge.upstream import manifest, manifest_edit

    number, how = count(forge.src_dir(m.name), url, m.commit, forge.tmp_dir, out)
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
