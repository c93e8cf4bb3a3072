"""patches/ and the manifest written together through one crash-safe journal: rolled back on
a failure, after a kill rolled forward or removed by `recover`; the old series is never
deleted before the manifest is replaced (docs/architecture.md, 'The series journal').
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import shutil
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NoReturn

import msgspec

from dgr_forge.core import fault, gitutil
from dgr_forge.core.errors import OperationFailed
from dgr_forge.core.fsutil import read_tree_file, sync_all, write_all
from dgr_forge.core.lock import root_lock
from dgr_forge.core.output import Reporter
from dgr_forge.upstream import patchfile

JOURNAL_FILE = "journal.json"


class _Record(msgspec.Struct):
    pid: int
    patches_dir: str
    manifest: str
    old: dict[str, str]  # file -> sha256 of the patches directory before the swap


_MARK = ".journal-"


def _journal_glob(pdir: Path) -> list[Path]:
    return sorted(pdir.parent.glob(f".{pdir.name}{_MARK}*"))  # none where there is no dir


def owner_pid(path: Path) -> int | None:
    parts = path.name.rsplit("-", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def owner_alive(pid: int | None) -> bool:
    # pid 0 would ask after this process group and a huge one overflows kill(): neither
    # is a process that can own a journal
    if pid is None or pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    # a killed run whose parent has not waited for it yet still answers kill(0); its
    # locks are already released, so a waiter may be running before the parent reaps it
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        try:
            line = os.read(fd, 4096)
        finally:
            os.close(fd)
    except OSError:  # no procfs (macOS): kill(0) is the only sign
        return True
    return line[line.rfind(b")") + 2 :][:1] != b"Z"


def _digest(pdir: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(patch_bytes(pdir, p.name) or b"").hexdigest()
        for p in sorted(pdir.glob("*.patch"))
        if p.is_file() or p.is_symlink()
    }


def patch_bytes(pdir: Path, name: str) -> bytes | None:
    """A patch file of the root (a tree a pull request writes) as git stores it: bounded, a
    link's text, a FIFO exit 2; None when it is gone."""
    hint = "patches/ holds regular patch files: remove what is not one"
    return read_tree_file(
        pdir, name, what="patch file", hint=hint, limit=patchfile.MAX_PATCH_BYTES, missing_ok=True
    )


def _link_same(src: Path, dst: Path, data: bytes, points: str) -> bool:
    try:
        if not stat.S_ISREG(src.lstat().st_mode) or patch_bytes(src.parent, src.name) != data:
            return False
    except OSError:
        return False
    fault.point(f"{points}.write", dst.name)
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        return False
    return True


def _write(path: Path, data: bytes, point: str, opened: list[int]) -> None:
    """`data` written to `path`; its descriptor left in `opened`, which the caller syncs
    (`fsutil.sync_all`) and closes."""
    fault.point(point, path.name)
    opened.append(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666))
    write_all(opened[-1], data)


def _failed(err: BaseException, jdir: Path, where: Path) -> NoReturn:
    """A failed write's journal `jdir` removed; `err` raised again, an OSError as what it is."""
    shutil.rmtree(jdir, ignore_errors=True)
    if not isinstance(err, OSError):
        raise err
    why = "the disk is full" if err.errno == errno.ENOSPC else (err.strerror or str(err))
    raise OperationFailed(
        f"writing {where} failed: {why}; patches/ and the manifest are unchanged",
        hint="free some space (or fix the permissions) and run the command again",
        details={"path": str(where)},
    ) from None


