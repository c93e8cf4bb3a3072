"""Atomic writes, hashing, and bounded reads of named files: every file a user or a repository names
is opened non-blocking (a FIFO never hangs the open), checked on the descriptor to be a regular file
under a documented size, then read through it; a refusal is exit 2 naming the file.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dgr_forge.core.errors import BadInput

CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    """sha256 of a file the forge wrote or built, links followed, any size; a FIFO or device
    swapped in is exit 2."""
    fd = os.open(path, _OPEN_FLAGS)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _refused(
            str(path),
            "is not a regular file (a directory, device, FIFO or socket)",
            "remove it: the forge hashes regular files only",
        )
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


# The documented read limits (SECURITY.md, "Parsing is bounded"): TOML inputs 4 MiB
# (core/tominput), reports 16 MiB, evidence 1 GiB, CI workflows and keys far less.
MAX_REPORT_BYTES = 16 << 20
MAX_EVIDENCE_BYTES = 1 << 30
MAX_WORKFLOW_BYTES = 1 << 20

_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK


def _link_on(root: Path, rel: Path) -> str | None:
    """The first component of `rel` below `root` that is a symlink (by lstat), if any."""
    for n in range(1, len(rel.parts) + 1):
        if os.path.islink(root.joinpath(*rel.parts[:n])):
            return str(Path(*rel.parts[:n]))
    return None


def open_regular(
    path: Path,
    *,
    what: str,
    hint: str,
    limit: int,
    shown: str | None = None,
    follow: bool = True,
    root: Path | None = None,
) -> tuple[int, os.stat_result]:
    """A read-only descriptor of `path` and its fstat, if it is a regular file of at most
    `limit` bytes (with follow=False not a symlink). Under `root` (what a pull request
    writes) a link at any component is refused before a byte of its target is read."""
    name = shown or str(path)
    problem: str
    flags = _OPEN_FLAGS | (0 if follow else os.O_NOFOLLOW)
    here, top = Path(os.path.abspath(path)), Path(os.path.abspath(root or path))
    rel = here.relative_to(top) if here != top and here.is_relative_to(top) else None
    try:
        if rel is not None and root is not None:
            try:
                fd = open_nofollow(rel, flags, base=root)
            except OSError as err:
                link = _link_on(root, rel) if err.errno in (errno.ELOOP, errno.ENOTDIR) else None
                if link is None:
                    raise
                which = "is" if link == str(rel) else f"lies under {link}, which is"
                raise BadInput(
                    f"{name}: {which} a symbolic link: a file the forge root supplies is "
                    "never read through one",
                    hint=f"commit the {what} itself in place of the link (SECURITY.md: no "
                    "file a forge root supplies may be a link)",
                    details={"file": name, "symlink": link},
                ) from None
        else:
            fd = os.open(path, flags)
    except FileNotFoundError:
        problem = f"no such {what}"
    except IsADirectoryError:
        problem = f"is a directory, not a {what}"
    except ValueError:  # an embedded NUL: no such file can exist
        problem = f"the path contains a NUL byte: no such {what}"
    except OSError as err:
        if not follow and os.path.islink(path):
            problem = f"is a symlink, not a {what}: it is never followed"
        else:
            problem = f"cannot read the {what}: {err.strerror}"
    else:
        return fd, _checked(fd, name, what=what, hint=hint, limit=limit)
    raise _refused(name, problem, hint)


def _refused(name: str, problem: str, hint: str) -> BadInput:
    return BadInput(f"{name}: {problem}", hint=hint, details={"file": name})


def _checked(fd: int, name: str, *, what: str, hint: str, limit: int) -> os.stat_result:
    """`fd`'s fstat when it is a regular file of at most `limit` bytes, else closed, exit 2."""
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        problem = f"is a directory, not a {what}"
    elif not stat.S_ISREG(st.st_mode):
        problem = f"is not a regular file (a device, FIFO or socket), not a {what}"
    elif st.st_size > limit:
        problem = f"is {st.st_size} bytes, over the {limit}-byte limit for a {what}"
    else:
        os.set_blocking(fd, True)
        return st
    os.close(fd)
    raise _refused(name, problem, hint)


def _read(fd: int, name: str, *, what: str, hint: str, limit: int) -> bytes:
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(limit + 1)  # the file may grow after fstat
        except OSError as err:
            raise _refused(name, f"cannot read the {what}: {err.strerror}", hint) from None
    if len(data) > limit:
        raise _refused(name, f"is over the {limit}-byte limit for a {what}", hint)
    return data


