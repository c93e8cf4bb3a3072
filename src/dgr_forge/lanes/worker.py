"""The shard worker source: `manifests/shard-worker.toml` or `--worker PATH`.

A worker is a CMake project that includes DgrUpstream.cmake; without one, `build`
builds the patched upstream's own targets. A git worker (url + exact commit) is fetched
into the workspace the same way the upstream is: by exact commit, never a branch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dgr_forge.attest.records import WorkerSource
from dgr_forge.core import gitutil
from dgr_forge.core.errors import BadInput, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.ids import HEX40
from dgr_forge.core.output import Reporter
from dgr_forge.core.tomlcheck import Checker, shown_value
from dgr_forge.core.urls import check_url, mask, mask_text

MANIFEST = "manifests/shard-worker.toml"
WORKER_DIR = "shard-worker"


@dataclass(frozen=True)
class WorkerSpec:
    """What the manifest (or --worker) names; `source_dir` is where CMake reads it."""

    location: str  # as shown in reports: a root-relative path, or the git URL
    source_dir: Path
    url: str | None = None
    commit: str | None = None

    @property
    def identity(self) -> str:
        """What configure depends on: a path worker's edits are Ninja's business."""
        return f"{self.location}@{self.commit}" if self.commit else self.location


def _fail(key: str, problem: str, fix: str) -> BadInput:
    return BadInput(
        f"{MANIFEST}: {key}: {problem}", hint=fix, details={"file": MANIFEST, "key": key}
    )


def _check_dir(path: Path, shown: str) -> None:
    if not (path / "CMakeLists.txt").is_file():
        raise BadInput(
            f"worker {shown}: no CMakeLists.txt in {path}",
            hint="point --worker (or [worker] path) at the worker's CMake project directory",
            details={"worker": str(path)},
        )


def resolve(forge: Forge, override: Path | None) -> WorkerSpec | None:
    """The worker to build, or None to build the upstream's own targets."""
    if override is not None:
        path = override.resolve()
        _check_dir(path, str(override))
        return WorkerSpec(location=forge.rel(path), source_dir=path)
    manifest = forge.root / MANIFEST
    if not manifest.is_file():
        return None
    c = Checker(MANIFEST)
    _, data = c.load(manifest, what="worker manifest", hint="restore it or remove it")
    c.known_keys(data, {"schema", "worker"}, "")
    c.schema(data, 1)
    table = c.section(data, "worker", {"path", "url", "commit"})
    raw_path = c.string(table, "path", "worker", required=False, fix='path = "worker"')
    url = c.string(table, "url", "worker", required=False, fix="quote the URL")
    commit = table.get("commit")
    if raw_path is not None and url is not None:
        raise _fail("worker", "both path and url given", "keep one of them")
    if raw_path is not None:
        if not raw_path:
            raise _fail("worker.path", "must be a non-empty string", 'path = "worker"')
        full = (forge.root / raw_path).resolve()
        _check_dir(full, raw_path)
        return WorkerSpec(location=raw_path, source_dir=full)
    if url is not None:
        if not url:
            raise _fail("worker.url", "must be a non-empty string", "quote the URL")
        if not isinstance(commit, str) or not HEX40.fullmatch(commit):
            raise _fail(
                "worker.commit",
                f"{shown_value(commit)} is not an exact 40-hex commit",
                "pin the worker to `git rev-parse <rev>` of the commit to build",
            )
        check_url(url, f"{MANIFEST}: [worker] url")  # data, never a git option
        return WorkerSpec(
            location=url, source_dir=forge.src_dir(WORKER_DIR), url=url, commit=commit
        )
    if commit is not None:
        raise _fail("worker.commit", "commit without url", "add url = ... or remove commit")
    return None


def ensure_worker(spec: WorkerSpec, out: Reporter, *, offline: bool = False) -> None:
    """Put a git worker at its exact commit (a no-op when it is already there)."""
    if spec.url is None or spec.commit is None:
        return
    src = spec.source_dir
    if (src / ".git").exists() and gitutil.rev_parse(src, "HEAD") == spec.commit:
        return
    if offline and not ((src / ".git").exists() and gitutil.has_object(src, spec.commit)):
        raise OperationFailed(
            f"worker commit {spec.commit[:12]} is not in {src} and --offline forbids fetching",
            hint="run once without --offline",
        )
    out.step(f"fetch worker {mask(spec.url)} at {spec.commit[:12]}")
    src.mkdir(parents=True, exist_ok=True)
    if not (src / ".git").exists():
        gitutil.git(src, "init", "-q")
    if not gitutil.has_object(src, spec.commit):
        shallow = gitutil.git(
            src,
            "fetch",
            "-q",
            "--depth",
            "1",
            "--",
            spec.url,
            spec.commit,
            check=False,
            isolated=False,
        )
        if shallow.returncode != 0:
            full = gitutil.git(src, "fetch", "-q", "--", spec.url, check=False, isolated=False)
            if full.returncode != 0:
                raise OperationFailed(
                    f"fetching the worker from {mask(spec.url)} failed: "
                    f"{mask_text(full.stderr.strip())[-2000:]}",
                    hint="check [worker] url in manifests/shard-worker.toml and the network",
                )
    if not gitutil.has_object(src, spec.commit):
        raise OperationFailed(
            f"worker commit {spec.commit} not found at {mask(spec.url)}",
            hint="check [worker] commit in manifests/shard-worker.toml",
        )
    gitutil.git(src, "checkout", "-q", "--detach", "--force", spec.commit)


def describe(spec: WorkerSpec) -> WorkerSource:
    """The worker as a report records it: location, exact commit, dirty flag."""
    src = spec.source_dir
    top = gitutil.git(src, "rev-parse", "--show-toplevel", check=False)
    if top.returncode != 0:
        return WorkerSource(location=spec.location, commit=None, dirty=False)
    commit = gitutil.rev_parse(src, "HEAD")
    dirty = bool(gitutil.status_porcelain(src, ["--", "."]))
    return WorkerSource(location=spec.location, commit=commit, dirty=dirty)