def write(
    root: Path,
    pdir: Path,
    files: Mapping[str, bytes],
    manifest_path: Path,
    manifest_bytes: bytes | None,
    *,
    points: str,
    out: Reporter,
    linked: Path | None = None,
) -> None:
    """`pdir`'s `*.patch` files made exactly `files` and the manifest `manifest_bytes` (None:
    unchanged), as one crash-safe step. `linked`: where a caller's own journal holds these
    files synced (rebase's staged series): linked, not written again. `points` prefixes the
    fault points (`.write`, `.staged`, `.swapped`, `.manifest`)."""
    with root_lock(root, out):
        for jdir in _dead(_journal_glob(pdir)):
            _recover_one(jdir, out)
        on_disk = {p.name for p in pdir.glob("*.patch")} if pdir.is_dir() else set()
        same = on_disk == set(files) and all(patch_bytes(pdir, n) == d for n, d in files.items())
        if same and manifest_bytes is None:
            return  # already there (e.g. a write finished by recovery)
        pdir.parent.mkdir(parents=True, exist_ok=True)
        jdir = pdir.parent / f".{pdir.name}{_MARK}{os.getpid()}-{os.urandom(4).hex()}"
        stage = jdir / "series"
        opened: list[int] = []  # the staged files, synced together, then the record
        try:
            stage.mkdir(parents=True)
            for entry in pdir.iterdir() if pdir.is_dir() else ():
                if entry.name.endswith(".patch"):
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    # each file hard-linked: no byte read (a FIFO or a huge file kept in
                    # a subdirectory of patches/ is carried over, never opened)
                    link = functools.partial(os.link, follow_symlinks=False)
                    shutil.copytree(entry, stage / entry.name, symlinks=True, copy_function=link)
                else:
                    os.link(entry, stage / entry.name, follow_symlinks=False)
            for name, data in files.items():
                old = pdir / name
                if old.is_file() and not old.is_symlink() and patch_bytes(pdir, name) == data:
                    os.link(old, stage / name, follow_symlinks=False)  # same bytes, inode, mtime
                elif linked is None or not _link_same(linked / name, stage / name, data, points):
                    _write(stage / name, data, f"{points}.write", opened)
            os.chmod(stage, pdir.stat().st_mode & 0o777 if pdir.is_dir() else 0o755)
            if manifest_bytes is not None:
                staged = jdir / "manifest.toml"
                _write(staged, manifest_bytes, f"{points}.write", opened)
                os.chmod(staged, manifest_path.stat().st_mode & 0o777)
            sync_all(opened)
            record = _Record(os.getpid(), str(pdir), str(manifest_path), _digest(pdir))
            _write(jdir / JOURNAL_FILE, msgspec.json.encode(record), f"{points}.write", opened)
            sync_all(opened[-1:])
            fault.point(f"{points}.staged")
        except BaseException as err:
            _failed(err, jdir, pdir)
        finally:
            for fd in opened:
                os.close(fd)
        _swap(jdir, pdir, manifest_path, points)


def _swap(jdir: Path, pdir: Path, manifest_path: Path, points: str) -> None:
    old, stage, staged = jdir / "old", jdir / "series", jdir / "manifest.toml"
    had_old = pdir.exists()
    try:
        if had_old:
            os.rename(pdir, old)
        os.rename(stage, pdir)
        fault.point(f"{points}.swapped")
        if staged.exists():
            os.replace(staged, manifest_path)
    except BaseException as err:
        # rolled back in this process: the old series and manifest stay
        if had_old and old.exists():
            if pdir.exists():
                os.rename(pdir, stage)
            os.rename(old, pdir)
        _failed(err, jdir, pdir)
    try:
        fault.point(f"{points}.manifest")
    finally:  # the write is complete either way: only the journal is left to remove
        shutil.rmtree(jdir, ignore_errors=True)


def _dead(journals: list[Path]) -> list[Path]:
    # a live owner's journal is its own business (it holds the root lock): don't wait on it
    return [j for j in journals if j.is_dir() and not owner_alive(owner_pid(j))]


def pending(pdir: Path) -> bool:
    return bool(_dead(_journal_glob(pdir)))


def interrupted(root: Path, pdir: Path | None = None) -> list[Path]:
    """Dead writers' journals under `root`/patches (and next to `pdir`); reads only."""
    patches_root = root / "patches"
    found = _dead(sorted(patches_root.glob(f".*{_MARK}*")))
    if pdir is not None and pdir.parent != patches_root:
        found += _dead(_journal_glob(pdir))
    return found