def read_regular(
    path: Path,
    *,
    what: str,
    hint: str,
    limit: int,
    shown: str | None = None,
    follow: bool = True,
    root: Path | None = None,
) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (see `open_regular`)."""
    fd, _ = open_regular(
        path, what=what, hint=hint, limit=limit, shown=shown, follow=follow, root=root
    )
    return _read(fd, shown or str(path), what=what, hint=hint, limit=limit)


# A file of a tree the forge did not write (upstream, the patched tree, a worker, a
# conflict): llama.cpp's largest tracked file is a few MiB; a bound far above it.
MAX_TREE_FILE_BYTES = 32 << 20

_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_nofollow(path: Path, flags: int = _OPEN_FLAGS, *, base: Path | None = None) -> int:
    """`path` opened one component at a time with O_NOFOLLOW, from `base` (`path` relative
    to it) or "/": a symlink or ".." at any component is OSError(ELOOP)."""
    parts = path.parts
    if base is None:
        if not path.is_absolute():
            path = Path.cwd() / path
        parts, start = path.parts[1:], "/"
    else:
        start = str(base)
    if any(p in ("..", "") for p in parts) or not parts:
        raise OSError(errno.ELOOP, "the path has a '..' component or names no file", str(path))
    fd = os.open(start, _DIR_FLAGS & ~os.O_NOFOLLOW)  # the base itself is the caller's
    try:
        for part in parts[:-1]:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return os.open(parts[-1], flags | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)


def read_tree_file(
    root: Path,
    rel: str,
    *,
    what: str = "tree file",
    hint: str,
    limit: int = MAX_TREE_FILE_BYTES,
    missing_ok: bool = False,
) -> bytes | None:
    """The bytes of `rel` in the tree at `root` as git stores it: a file's content, or a
    symlink's target text (never followed); missing is None with missing_ok."""
    shown = str(root / rel)
    problem: str
    try:
        fd = open_nofollow(Path(rel), base=root)
    except FileNotFoundError:
        if missing_ok:
            return None
        problem = f"no such {what}"
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            return _link_text(root, rel, what=what, hint=hint, limit=limit)
        problem = f"cannot read the {what}: {err.strerror}"
    else:
        _checked(fd, shown, what=what, hint=hint, limit=limit)
        return _read(fd, shown, what=what, hint=hint, limit=limit)
    raise _refused(shown, problem, hint)


def _link_text(root: Path, rel: str, *, what: str, hint: str, limit: int) -> bytes:
    """A symlink's text; a link among the directories above it is refused, not followed."""
    shown = str(root / rel)
    head, _, name = rel.rpartition("/")
    try:
        parent = open_nofollow(Path(head), _DIR_FLAGS, base=root) if head else None
    except OSError:
        parent = None
        problem = f"a directory above it is a symlink: a {what} is never read through a link"
    else:
        try:
            target = os.readlink(name if parent is not None else root / name, dir_fd=parent)
        except OSError as err:
            problem = f"cannot read the {what}: {err.strerror}"
        else:
            if len(data := os.fsencode(target)) <= limit:
                return data
            problem = f"is over the {limit}-byte limit for a {what}"
        finally:
            if parent is not None:
                os.close(parent)
    raise _refused(shown, problem, hint)


def sha256_regular(
    path: Path, *, what: str, hint: str, limit: int, shown: str | None = None
) -> str:
    """sha256 of a regular file of at most `limit` bytes, never read past `limit`."""
    name = shown or str(path)
    fd, _ = open_regular(path, what=what, hint=hint, limit=limit, shown=shown)
    h = hashlib.sha256()
    total = 0
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(CHUNK):
            total += len(chunk)
            if total > limit:
                raise _refused(name, f"is over the {limit}-byte limit for a {what}", hint)
            h.update(chunk)
    return h.hexdigest()


def refuse_shared(path: Path, what: str) -> None:
    """Exit 2 naming `path` when another user owns it or may write to it: the forge trusts
    what it finds there (object files, stamps, state)."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    others = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if stat.S_ISLNK(st.st_mode):
        return
    if st.st_uid != os.getuid() or others:
        who = "writable by other users" if others else f"owned by another user (uid {st.st_uid})"
        raise BadInput(
            f"{path}: the forge's {what} is {who} (mode {stat.S_IMODE(st.st_mode):04o})",
            hint=f"`chmod go-w {path}` if you trust what is in it, else remove it "
            "(the forge recreates it)",
            details={"file": str(path)},
        )


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
    `durable=False` leaves out the fsync, for progress a power loss may take back (git does
    not fsync the objects such a file names either)."""
    atomic_write_many([(path, data)], mode, durable=durable)


def atomic_write_many(
    items: Sequence[tuple[Path, bytes]], mode: int | None = None, *, durable: bool = True
) -> None:
    """`atomic_write_bytes` for several files: all written, then synced, then renamed."""
    import tempfile  # ~1 ms with the random it imports: only where a file is written

    staged: list[tuple[Path, str]] = []
    open_fds: list[int] = []
    try:
        for path, data in items:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            open_fds.append(fd)
            staged.append((path, tmp))
            write_all(fd, data)
            # mkstemp makes 0600 files: keep the mode of the file we replace, else the
            # umask default, so a rewritten manifest or patch stays readable as before
            os.chmod(tmp, mode if mode is not None else _mode_for(path))
        if durable:  # written first, synced after, together
            sync_all(open_fds)
        while open_fds:
            os.close(open_fds.pop())
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


def write_all(fd: int, data: bytes) -> None:
    """All of `data` to `fd` (os.write may take part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def sync_all(fds: Sequence[int]) -> None:
    """fsync each of `fds`, concurrently: the file system commits the waiting syncs together
    (38 small files on ext4 here: 16-33 ms, against 106-178 ms one after another)."""
    if len(fds) < 2:
        for fd in fds:
            os.fsync(fd)
        return
    from concurrent.futures import ThreadPoolExecutor  # ~5 ms: only for a batch

    with ThreadPoolExecutor(min(16, len(fds))) as pool:
        list(pool.map(os.fsync, fds))


def atomic_write_text(path: Path, text: str, mode: int | None = None) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def write_json(path: Path, data: Any, *, durable: bool = True) -> None:
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable)


def file_identity(path: str) -> tuple[str, int, int, int, int, int] | None:
    """The file `path` resolves to: its real path, size, mtime, ctime, inode, device."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return None
    return (real, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
