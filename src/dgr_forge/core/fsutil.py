"""Small file-system helpers: atomic writes and hashing."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
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


def atomic_write_bytes(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write via a temp file in the same directory + fsync + rename: readers see old or new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes 0600 files: keep the mode of the file we replace, else the
        # umask default, so a rewritten manifest or patch stays readable as before
        os.chmod(tmp, mode if mode is not None else _mode_for(path))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str, mode: int | None = None) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