def recover(root: Path, out: Reporter, *, pdir: Path | None = None) -> None:
    """Finish or undo what a killed writer left under `root`/patches (and next to `pdir`)."""
    patches_root = root / "patches"
    found = interrupted(root, pdir)
    legacy = list(patches_root.glob(".*.export-*"))
    # a manifest's atomic-write temp file: an orphan, since every writer holds the root lock
    orphans = list((root / "manifests").glob(".*.toml.*.tmp"))
    if not found and not legacy and not orphans:
        return
    with root_lock(root, out):
        for leftover in legacy:  # an older dgr-forge's export staging: never half-swapped
            name = leftover.name[1:].split(".export-")[0]
            if "-old-" in leftover.name and not (patches_root / name).exists():
                os.rename(leftover, patches_root / name)
            else:
                shutil.rmtree(leftover, ignore_errors=True)
        for jdir in found:
            # under the root lock no other writer runs: a journal still here is dead, even
            # if its pid has since been given to another process
            if jdir.exists():
                _recover_one(jdir, out)
        for orphan in orphans:
            with contextlib.suppress(OSError):
                orphan.unlink()


def _recover_one(jdir: Path, out: Reporter) -> None:
    try:
        record = msgspec.json.decode((jdir / JOURNAL_FILE).read_bytes(), type=_Record)
    except (OSError, ValueError):  # msgspec's DecodeError is one
        # incomplete: the run died while staging, before any swap: roll back
        out.warn(f"removing {jdir.name}: an export/rebase killed while staging (nothing swapped)")
        shutil.rmtree(jdir, ignore_errors=True)
        return
    pdir, manifest_path = Path(record.patches_dir), Path(record.manifest)
    old, stage, staged = jdir / "old", jdir / "series", jdir / "manifest.toml"
    if stage.exists() and not old.exists() and pdir.exists():
        if _digest(pdir) != record.old:
            # edited by hand since the kill: the person's files win, the journal goes
            out.warn(f"{pdir} changed since an interrupted write; dropping {jdir.name}")
            shutil.rmtree(jdir, ignore_errors=True)
            return
        os.rename(pdir, old)
    if stage.exists() and not pdir.exists():
        os.rename(stage, pdir)
    if staged.exists():
        os.replace(staged, manifest_path)
    out.warn(f"finished an interrupted write of {pdir.name} and the manifest ({jdir.name})")
    shutil.rmtree(jdir, ignore_errors=True)


# Scratch directories, under the workspace's `tmp/`, are named `<prefix><pid>-<random>`: a
# killed run's is recognised as orphaned (its owner is dead) and removed by the next run.
# They are 0700, as a TemporaryDirectory is: another user never reads a scratch copy.


@contextlib.contextmanager
def scratch_dir(tmp_root: Path | None, prefix: str) -> Iterator[Path]:
    if tmp_root is None:
        import tempfile  # not on a no-op's path (nor is `secrets`: os.urandom names)

        with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
            yield Path(tmp)
        return
    tmp_root.mkdir(parents=True, exist_ok=True)
    for entry in tmp_root.glob(f"{prefix}*"):
        pid = owner_pid(entry)
        if pid is not None and pid != os.getpid() and not owner_alive(pid):
            shutil.rmtree(entry, ignore_errors=True)
    path = tmp_root / f"{prefix}{os.getpid()}-{os.urandom(4).hex()}"
    path.mkdir(mode=0o700)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def borrow_objects(own: Path, scratch_src: Path, out: Reporter) -> None:
    """A scratch repository reads this root's own workspace's objects (alternates): no
    network for what it has; ids are still verified by fetch."""
    if not (objects := own / ".git" / "objects").is_dir():
        return
    gitutil.git(None, "init", "-q", str(scratch_src))
    info = scratch_src / ".git" / "objects" / "info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "alternates").write_text(f"{objects.resolve()}\n", encoding="utf-8")
    if (shallow := own / ".git" / "shallow").is_file():
        shutil.copyfile(shallow, scratch_src / ".git" / "shallow")
    out.info(f"scratch workspace: reading objects from {own}")
