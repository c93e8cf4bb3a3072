"""The destination directory: where model files may land, room for them, one writer at a time.

A destination may be shared with other local users, so nothing here follows a symlink
planted inside it: the provision lock, partial downloads (`NAME.part`) and final files are
opened with O_NOFOLLOW and checked to be regular files on the descriptor that is then used.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path

from dgr_forge.core.errors import BadInput, OperationFailed
from dgr_forge.core.lock import LockWords, hold, holder_of
from dgr_forge.core.output import Reporter
from dgr_forge.models.hashing import human
from dgr_forge.models.manifest import PART_SUFFIX, ModelFile

LOCK_FILE = ".dgr-provision.lock"
# Model files must not land on the home file system (small, quota'd, backed up).
FORBIDDEN_ROOTS = ("/home",)
# O_NONBLOCK: opening a planted FIFO must not hang; it is refused after fstat
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _forbidden(resolved: Path) -> tuple[str, str] | None:
    """The forbidden root `resolved` is under, and how: by path, else by (device, inode) of
    it or the nearest existing directory above it (a path string can be a bind mount)."""
    ids: dict[tuple[int, int], str] = {}
    for root in FORBIDDEN_ROOTS:
        if any(resolved.is_relative_to(p) for p in {Path(root), Path(os.path.realpath(root))}):
            return root, ""
        with suppress(OSError):
            st = os.stat(root)
            ids[(st.st_dev, st.st_ino)] = root
    for candidate in (resolved, *resolved.parents):
        try:
            st = os.stat(candidate)
        except OSError:
            continue  # not created yet: its parents decide
        if (same := ids.get((st.st_dev, st.st_ino))) is not None:
            return same, f" (the same directory as {same}: a mount)"
    return None


def check_destination(dest: Path) -> Path:
    """The destination with symlinks resolved; BadInput if it is (or would be) under /home,
    by path or by identity (a bind mount of /home elsewhere is /home too). Every `--dest`
    (provision, verify, map, certify) is resolved here and used only as returned."""
    resolved = Path(os.path.realpath(Path.cwd() / dest.expanduser()))
    if (hit := _forbidden(resolved)) is not None:
        root, how = hit
        raise BadInput(
            f"--dest {dest}: resolves to {resolved}, under {root}{how}: model artifacts "
            f"are never stored under {root}",
            hint="pass a directory on the data disk, e.g. --dest /srv/models/<name> "
            "(symlinks and mounts are followed, so a link or a bind mount of /home is refused "
            "too)",
            details={"dest": str(dest), "resolved": str(resolved)},
        )
    if resolved.exists() and not resolved.is_dir():
        raise BadInput(
            f"--dest {dest}: {resolved} exists and is not a directory",
            hint="pass a directory (it is created if missing)",
            details={"dest": str(dest)},
        )
    return resolved


def _regular_size(path: Path) -> int | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def missing_bytes(dest: Path, files: tuple[ModelFile, ...]) -> int:
    """Bytes still to download: a present file of the right size counts as done."""
    need = 0
    for f in files:
        if _regular_size(dest / f.name) != f.size:
            have = _regular_size(dest / (f.name + PART_SUFFIX)) or 0
            need += f.size - have if have <= f.size else f.size
    return need


def check_space(dest: Path, files: tuple[ModelFile, ...]) -> tuple[int, int]:
    need = missing_bytes(dest, files)
    anchor = next((p for p in (dest, *dest.parents) if p.exists()), Path(dest.anchor or "/"))
    if need > (free := shutil.disk_usage(anchor).free):
        raise BadInput(
            f"--dest {dest}: not enough free space: {human(need)} ({need} bytes) still to "
            f"download, {human(free)} ({free} bytes) free on the file system of {anchor}",
            hint="free space there or pass a --dest on a larger disk",
            details={"dest": str(dest), "needed_bytes": need, "free_bytes": free},
        )
    return need, free


_KINDS = {
    stat.S_IFLNK: "a symlink", stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket", stat.S_IFREG: "a regular file",
}  # fmt: skip


def kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "a device or other special file")


class DestDir(AbstractContextManager["DestDir"]):
    """The destination, held open (on Linux, checked to be the one that passed the /home
    rule): every file in it is opened by name from this descriptor, O_NOFOLLOW, so a path
    component above it swapped for a symlink later cannot redirect a write."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
        except OSError as err:
            raise BadInput(
                f"--dest {path}: cannot open the directory ({err.strerror})",
                hint="pass a directory you can write to (symlinks are resolved first)",
                details={"dest": str(path)},
            ) from None
        try:
            held = os.readlink(f"/proc/self/fd/{self.fd}")
        except OSError:
            held = None  # no /proc (macOS): the O_NOFOLLOW open is the check
        if held is not None and held != str(path):
            os.close(self.fd)
            raise BadInput(
                f"--dest {path}: the directory changed while provision opened it (now {held})",
                hint="make sure nobody else can rename the directories above --dest",
                details={"dest": str(path), "resolved": held},
            )

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def __truediv__(self, name: str) -> Path:
        return self.path / name  # for messages; the files are opened through self.fd

    def lstat(self, name: str) -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except OSError:
            return None

    def unlink(self, name: str) -> None:
        with suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self.fd)  # removes a link itself, never its target

    def replace(self, src: str, dst: str) -> None:
        """Atomic rename inside the directory; a planted link at `dst` is replaced, not followed."""
        os.replace(src, dst, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def fsync(self) -> None:
        with suppress(OSError):
            os.fsync(self.fd)

    def refuse_planted(self, files: tuple[ModelFile, ...]) -> None:
        """BadInput when a final file's name is a symlink or other non-file: provision would
        read (and report as present) whatever it points at, a way to pass off a file."""
        for f in files:
            if (st := self.lstat(f.name)) is not None and not stat.S_ISREG(st.st_mode):
                path = self / f.name
                raise BadInput(
                    f"{path}: is {kind(st.st_mode)}, not a regular file; model files are never "
                    "read or written through one",
                    hint=f"remove it (`rm {path}`) and re-run provision",
                    details={"dest": str(self.path), "file": f.name},
                )

    def _open(self, name: str, flags: int) -> int | tuple[int, OSError | None]:
        """A descriptor of the regular file `name`, else (its mode, the error opening it); the
        OSError when there is no `name`, or a regular file we may not open (permissions)."""
        try:
            fd = os.open(name, flags | _NOFOLLOW, 0o644, dir_fd=self.fd)
        except OSError as err:
            st = None if isinstance(err, FileNotFoundError) else self.lstat(name)
            if st is None or stat.S_ISREG(st.st_mode):
                err.filename = str(self / name)
                raise
            return st.st_mode, err  # ELOOP (a symlink), EISDIR, ENXIO (a socket)
        if stat.S_ISREG(mode := os.fstat(fd).st_mode):
            return fd
        os.close(fd)
        return mode, None

    def open_final(self, name: str) -> int | None:
        """A read-only descriptor of a final file, None when absent; never through a link."""
        got = None
        with suppress(FileNotFoundError):
            got = self._open(name, os.O_RDONLY)
        if got is None or isinstance(got, int):
            return got
        why = f" ({got[1].strerror})" if got[1] else ""
        raise OperationFailed(
            f"{self / name}: is {kind(got[0])}, not a regular file{why}",
            hint=f"remove it (`rm {self / name}`) and re-run provision",
        )

    def open_part(self, name: str, out: Reporter) -> int:
        """`NAME.part` opened for append, checked on its descriptor (a planted non-file there
        is removed, started over; a part we may not write, another user's, is never deleted);
        a new one is created O_EXCL, so a link planted in between fails, never followed."""
        flags = os.O_RDWR | os.O_APPEND
        got = None
        with suppress(FileNotFoundError):
            got = self._open(name, flags)
        if isinstance(got, int):
            return got
        if got is not None:  # not a part we wrote
            if stat.S_ISDIR(got[0]):
                raise OperationFailed(
                    f"{self / name}: is a directory, not a partial download",
                    hint=f"remove it (`rm -r {self / name}`) and re-run provision",
                )
            out.warn(f"{name} is {kind(got[0])}, not a partial download; removed it, starting over")
            self.unlink(name)
        try:
            # 0600 until verified: another user never reads bytes that came from a
            # source only this one may read
            return os.open(name, flags | _NOFOLLOW | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=self.fd)
        except FileExistsError:
            raise OperationFailed(
                f"{self / name}: appeared while provision was creating it (another writer?)",
                hint="make sure nothing else writes into --dest, then re-run provision",
            ) from None


@contextmanager
def dest_lock(dest: DestDir, out: Reporter) -> Iterator[None]:
    """One provision per destination at a time (two writers on one NAME.part corrupt it),
    waiting up to DGR_LOCK_TIMEOUT seconds like the forge lock."""
    path = dest / LOCK_FILE
    try:
        fd = dest._open(LOCK_FILE, os.O_RDWR | os.O_CREAT)
    except OSError as err:  # e.g. another user's, not writable
        raise BadInput(
            f"{path}: cannot open the provision lock ({err.strerror})",
            hint="provision as a user who may write into --dest, or pass another --dest",
            details={"lock": str(path)},
        ) from None
    if not isinstance(fd, int):
        why = f" ({fd[1].strerror}); it is never followed" if fd[1] else ", not a regular file"
        raise BadInput(
            f"{path}: the provision lock is {kind(fd[0])}{why}",
            hint=f"remove it (`rm {path}`) and re-run provision",
            details={"lock": str(path)},
        )
    words = LockWords(
        busy=f"{dest.path} is being provisioned",
        still_busy=f"{dest.path} still being provisioned",
        label="provision lock",
    )
    try:
        with hold(fd, path, words, out.info, lambda: holder_of(fd)):
            yield
    finally:
        os.close(fd)
