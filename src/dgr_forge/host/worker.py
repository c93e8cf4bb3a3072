"""The shard worker source: `manifests/shard-worker.toml` or `--worker PATH`, a CMake
project that includes DgrUpstream.cmake (without one, `build` builds the upstream's own
targets). A git worker is fetched into the workspace by exact commit, never a branch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec

from dgr_forge.attest.records import WorkerSource
from dgr_forge.core import gitutil
from dgr_forge.core.errors import BadInput, NeedsHuman, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.gitutil import HEX40
from dgr_forge.core.output import Reporter
from dgr_forge.core.tominput import Checker, Record, Version1, about, decode, fail, shown_value
from dgr_forge.core.urls import check_url, mask, mask_text
from dgr_forge.upstream.workspace import remove_partial_objects

MANIFEST = "manifests/shard-worker.toml"
WORKER_DIR = "shard-worker"
PIN_REF = "refs/dgr/worker-pin"  # the commit the forge last checked out there


class Worker(Record, frozen=True):
    """The worker: a directory of the root, or a git repository at an exact commit."""

    path: (
        Annotated[str, about("its CMake project, relative to the root", fix='path = "worker"')]
        | None
    ) = None
    url: Annotated[str, about("its git URL (with `commit`)", fix="quote the URL")] | None = None
    commit: Annotated[str, about("the exact 40-hex commit of `url` to build")] | None = None


class Manifest(Record, frozen=True):
    """`manifests/shard-worker.toml`: the CMake project a build builds on the patched
    upstream (without it, the upstream's own targets)."""

    schema: Version1
    worker: Worker = msgspec.field(default_factory=Worker)


class WorkerSpec(Worker, frozen=True):
    """`[worker]` (or --worker) as resolved: `source_dir` is where CMake reads it."""

    source_dir: Path = msgspec.field(default_factory=Path)

    @property
    def location(self) -> str:  # as reports show it: a root-relative path, or the git URL
        return self.url or self.path or ""

    @property
    def identity(self) -> str:
        """What configure depends on: a path worker's edits are Ninja's business."""
        return f"{self.location}@{self.commit}" if self.commit else self.location


def path_tree(spec: WorkerSpec | None) -> Path | None:
    """A path worker's own directory (None: no worker, or a git one, checked out in the
    workspace)."""
    return spec.source_dir if spec is not None and spec.url is None else None


def _path_worker(path: Path, shown: str, rel: str) -> WorkerSpec:
    """The worker at the resolved `path` (`rel` as reports name it), a CMake project."""
    if not (path / "CMakeLists.txt").is_file():
        raise BadInput(
            f"worker {shown}: no CMakeLists.txt in {path}",
            hint="point --worker (or [worker] path) at the worker's CMake project directory",
            details={"worker": str(path)},
        )
    return WorkerSpec(path=rel, source_dir=path)


def resolve(forge: Forge, override: Path | None) -> WorkerSpec | None:
    """None: build the upstream's own targets."""
    if override is not None:
        path = override.resolve()
        return _path_worker(path, str(override), forge.rel(path))
    if not (manifest := forge.root / MANIFEST).is_file():
        return None
    _, data = Checker(MANIFEST).load(
        manifest, what="worker manifest", hint="restore it or remove it", root=forge.root
    )
    table = decode(MANIFEST, data, Manifest).worker
    raw_path, url, commit = table.path, table.url, table.commit
    if raw_path is not None and url is not None:
        raise fail(MANIFEST, "worker", "both path and url given", "keep one of them")
    if raw_path is not None:
        if not raw_path:
            raise fail(MANIFEST, "worker.path", "must be a non-empty string", 'path = "worker"')
        return _path_worker((forge.root / raw_path).resolve(), raw_path, raw_path)
    if url is not None:
        if not url:
            raise fail(MANIFEST, "worker.url", "must be a non-empty string", "quote the URL")
        if commit is None or not HEX40.fullmatch(commit):
            raise fail(
                MANIFEST,
                "worker.commit",
                f"{shown_value(commit)} is not an exact 40-hex commit",
                "pin the worker to `git rev-parse <rev>` of the commit to build",
            )
        check_url(url, f"{MANIFEST}: [worker] url")  # data, never a git option
        return WorkerSpec(url=url, commit=commit, source_dir=forge.src_dir(WORKER_DIR))
    if commit is not None:
        raise fail(
            MANIFEST, "worker.commit", "commit without url", "add url = ... or remove commit"
        )
    return None


def ensure_worker(
    spec: WorkerSpec,
    out: Reporter,
    *,
    offline: bool = False,
    force: bool = False,
    forge: Forge | None = None,
) -> None:
    """Put a git worker at its exact commit. A person's edits or commits there stop it
    (exit 3); with `force` they are saved under `forge`'s logs/ first."""
    if spec.url is None or spec.commit is None:
        return
    src = spec.source_dir
    if (cloned := (src / ".git").exists()) and gitutil.rev_parse(src, "HEAD") == spec.commit:
        return
    saved = _keep_local_work(spec, src, out, force=force, forge=forge) if cloned else []
    if offline and not (cloned and gitutil.has_object(src, spec.commit)):
        raise OperationFailed(
            f"worker commit {spec.commit[:12]} is not in {src} and --offline forbids fetching",
            hint="run once without --offline",
        )
    out.step(f"fetch worker {mask(spec.url)} at {spec.commit[:12]}")
    src.mkdir(parents=True, exist_ok=True)
    if not cloned:
        gitutil.git(src, "init", "-q")
    # the commit alone, else the whole repository
    for how in (("--depth", "1", "--", spec.url, spec.commit), ("--", spec.url)):
        if gitutil.has_object(src, spec.commit):
            break
        done = gitutil.git(src, "fetch", "-q", *how, check=False, isolated=False)
        if done.returncode == 0:
            break
        remove_partial_objects(src / ".git")  # a failed transfer's partial pack
    else:
        raise OperationFailed(
            f"fetching the worker from {mask(spec.url)} failed: "
            f"{mask_text(done.stderr.strip())[-2000:]}",
            hint="check [worker] url in manifests/shard-worker.toml and the network",
        )
    if not gitutil.has_object(src, spec.commit):
        raise OperationFailed(
            f"worker commit {spec.commit} not found at {mask(spec.url)}",
            hint="check [worker] commit in manifests/shard-worker.toml",
        )
    if saved:
        from dgr_forge.upstream.fetch import discard_changes

        discard_changes(src, gitutil.rev_parse(src, "HEAD"))
    gitutil.git(src, "checkout", "-q", "--detach", "--force", spec.commit)
    # what the forge put there: commits above it are a person's (see _keep_local_work)
    gitutil.git(src, "update-ref", PIN_REF, spec.commit)


def _keep_local_work(
    spec: WorkerSpec, src: Path, out: Reporter, *, force: bool, forge: Forge | None
) -> list[Path]:
    dirty = gitutil.status_porcelain(src)
    head, pinned = gitutil.rev_parse(src, "HEAD"), gitutil.rev_parse(src, PIN_REF)
    # "<id> <subject>" of the commits above the pin ref (FETCH_HEAD before it existed)
    base = PIN_REF if pinned else "FETCH_HEAD"
    own: list[str] = []
    if head is not None and (pinned or gitutil.rev_parse(src, base) is not None):
        proc = gitutil.git(src, "log", "--format=%h %s", "HEAD", "--not", base, "--", check=False)
        own = [line for line in proc.stdout.splitlines() if line]
    if not dirty and not own:
        return []
    shown = forge.rel(src) if forge else str(src)
    logs = forge.rel(forge.logs_dir) if forge else "the workspace's logs/"
    if not force or forge is None:
        what = []
        if dirty:
            what.append(f"uncommitted edits ({', '.join(line[3:] for line in dirty[:10])})")
        if own:
            what.append(f"commits of your own ({'; '.join(own[:5])})")
        raise NeedsHuman(
            f"the worker checkout {shown} has {' and '.join(what)}; moving it to "
            f"{spec.commit[:12] if spec.commit else '?'} would lose them",
            hint=f"keep them (push your commits, `git -C {shown} diff > my.patch`), or run "
            f"the build with --force to save them under {logs} first",
            details={"worker": shown, "dirty": dirty, "local_commits": own},
        )
    from dgr_forge.upstream.fetch import save_commits
    from dgr_forge.upstream.series_base import save_changes

    saved: list[Path] = []
    if dirty:
        by = "dgr-forge build --force"
        kept = save_changes(forge, f"worker-saved-{WORKER_DIR}", src, head, by)
        saved += [kept] if kept else []
        out.info(f"saved the uncommitted edits of {shown} to {kept}")
    if own and head is not None:
        exclude = [] if pinned else ["FETCH_HEAD"]
        saved.append(save_commits(forge, f"worker-saved-commits-{WORKER_DIR}", src, head, exclude))
        out.info(f"saved the worker's own commits to {saved[-1]} (`git am` re-applies them)")
    return saved


def describe(spec: WorkerSpec) -> WorkerSource:
    src = spec.source_dir
    if gitutil.git(src, "rev-parse", "--show-toplevel", check=False).returncode != 0:
        return WorkerSource(location=spec.location, commit=None, dirty=False)
    dirty = bool(gitutil.status_porcelain(src, ["--", "."]))
    return WorkerSource(location=spec.location, commit=gitutil.rev_parse(src, "HEAD"), dirty=dirty)
