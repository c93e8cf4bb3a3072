"""Crash safety of export and rebase (issue 14): SIGKILL or a full disk at every named fault
point (DGR_FAULT), then the next plain run completes and nothing is lost; two workspaces
on one root serialize on the root lock."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import Result
from support.git import Upstream, sh_git
from support.rebase import LLAMA_OWNER_OLD, kill, make_series, start_paused_cmd, upstream_edit
from support.roots import Series

from dgr_forge.core.errors import BadInput
from dgr_forge.core.output import Reporter
from dgr_forge.upstream import manifest, series_journal

KILLED = (-9, 137)
DATE = "2025-03-01T00:00:00Z"


@pytest.fixture
def series(tmp_path: Path, upstream: Upstream) -> Series:
    return make_series(tmp_path, upstream)


def fault(s: Series, spec: str, *args: str) -> Result:
    return s.forge(*args, env={"DGR_FAULT": spec})


def twin(s: Series, tmp: Path) -> Series:
    """A byte-identical copy of the root and its workspace: the uninterrupted run's result."""
    dest = tmp / "twin"
    shutil.copytree(s.root, dest, symlinks=True)
    return Series(dest, s.upstream, s.pin)


def leftovers(s: Series) -> list[str]:
    found = [p.name for p in s.root.joinpath("patches").iterdir() if p.name.startswith(".")]
    found += [p.name for p in s.root.joinpath("manifests").iterdir() if p.name.startswith(".")]
    tmp = s.root / ".dgr" / "tmp"
    if tmp.is_dir():
        found += [p.name for p in tmp.iterdir()]
    return found


def new_commit_in_workspace(s: Series) -> None:
    (s.src / "docs").mkdir(exist_ok=True)
    (s.src / "docs" / "dgr.md").write_text("the shard worker's notes\n")
    sh_git(s.src, "add", "-A")
    sh_git(
        s.src,
        "commit",
        "-q",
        "-m",
        "docs: shard worker notes",
        env={
            "GIT_AUTHOR_DATE": "2025-03-01T00:00:00Z",
            "GIT_COMMITTER_DATE": "2025-03-01T00:00:00Z",
        },
    )


# ----------------------------------------------------------------------------- export

EXPORT_POINTS = [
    "export.computed",
    "export.write",
    "export.write@3",
    "export.staged",
    "export.swapped",
    "export.manifest",
]


@pytest.mark.parametrize("point", EXPORT_POINTS)
def test_export_killed_at_each_point_then_export_completes(
    series: Series, tmp_path: Path, point: str
) -> None:
    s = series
    new_commit_in_workspace(s)
    tree = sh_git(s.src, "rev-parse", "HEAD^{tree}")
    expected = twin(s, tmp_path)
    assert expected.forge("export").code == 0
    r = fault(s, point if "@" in point else f"{point}:kill", "export")
    assert r.code in KILLED, r
    # every command works again; the next export finishes the job, no circular hint
    st = s.forge("status")
    assert "Traceback" not in st.stderr and "`dgr-forge export` does" not in st.stderr, st
    r = s.forge("export", "--json")
    assert r.code == 0, r
    assert s.snapshot() == expected.snapshot()  # manifest and patch bytes
    assert sh_git(s.src, "rev-parse", "HEAD^{tree}") == tree  # workspace commits intact
    assert leftovers(s) == []
    assert s.forge("check").code == 0


@pytest.mark.parametrize("point", ["export.write", "export.write@2"])
def test_export_disk_full_leaves_the_old_series(series: Series, point: str) -> None:
    s = series
    new_commit_in_workspace(s)
    before = s.snapshot()
    r = fault(s, point.replace("@", ":enospc@") if "@" in point else f"{point}:enospc", "export")
    assert r.code == 1, r
    assert "disk is full" in r.stderr and "Traceback" not in r.stderr, r
    assert s.snapshot() == before
    assert leftovers(s) == []
    r = s.forge("export")
    assert r.code == 0, r
    assert "0004-docs-shard-worker-notes.patch" in s.patch_files()


def test_journal_recovery_keeps_hand_edits_made_after_the_kill(series: Series) -> None:
    """Killed once staged, before the swap; then a person edits a patch by hand: the edit
    wins, the stale journal is dropped."""
    s = series
    new_commit_in_workspace(s)
    r = fault(s, "export.staged:kill", "export")
    assert r.code in KILLED, r
    first = s.patches_dir / s.patch_files()[0]
    edited = first.read_bytes().replace(b"layer-range", b"layer-range (edited)", 1)
    first.write_bytes(edited)
    s.forge("status")  # any command may run recovery
    r = s.forge("export")
    assert first.read_bytes() == edited or r.code != 0
    assert first.read_bytes() == edited, r
    assert leftovers(s) == []


