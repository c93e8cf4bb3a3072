"""Wheels made from this test environment: a package source pip can install from offline.

Each installed distribution is packed back into the wheel it was installed from: the files
its RECORD lists (byte for byte), its dist-info with a fresh RECORD, the tag from its own
WHEEL file; a file pip placed in bin/ that no console-script entry point generates (ninja's
binary) goes back under `<name>.data/scripts/`. With `PIP_NO_INDEX=1` and
`PIP_FIND_LINKS=<the folder>`, `pip install` then resolves exactly the versions this
environment runs, without the network.

`make_wheel` writes a wheel from given files instead (the CUDA toolkit's stand-ins of
tests/test_toolchain.py and tests/test_exit_codes.py).
"""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

_SKIP_INFO = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def _tag(dist: metadata.Distribution) -> str:
    wheel = dist.read_text("WHEEL") or ""
    tags = re.findall(r"^Tag: *(\S+)$", wheel, re.MULTILINE)
    assert tags, f"{dist.metadata['Name']}: no Tag in its WHEEL file"
    # every tag it was built for, compressed as a wheel name writes them (py2.py3-none-any)
    parts = [sorted({tag.split("-")[i] for tag in tags}) for i in range(3)]
    return "-".join(".".join(p) for p in parts)


def pack(name: str, dest: Path) -> Path:
    """The wheel of the installed distribution `name`, written into `dest`."""
    dist = metadata.distribution(name)
    version = dist.version
    info = next(
        str(f).split("/", 1)[0] for f in dist.files or [] if str(f).endswith(".dist-info/METADATA")
    )
    project = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    data_dir = f"{project}-{version}.data"
    scripts = {e.name for e in dist.entry_points if e.group in ("console_scripts", "gui_scripts")}
    wheel = dest / f"{project}-{version}-{_tag(dist)}.whl"
    record: list[str] = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as zf:
        for file in dist.files or []:
            rel = str(file)
            if "__pycache__" in rel or rel.endswith(".pyc"):
                continue
            if rel.startswith(f"{info}/") and rel.split("/", 1)[1] in _SKIP_INFO:
                continue
            if rel.startswith(".."):
                # outside site-packages: a generated entry-point wrapper, or a script shipped
                if "/bin/" not in rel or Path(rel).name in scripts:
                    continue
                arcname = f"{data_dir}/scripts/{Path(rel).name}"
            else:
                arcname = rel
            path = Path(str(dist.locate_file(file)))
            data = path.read_bytes()
            entry = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
            entry.external_attr = (0o100000 | (path.stat().st_mode & 0o777)) << 16  # keeps +x
            zf.writestr(entry, data)
            record.append(f"{arcname},{_record_hash(data)},{len(data)}")
        record.append(f"{info}/RECORD,,")
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return wheel


def build_backend(repo: Path) -> tuple[str, ...]:
    """The distributions pip's build isolation installs to build `repo`: its pyproject's
    [build-system] requires, and theirs, as installed here, and `editables`, which hatchling
    asks for to build an editable install."""
    import tomllib

    from dgr_forge.ci.install import runtime_pins

    requires = tomllib.loads((repo / "pyproject.toml").read_text())["build-system"]["requires"]
    names = tuple(re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0] for r in requires)
    names = (*names, "editables")
    return (*names, *(pin.split("==")[0] for pin in runtime_pins(names)))


def make_wheelhouse(dest: Path, extra: tuple[str, ...] = ()) -> Path:
    """Wheels of dgr-forge's runtime dependencies as installed here, plus `extra` (the
    build backend pip's build isolation installs to build a source tree, `build_backend`)."""
    dest.mkdir(parents=True, exist_ok=True)
    from dgr_forge.ci.install import runtime_pins

    # the same closure `ci render` pins in ci/constraints.txt: a name it missed is a wheel
    # missing here, and the install in tests/test_ci_runs.py fails
    for name in [*(pin.split("==")[0] for pin in runtime_pins()), *extra]:
        try:
            pack(name, dest)
        except metadata.PackageNotFoundError:
            continue  # a requirement whose marker excludes this platform
    return dest


