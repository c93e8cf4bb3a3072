"""Small file-system helpers: atomic writes and hashing."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dgr_forge.core.errors import BadInput

CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def read_input(path: Path, *, what: str, hint: str, shown: str | None = None) -> bytes:
    """The bytes of an input file; missing or unreadable is exit 2 naming the file."""
    name = shown or str(path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        problem = f"no such {what}"
    except IsADirectoryError:
        problem = f"is a directory, not a {what}"
    except OSError as err:
        problem = f"cannot read the {what}: {err.strerror}"
    raise BadInput(f"{name}: {problem}", hint=hint, details={"file": name})


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _mode_for(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def atomic_write_bytes(
    path: Path, data: bytes, mode: int | None = None, *, durable: bool = True
) -> None:
    """Write via a temp file in the same directory + fsync + rename: readers see old or new.
    `durable=False` leaves out the fsync, for progress that a power loss may take back (git
    does not fsync the objects such a file names either); a killed process still leaves the
    old or the new bytes."""
    atomic_write_many([(path, data)], mode, durable=durable)


def atomic_write_many(
    items: Sequence[tuple[Path, bytes]], mode: int | None = None, *, durable: bool = True
) -> None:
    """`atomic_write_bytes` for several files: all written, then all synced, then each
    renamed into place (one disk flush for the batch instead of one per file)."""
    staged: list[tuple[Path, str]] = []
    open_fds: list[int] = []
    try:
        for path, data in items:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            open_fds.append(fd)
            staged.append((path, tmp))
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            # mkstemp makes 0600 files: keep the mode of the file we replace, else the
            # umask default, so a rewritten manifest or patch stays readable as before
            os.chmod(tmp, mode if mode is not None else _mode_for(path))
        while open_fds:  # written first, synced after: the disk flushes the batch at once
            if durable:
                os.fsync(open_fds[0])
            os.close(open_fds.pop(0))
        while staged:
            path, tmp = staged[0]
            os.replace(tmp, path)
            staged.pop(0)
    except BaseException:
        for fd in open_fds:
            os.close(fd)
        for _, tmp in staged:
            Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str, mode: int | None = None) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def write_json(path: Path, data: Any, *, durable: bool = True) -> None:
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable)
