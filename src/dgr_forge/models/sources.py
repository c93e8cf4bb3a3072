"""Where a model file comes from: the manifest's URL or the `--mirror` base, and the
`file://` sources a manifest may name (only under a directory the operator allowed: the
--mirror directory or DGR_ARTIFACTS_FILE_ROOTS), each opened with no link followed.
Shared by provisioning (`download`, `provision`) and `artifacts map` (`map_headers`).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

from dgr_forge.core.errors import BadInput
from dgr_forge.core.fsutil import open_nofollow
from dgr_forge.core.urls import check_url, mask
from dgr_forge.models import manifest as models
from dgr_forge.models.manifest import ModelFile


def source_url(f: ModelFile, mirror: str | None) -> str:
    return models.file_url(mirror, f.name) if mirror else f.url


FILE_ROOTS_ENV = "DGR_ARTIFACTS_FILE_ROOTS"


def file_source_path(url: str) -> Path:
    return Path(url2pathname(unquote(urlsplit(url).path)))


def check_file_sources(
    files: tuple[ModelFile, ...], mirror: str | None, shown_manifest: str
) -> None:
    """A `file://` URL reads this host's files with the rights of whoever provisions: the
    manifest's author may name only files under a directory the operator allowed (the
    --mirror directory, or DGR_ARTIFACTS_FILE_ROOTS, a path list). Exit 2 before any file
    is looked at (not even its size) otherwise."""
    roots = file_roots(mirror)
    for f in files:
        url = source_url(f, mirror)
        if urlsplit(url).scheme != "file":
            continue
        if not allowed(os.path.realpath(file_source_path(url)), roots):
            raise outside_roots(f"{shown_manifest}: {f.name}", url, f.name)


def file_roots(mirror: str | None) -> tuple[str, ...]:
    """The directories file:// sources may come from, resolved: --mirror, FILE_ROOTS_ENV."""
    roots: list[str] = []
    if mirror is not None and urlsplit(mirror).scheme == "file":
        roots.append(os.path.realpath(file_source_path(mirror)))
    for entry in os.environ.get(FILE_ROOTS_ENV, "").split(os.pathsep):
        if entry.strip():
            roots.append(os.path.realpath(Path(entry).expanduser()))
    return tuple(roots)


def allowed(real: str, roots: tuple[str, ...]) -> bool:
    return any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots)


def outside_roots(where: str, url: str, name: str) -> BadInput:
    return BadInput(
        f"{where}: the file URL {mask(url)} is outside the directories allowed for file:// sources",
        hint=f"pass --mirror DIR, or allow the directory with {FILE_ROOTS_ENV}=DIR "
        "(a manifest may not read any file of this host on its own)",
        details={"file": name, "variable": FILE_ROOTS_ENV},
    )


class OutsideRoots(PermissionError):
    """A file:// source outside the allowed directories, found on its descriptor."""


def open_file_source(path: Path, roots: tuple[str, ...]) -> int:
    """A read-only, non-blocking descriptor of the file:// source `path`, opened with no
    link followed at any component, and checked on the descriptor to lie under `roots`:
    OSError (ELOOP for a link, EACCES for a file outside them) otherwise."""
    fd = open_nofollow(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:  # the path the kernel holds for `fd`
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # no /proc: no link was followed to open it, so the path is its own
        real = os.path.normpath(path)
    if not allowed(real, roots):
        os.close(fd)
        raise OutsideRoots(errno.EACCES, "outside the directories allowed for file://")
    return fd


def check_mirror(mirror: str | None) -> str | None:
    """A mirror base URL; a plain directory path becomes a file:// URL."""
    if mirror is None:
        return None
    if "://" not in mirror and not mirror.startswith("-"):
        path = Path(mirror).expanduser()
        if path.is_dir():
            return path.resolve().as_uri()
    check_url(mirror, "--mirror", schemes=models.URL_SCHEMES)
    problem = models.check_url(mirror)
    if problem:
        raise BadInput(
            f"--mirror: {problem}",
            hint="pass a base URL (http://, https://, file://) or a directory holding the files",
            details={"mirror": mask(mirror)},
        )
    return mirror
