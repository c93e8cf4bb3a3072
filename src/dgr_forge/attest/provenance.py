"""A lane build as an in-toto Statement v1 with a SLSA Provenance v1 predicate (the choices:
docs/build-and-reports.md, "Signed reports"). A subject is named by its path relative to
the workspace, so `report verify --artifacts` finds it again; absolute paths under the
workspace or the forge root are written `${DGR_WORKSPACE}/…` and `${DGR_ROOT}/…`, so two
builds of the same inputs in different checkouts differ only in `runDetails`.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, cast
from urllib.parse import quote

import msgspec
from msgspec import Struct, field

from dgr_forge import __version__
from dgr_forge.attest.records import LaneBuild, Tool
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import sha256_bytes, sha256_file
from dgr_forge.core.gitutil import is_local_url
from dgr_forge.core.structs import d
from dgr_forge.core.urls import mask
from dgr_forge.upstream.surface import Surface

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://dgr-forge.invalid/buildtypes/cmake-lane/v1"
BUILDER_LOCAL = "https://dgr-forge.invalid/builders/local/v1"
BUILDER_CI = "https://dgr-forge.invalid/builders/ci/v1"
BUILDER_GITHUB = "https://dgr-forge.invalid/builders/github-actions/v1"


class Descriptor(Struct, omit_defaults=True):
    """An in-toto ResourceDescriptor: only the keys it has are written."""

    name: str
    uri: str | None = None
    digest: Mapping[str, str | None] | None = None
    media_type: str | None = field(default=None, name="mediaType")
    annotations: Struct | dict[str, Any] | None = None


class Moved(Struct, kw_only=True):
    """entries in B and not in A (`added`), in A and not in B (`removed`)"""

    added: Annotated[list[str], d("in B only")]
    removed: Annotated[list[str], d("in A only")]


class SurfaceMoves(Struct, kw_only=True):
    """the worker surface from A to B: boundary headers read, upstream symbols imported
    (`name (header)`); not a subject difference (the exit code is the subjects')"""

    headers: Moved
    symbols: Moved


def surface_changes(a: Surface | None, b: Surface | None) -> SurfaceMoves:
    """How the surface moved from report A to report B (a symbol: name and header)."""

    def moved(na: set[str], nb: set[str]) -> Moved:
        return Moved(added=sorted(nb - na), removed=sorted(na - nb))

    headers = [set(s.headers) if s else set() for s in (a, b)]
    symbols = [{f"{x.name} ({x.header})" for x in s.symbols} if s else set() for s in (a, b)]
    return SurfaceMoves(headers=moved(*headers), symbols=moved(*symbols))


class FileRef(Struct):
    path: str
    sha256: str


ROOT_VAR = "${DGR_ROOT}"
WORKSPACE_VAR = "${DGR_WORKSPACE}"


def rfc3339(moment: datetime) -> str:
    """UTC, second precision, `Z` suffix. A naive time is taken as local time."""
    return moment.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Paths:
    """Rewrites absolute workspace/root paths (and tool paths) into `${NAME}` placeholders."""

    def __init__(self, forge: Forge, extra: dict[str, str] | None = None) -> None:
        pairs = [(forge.workspace.resolve(), WORKSPACE_VAR), (forge.root.resolve(), ROOT_VAR)]
        pairs += [(forge.workspace, WORKSPACE_VAR), (forge.root, ROOT_VAR)]
        found = {(str(p), v) for p, v in pairs}
        found |= {(p, v) for p, v in (extra or {}).items() if p and p != "/"}
        self._subs = [  # longest prefix first: the default workspace lies inside the root
            (re.compile(re.escape(p) + r"(?=$|[/=;:\s\"'])"), v.replace("\\", "\\\\"))
            for p, v in sorted(found, key=lambda pv: len(pv[0]), reverse=True)
        ]

    def text(self, value: str) -> str:
        for pattern, var in self._subs:
            value = pattern.sub(var, value)
        return value


def workspace_relative(forge: Forge, path: Path) -> str:
    """How a subject or byproduct is named: relative to the workspace when inside it."""
    real = forge.workspace.resolve()
    for p, base in ((path, forge.workspace), (path, real), (path.resolve(), real)):
        if p.is_relative_to(base):
            return p.relative_to(base).as_posix()
    return path.resolve().as_posix()


def builder() -> dict[str, Any]:
    """Distinct ids for local and CI runs; on GitHub Actions the run URL is recorded too."""
    version = {"dgr-forge": __version__}
    if os.environ.get("GITHUB_ACTIONS") == "true":
        server = os.environ.get("GITHUB_SERVER_URL", "https://github.com")
        repo = os.environ.get("GITHUB_REPOSITORY", "")
        run_id = os.environ.get("GITHUB_RUN_ID", "")
        if repo and run_id:
            attempt = os.environ.get("GITHUB_RUN_ATTEMPT", "1")
            version["runUrl"] = f"{server}/{repo}/actions/runs/{run_id}/attempts/{attempt}"
        return {"id": BUILDER_GITHUB, "version": version}
    if os.environ.get("CI"):
        for var in ("CI_JOB_URL", "BUILD_URL"):  # GitLab, Jenkins
            if os.environ.get(var):
                version["runUrl"] = os.environ[var]
        return {"id": BUILDER_CI, "version": version}
    return {"id": BUILDER_LOCAL, "version": version}


def purl(name: str, version: str) -> str:
    """A tool as a package URL (an RFC 3986 URI): `pkg:generic/<name>@<version>`."""
    at = f"@{quote(version, safe='')}" if version else ""
    return f"pkg:generic/{quote(name, safe='')}{at}"


def _tool(tool: Tool) -> Descriptor:
    exe, digest = Path(tool.path), tool.sha256
    if not digest and exe.is_absolute() and exe.is_file() and os.access(exe, os.R_OK):
        digest = sha256_file(exe.resolve())
    return Descriptor(
        tool.name,
        purl(tool.name, tool.version),
        {"sha256": digest} if digest else None,
        annotations={"version": tool.version},
    )


def portable_git_uri(location: str, commit: str | None, mapped: str) -> tuple[str, bool]:
    """`git+<url>@<commit>`, except that a repository of this machine (a `file://` URL or a
    path) is named by `mapped` (e.g. /dgr/upstream/llama.cpp), never by where it lies here:
    a report names no absolute path of the building machine. Also whether it was mapped."""
    url = mask(location)
    if is_local_url(url):
        return f"git+file://{quote(mapped)}" + (f"@{commit}" if commit else ""), True
    return (f"git+{url}@{commit}" if commit else url), False


def _worker(build: LaneBuild, paths: _Paths) -> Descriptor | None:
    if (w := build.worker) is None:
        return None
    annotations: dict[str, Any] = {"dirty": w.dirty}  # and where a local one lies
    if "://" in w.location or w.location.startswith("git@"):
        uri, local = portable_git_uri(w.location, w.commit, "/dgr/worker")
        if local:
            annotations["location"] = "${DGR_WORKER}"
    else:
        # a path, root-relative or absolute: the URI names it as the prefix maps do, never by
        # the machine's path, which becomes a placeholder annotation
        rel = Path(w.location)
        location = paths.text(w.location) if rel.is_absolute() else f"{ROOT_VAR}/{w.location}"
        mapped = "/dgr/worker"  # a path outside root and workspace (as the prefix maps)
        for var, name in ((ROOT_VAR, "/dgr/root"), (WORKSPACE_VAR, "/dgr/workspace")):
            if location.startswith(var + "/"):
                mapped = name + location[len(var) :]
        if not location.startswith("${"):
            location = "${DGR_WORKER}"
        uri = "file://" + quote(mapped)
        annotations["location"] = location
    digest = {"gitCommit": w.commit} if w.commit else None
    return Descriptor("worker", uri, digest, annotations=annotations)


def container_image() -> Descriptor | None:
    ref = os.environ.get("DGR_CONTAINER_IMAGE") or os.environ.get("CI_JOB_IMAGE") or ""
    if not ref or any(c.isspace() or ord(c) < 32 for c in ref) or len(ref) > 512:
        return None
    name, _, digest = ref.partition("@")
    digest = digest or os.environ.get("DGR_CONTAINER_DIGEST", "")
    tag = ""
    if ":" in name.rsplit("/", 1)[-1]:
        name, _, tag = name.rpartition(":")
    algo, _, value = digest.partition(":")
    return Descriptor(
        "container-image",
        "pkg:docker/" + quote(name, safe="/") + (f"@{quote(tag, safe='')}" if tag else ""),
        {"sha256": value} if algo == "sha256" and re.fullmatch(r"[0-9a-f]{64}", value) else None,
        annotations={"image": mask(ref)},
    )


def _byproduct(forge: Forge, path: Path) -> Descriptor:
    """A file the build wrote in the workspace, named as a subject is."""
    digest = {"sha256": sha256_file(path)}
    return Descriptor(workspace_relative(forge, path), digest=digest, media_type="text/plain")


SURFACE_NAME = "worker-surface"
SURFACE_MEDIA_TYPE = "application/vnd.dgr-forge.worker-surface+json"


def surface_byproduct(build: LaneBuild) -> Descriptor | None:
    """What the worker used of upstream (`lanes.boundary`), as a byproduct: the facts in
    `annotations`, their canonical JSON's sha256 as digest."""
    if build.surface is None:
        return None
    import json

    facts = msgspec.to_builtins(build.surface)
    canonical = json.dumps(facts, sort_keys=True, separators=(",", ":")).encode()
    digest = {"sha256": sha256_bytes(canonical)}
    return Descriptor(SURFACE_NAME, None, digest, SURFACE_MEDIA_TYPE, build.surface)


def statement(forge: Forge, build: LaneBuild) -> dict[str, Any]:
    paths = _Paths(forge, build.placeholders)
    subjects = []
    for a in sorted(build.artifacts, key=lambda a: workspace_relative(forge, a.path)):
        notes: dict[str, Any] = {"target": a.name, "kind": a.kind}
        if a.aliases:
            notes["aliases"] = list(a.aliases)
        name = workspace_relative(forge, a.path)
        subjects.append(Descriptor(name, digest={"sha256": a.sha256}, annotations=notes))
    uri, local = portable_git_uri(
        build.upstream_url, build.upstream_commit, f"/dgr/upstream/{build.upstream_name}"
    )
    pin: dict[str, Any] = {"resultTree": build.result_tree, "seriesDigest": build.series_digest}
    if local:  # a repository of the building machine
        pin["location"] = "${DGR_UPSTREAM}"
    if build.upstream_build_number is not None:  # the binaries' version: llama.cpp's b<N>
        pin["buildNumber"] = build.upstream_build_number
        pin["buildCommit"] = build.upstream_build_commit  # and commit string (null: none)
    digest = {"gitCommit": build.upstream_commit, "gitTree": build.upstream_tree}
    resolved = [Descriptor(build.upstream_name, uri, digest, annotations=pin)]
    resolved += [Descriptor(p.file, digest={"sha256": p.sha256}) for p in build.patches]
    resolved += [worker] if (worker := _worker(build, paths)) is not None else []
    if build.toolchain_file and build.toolchain_sha256:
        resolved.append(Descriptor(build.toolchain_file, digest={"sha256": build.toolchain_sha256}))
    resolved += [_tool(t) for t in build.tools]
    if (lock := build.toolkit) is not None:
        name = f"{lock.get('toolkit')}-toolkit"
        resolved.append(
            Descriptor(
                name,
                purl(name, str(lock.get("version") or "")),
                {"sha256": lock.get("lock_sha256")},
                # the lock file (root-relative), each wheel's version as installed from it
                annotations={"lock": lock.get("lock"), "wheels": lock.get("wheels")},
            )
        )
    resolved += [
        Descriptor(workspace_relative(forge, li.path), digest={"sha256": li.sha256},
                   annotations={"note": li.note})
        for li in build.link_inputs
    ]  # fmt: skip
    resolved += [image] if (image := container_image()) is not None else []
    byproducts = [
        _byproduct(forge, path) for path in (build.log_file, build.cmake_cache)
        if path.is_file()
    ]  # fmt: skip
    byproducts += [surface] if (surface := surface_byproduct(build)) is not None else []
    launcher, w = build.compiler_launcher, build.worker
    worker_param = (
        None if w is None else {"location": paths.text(mask(w.location)), "commit": w.commit}
    )
    document = {
        "subject": subjects,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "lane": build.lane,
                    "recipe": FileRef(build.recipe_file, build.recipe_sha256),
                    "manifest": FileRef(build.manifest_file, build.manifest_sha256),
                    "worker": worker_param,
                },
                "internalParameters": {
                    "cmakeArgs": [paths.text(a) for a in build.cmake_args],
                    "compilerLauncher": paths.text(launcher) if launcher else None,
                    "compilerCache": build.cache,  # `cache.select.CacheSetup.record()`
                    "SOURCE_DATE_EPOCH": build.source_date_epoch,
                    "reproducible": build.reproducible,
                },
                "resolvedDependencies": resolved,
            },
            "runDetails": {
                "builder": builder(),
                "metadata": {
                    "invocationId": str(uuid.uuid4()),
                    "startedOn": rfc3339(build.started_on),
                    "finishedOn": rfc3339(build.finished_on),
                },
                "byproducts": byproducts,
            },
        },
        "_type": STATEMENT_TYPE,
        "predicateType": PREDICATE_TYPE,
    }
    return cast(dict[str, Any], msgspec.to_builtins(document))