def test_only_dead_owners_scratch_is_cleaned(series: Series) -> None:
    s = series
    tmp = s.root / ".dgr" / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    for prefix in ("dgr-export-", "dgr-canon-", "dgr-scratch-", "dgr-check-"):
        (tmp / f"{prefix}{dead.pid}-dead").mkdir()
    live = tmp / f"dgr-export-{os.getpid()}-live"
    live.mkdir()
    new_commit_in_workspace(s)
    assert s.forge("export").code == 0
    assert (tmp / f"dgr-export-{dead.pid}-dead").exists() is False
    assert (tmp / f"dgr-canon-{dead.pid}-dead").exists() is False
    assert live.is_dir()  # a live run's scratch is its own


# ----------------------------------------------------------------------------- two workspaces


def test_two_workspaces_on_one_root_serialize(series: Series, tmp_path: Path) -> None:
    s = series
    ws2 = tmp_path / "ws2"
    assert s.forge("--workspace", str(ws2), "patch").code == 0
    # 1: no change on either side: the second waits, naming the holder, then succeeds
    first = start_paused_cmd(s, "export.computed", "export")
    second = subprocess.Popen(
        [*_cmd(s, "--workspace", str(ws2), "export")],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert second.stderr is not None
    line = second.stderr.readline()
    assert "waiting for pid" in line and str(first.pid) in line, line
    before = s.snapshot()
    kill(first)
    _out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    assert "Traceback" not in err
    assert s.snapshot() == before
    # 2: the first one's export changes the series meanwhile: a clear conflict, nothing lost
    new_commit_in_workspace(s)
    first = start_paused_cmd(s, "export.staged", "export")
    second = subprocess.Popen(
        [*_cmd(s, "--workspace", str(ws2), "export")],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert second.stderr is not None
    assert "waiting for pid" in second.stderr.readline()
    # its journal is complete: the waiter rolls it forward, then sees the change. The
    # killed run stays unreaped (a zombie, as under a parent that has not waited yet)
    # while the waiter takes the lock: a pid that still answers kill(0) is no owner.
    os.kill(first.pid, signal.SIGKILL)
    _out, err = second.communicate(timeout=120)
    kill(first)
    assert second.returncode == 3, err
    assert "changed while this export waited" in err and "Traceback" not in err
    assert "0004-docs-shard-worker-notes.patch" in s.patch_files()
    assert s.forge("check").code == 0
    assert leftovers(s) == []


def test_root_lock_timeout_zero_names_the_holder(series: Series) -> None:
    s = series
    first = start_paused_cmd(s, "export.computed", "export")
    try:
        r = s.forge("--workspace", str(s.root / "ws2"), "export", env={"DGR_LOCK_TIMEOUT": "0"})
        assert r.code in (1, 2, 3) and "Traceback" not in r.stderr, r
    finally:
        kill(first)


def _cmd(s: Series, *args: str) -> list[str]:
    from support.cli import forge_cmd

    return forge_cmd("--root", str(s.root), *args)


def _env() -> dict[str, str]:
    from support.cli import forge_env

    return forge_env()


# ----------------------------------------------------------------------------- rebase


def shift_patch_1(s: Series) -> str:
    text = (s.upstream.path / "src/llama.cpp").read_text()
    return s.upstream.commit({"src/llama.cpp": "// upstream: moved\n" + text}, "llama: move")


REBASE_POINTS = [
    "rebase.replay:0002",
    "rebase.commit:0002",
    "rebase.write",
    "rebase.staged",
    "rebase.swapped",
    "rebase.manifest",
    "rebase.checkout",
]


@pytest.mark.parametrize("point", REBASE_POINTS)
def test_rebase_killed_then_continue_completes(series: Series, tmp_path: Path, point: str) -> None:
    s = series
    new = shift_patch_1(s)
    expected = twin(s, tmp_path)
    assert expected.forge("rebase", "--onto", new).code == 0
    r = fault(s, f"{point}:kill", "rebase", "--onto", new)
    assert r.code in KILLED, r
    if point == "rebase.checkout":  # as if git itself died in the final checkout
        (s.src / ".git" / "index.lock").write_text("")
    r = s.forge("rebase", "--continue", "--json")
    assert r.code == 0, r
    assert s.snapshot() == expected.snapshot()
    assert sh_git(s.src, "rev-parse", "HEAD") == sh_git(expected.src, "rev-parse", "HEAD")
    assert sh_git(s.src, "status", "--porcelain") == ""
    assert leftovers(s) == []
    assert s.forge("check").code == 0


@pytest.mark.parametrize("point", ["rebase.write", "rebase.swapped", "rebase.checkout"])
def test_rebase_killed_then_abort_restores(series: Series, point: str) -> None:
    s = series
    new = shift_patch_1(s)
    before = s.snapshot()
    old_head = sh_git(s.src, "rev-parse", "HEAD")
    r = fault(s, f"{point}:kill", "rebase", "--onto", new)
    assert r.code in KILLED, r
    if point == "rebase.checkout":
        (s.src / ".git" / "index.lock").write_text("")
    r = s.forge("rebase", "--abort")
    assert r.code == 0, r
    assert s.snapshot() == before
    assert sh_git(s.src, "rev-parse", "HEAD") == old_head
    assert leftovers(s) == []


def test_rebase_abort_killed_then_abort_again(series: Series) -> None:
    s = series
    new = shift_patch_1(s)
    before = s.snapshot()
    old_head = sh_git(s.src, "rev-parse", "HEAD")
    r = fault(s, "rebase.swapped:kill", "rebase", "--onto", new)
    assert r.code in KILLED, r
    for point in ("rebase.staged", "rebase.abort"):  # the restore itself is killed
        r = fault(s, f"{point}:kill", "rebase", "--abort")
        assert r.code in KILLED, r
    r = s.forge("rebase", "--abort")
    assert r.code == 0, r
    assert s.snapshot() == before
    assert sh_git(s.src, "rev-parse", "HEAD") == old_head
    assert leftovers(s) == []


def test_rebase_disk_full_at_write_then_continue(series: Series) -> None:
    s = series
    new = shift_patch_1(s)
    before = s.snapshot()
    r = fault(s, "rebase.write:enospc", "rebase", "--onto", new)
    assert r.code == 1 and "disk is full" in r.stderr and "Traceback" not in r.stderr, r
    assert s.snapshot() == before
    r = s.forge("rebase", "--continue")
    assert r.code == 0, r
    assert s.forge("check").code == 0


def test_rebase_continue_killed_after_a_resolution(series: Series) -> None:
    s = series
    upstream_edit(
        s.upstream,
        "src/llama.cpp",
        LLAMA_OWNER_OLD,
        "    return layer < 0 ? -1 : 0; /* upstream: validate */\n",
        "llama: validate the layer index",
    )
    r = s.forge("rebase", "--onto", s.upstream.head)
    assert r.code == 3, r
    path = s.src / "src/llama.cpp"
    text = path.read_text()
    start, end = text.index("<<<<<<< "), text.index(">>>>>>> ")
    end = text.index("\n", end) + 1
    path.write_text(text[:start] + "    return layer % 2; /* dgr: resolved */\n" + text[end:])
    sh_git(s.src, "add", "src/llama.cpp")
    for point in ("rebase.continue", "rebase.swapped"):
        r = fault(s, f"{point}:kill", "rebase", "--continue")
        assert r.code in KILLED, r
    r = s.forge("rebase", "--continue", "--json")
    assert r.code == 0, r
    assert (
        "dgr: resolved"
        in (s.patches_dir / "0001-llama-add-layer-range-ownership.patch").read_text()
    )
    assert leftovers(s) == []
    assert s.forge("check").code == 0


# ----------------------------------------------------------------------------- the journal itself


def _journal_root(tmp: Path) -> tuple[Path, Path, Path]:
    root = tmp / "root"
    pdir = root / "patches" / "up"
    pdir.mkdir(parents=True)
    (root / "manifests").mkdir()
    manifest = root / "manifests" / "up.toml"
    manifest.write_bytes(b"old manifest\n")
    (pdir / "0001-a.patch").write_bytes(b"old a\n")
    (pdir / "0002-b.patch").write_bytes(b"old b\n")
    (pdir / "README").write_bytes(b"kept\n")
    return root, pdir, manifest


NEW = {"0001-a.patch": b"new a\n", "0002-c.patch": b"new c\n"}


def _files(pdir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(pdir.iterdir())}


@pytest.mark.parametrize(
    ("point", "finished"),
    [
        ("j.write", False),  # killed while staging: rolled back
        ("j.staged", True),  # complete journal, nothing swapped: rolled forward
        ("j.swapped", True),  # new series in place, manifest not yet: rolled forward
        ("j.manifest", True),  # all in place, journal not yet removed: cleaned
    ],
)
def test_journal_recovery_rolls_forward_only_a_complete_journal(
    tmp_path: Path, point: str, finished: bool
) -> None:
    root, pdir, manifest = _journal_root(tmp_path)
    before = {**_files(pdir), "manifest": manifest.read_bytes()}
    script = (
        "import sys; from pathlib import Path; from dgr_forge.upstream import series_journal as j;"
        "from dgr_forge.core.output import Reporter;"
        f"j.write(Path({str(root)!r}), Path({str(pdir)!r}), {NEW!r}, "
        f"Path({str(manifest)!r}), b'new manifest\\n', points='j', out=Reporter(quiet=True))"
    )
    from support.cli import forge_env

    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=forge_env({"DGR_FAULT": f"{point}:kill"}),
        capture_output=True,
        text=True,
    )
    assert proc.returncode in KILLED, proc.stderr
    # the old series is never gone while the manifest is old
    if manifest.read_bytes() == b"old manifest\n":
        journals = list(pdir.parent.glob(".up.journal-*"))
        assert pdir.is_dir() or any((j / "old").is_dir() for j in journals)
    series_journal.recover(root, Reporter(quiet=True))
    after = {**_files(pdir), "manifest": manifest.read_bytes()}
    if finished:
        assert after == {**NEW, "README": b"kept\n", "manifest": b"new manifest\n"}
    else:
        assert after == before
    assert [p.name for p in pdir.parent.iterdir()] == ["up"]


def test_journal_of_a_live_owner_is_left_alone(tmp_path: Path) -> None:
    root, pdir, _manifest = _journal_root(tmp_path)
    live = pdir.parent / f".up.journal-{os.getppid()}-abcd"
    (live / "series").mkdir(parents=True)
    series_journal.recover(root, Reporter(quiet=True))
    assert live.is_dir()
    dead_pid = subprocess.Popen(["true"])
    dead_pid.wait()
    dead = pdir.parent / f".up.journal-{dead_pid.pid}-abcd"
    (dead / "series").mkdir(parents=True)
    series_journal.recover(root, Reporter(quiet=True))
    assert not dead.exists() and live.is_dir()


def test_series_kept_outside_patches_is_recovered_too(series: Series) -> None:
    s = series
    moved = s.root / "vendor" / "llama-patches"
    moved.parent.mkdir()
    s.patches_dir.rename(moved)
    text = s.manifest.read_text()
    s.manifest.write_text(text.replace('dir = "patches/llama.cpp"', 'dir = "vendor/llama-patches"'))
    assert s.forge("patch").code == 0
    new_commit_in_workspace(s)
    r = fault(s, "export.swapped:kill", "export")
    assert r.code in KILLED, r
    with contextlib.suppress(BadInput):  # the loader is pure: it never recovers
        manifest.load(s.manifest, s.root)
    assert len(list(moved.parent.iterdir())) > 1  # the journal is still there
    st = s.forge("status")  # read-only: it says what is pending, and changes nothing
    assert st.code == 3 and "interrupted while writing" in st.stderr, st
    assert "Traceback" not in st.stderr
    assert len(list(moved.parent.iterdir())) > 1  # the journal is still there
    # a writer finishes the write first (under the locks), then does its own work
    r = s.forge("export")
    assert r.code == 0 and "Traceback" not in r.stderr, r
    assert "0004-docs-shard-worker-notes.patch" in [p.name for p in moved.iterdir()]
    assert [p.name for p in moved.parent.iterdir()] == ["llama-patches"]
    assert s.forge("export", "--json").json["changed"] is False


@pytest.mark.parametrize("pid", ["0", "99999999999999999999"])
def test_a_journal_named_for_a_pid_no_process_can_have_is_a_dead_writers(
    series: Series, pid: str
) -> None:
    """A journal left (or planted) under a pid no process can have: not a live writer
    (kill(0) would signal this process group, or overflow): `status` says a write was
    interrupted, `patch` clears it, nothing of the series is lost, no traceback."""
    s = series
    before = s.snapshot()
    jdir = s.patches_dir.parent / f".{s.patches_dir.name}.journal-{pid}-0a1b2c3d"
    jdir.mkdir()
    status = s.forge("status")
    assert status.code == 3, status
    assert "interrupted" in status.stderr and "Traceback" not in status.stderr
    patched = s.forge("patch")
    assert patched.code == 0, patched
    assert "Traceback" not in patched.stderr
    assert not jdir.exists()
    assert s.snapshot() == before