def copy_worktree(repo: Path, dest: Path) -> Path:
    """The files git would commit from `repo` now (tracked and new, not ignored), as they
    are on disk: a clean tree to build or clone from, without this checkout's build output."""
    import subprocess

    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        source = repo / rel
        if source.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)
    return dest


def make_wheel(dest: Path, name: str, version: str, files: dict[str, tuple[bytes, int]]) -> Path:
    """A wheel pip installs, made from scratch (not from this environment): the files (path
    -> bytes and mode), METADATA, WHEEL and RECORD."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    tag = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    entries = {**files, f"{info}/METADATA": (meta, 0o644), f"{info}/WHEEL": (tag, 0o644)}
    record = [f"{p},{_record_hash(b)},{len(b)}" for p, (b, _) in entries.items()]
    entries[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]).encode() + b"\n", 0o644)
    wheel = dest / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, (data, mode) in entries.items():
            zi = zipfile.ZipInfo(path, date_time=(2025, 1, 1, 0, 0, 0))
            zi.external_attr = (0o100000 | mode) << 16
            zf.writestr(zi, data)
    return wheel


def shared_wheelhouse(tmp_path_factory: Any, extra: tuple[str, ...] = ()) -> Path:
    """`make_wheelhouse(..., extra)` made once per test run and shared by every module and
    xdist worker that asks for the same one (packing cmake's and the rest's ~100 MB was
    ~0.9 CPU-s each time). Read-only to its users: copy a wheel out before changing it.

    Keyed by the interpreter and the distributions' names and versions; made in a fresh
    folder and renamed into place, so a worker never sees a half-made one."""
    import hashlib
    import os
    import sys
    import tempfile

    from dgr_forge.ci.install import runtime_pins

    names = [*(pin.split("==")[0] for pin in runtime_pins()), *extra]
    versions = []
    for name in names:
        try:
            versions.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name}-")
    key = hashlib.sha256("\n".join([sys.prefix, *versions]).encode()).hexdigest()[:16]
    base = Path(tmp_path_factory.getbasetemp())
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's folder, above every worker's own
    dest = base / f"wheelhouse-{key}"
    if dest.is_dir():
        return dest
    made = Path(tempfile.mkdtemp(prefix=".wheelhouse-", dir=base))
    make_wheelhouse(made, extra)
    try:
        made.rename(dest)
    except OSError:  # another worker put its own there first: the same wheels
        shutil.rmtree(made, ignore_errors=True)
    return dest


def uninstall(venv: Path, project: str) -> None:
    """`pip uninstall` of `project` from `venv`, without a pip process (~1 CPU-s): every file
    its RECORD lists, then its dist-info (what pip removes; the jobs' pip installs again)."""
    (info,) = venv.glob(f"lib/python*/site-packages/{project}-*.dist-info")
    site = info.parent
    dirs: set[Path] = set()
    for line in (info / "RECORD").read_text().splitlines():
        rel = line.rsplit(",", 2)[0]
        if not rel:
            continue
        path = (site / rel).resolve() if rel.startswith("..") else site / rel
        path.unlink(missing_ok=True)
        dirs.update(d for d in path.parents if d.is_relative_to(site) and d != site)
    shutil.rmtree(info, ignore_errors=True)
    for folder in sorted(dirs, key=lambda d: len(d.parts), reverse=True):
        if not folder.is_dir():
            continue  # under the dist-info, gone with it
        for cache in folder.glob("__pycache__"):
            shutil.rmtree(cache)
        if folder != site and folder.is_relative_to(site) and not any(folder.iterdir()):
            folder.rmdir()
    assert not list(site.glob(f"{project}-*.dist-info")) and not (site / project).exists()
