"""fetch and patch survive a kill or a full disk at every state transition.

Each test stops a real `dgr-forge` run at a named fault point (`DGR_FAULT`, core/fault.py):
`kill` is a SIGKILL there, `enospc` a full disk. The next plain run must complete, and
nothing may be lost: the manifest and patch files byte for byte, the workspace exactly
at the pin plus the series, clean, with no journal left.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support.cli import forge_env, forge_popen, run_forge
from support.git import Upstream, sh_git
from support.patches import make_series, src_dir
from support.roots import Series

FETCH_POINTS = ["fetch.journal", "fetch.objects", "fetch.verified", "fetch.checkout"]
FETCH_POINTS += ["fetch.checked-out"]
PATCH_POINTS = ["patch.journal", "patch.applied", "patch.applied:0003", "patch.verified"]
KILLED = (-9, 137)


def _inputs(root: Path) -> dict[str, bytes]:
    """The committed inputs; fetch's one write (the upstream's build number, recorded once
    the fetch is complete, issue 29) left out: nothing else may change."""
    manifest = (root / "manifests" / "llama.cpp.toml").read_bytes()
    files = {"manifest": re.sub(rb"(?m)^build_number = \d+\n", b"", manifest)}
    for p in sorted((root / "patches" / "llama.cpp").glob("*")):
        files[p.name] = p.read_bytes()
    return files


def _assert_at_pin(root: Path, upstream: Upstream) -> None:
    src = src_dir(root)
    assert sh_git(src, "rev-parse", "HEAD") == upstream.head
    assert sh_git(src, "status", "--porcelain", "--untracked-files=all") == ""
    sh_git(src, "rev-list", "--objects", "--quiet", upstream.head)  # the whole tree is here
    assert not [p.name for p in (src / ".git").glob("dgr-*")]
    st = run_forge("--json", "status", cwd=root)
    assert st.code == 0 and st.json["upstream"]["verified"] is True, st


def _assert_patched(root: Path, series: Series, before: dict[str, bytes]) -> None:
    src = src_dir(root)
    assert sh_git(src, "rev-parse", "HEAD^{tree}") == series.trees[-1]
    assert sh_git(src, "status", "--porcelain", "--untracked-files=all") == ""
    assert not (src / ".git" / "rebase-apply").exists()
    assert not [p.name for p in (src / ".git").glob("dgr-*")]
    assert _inputs(root) == before
    st = run_forge("--json", "status", cwd=root)
    assert st.code == 0, st
    shown = {k: st.json[k] for k in ("upstream", "patches")}
    assert st.json["patches"]["applied"] is True, json.dumps(shown, indent=1)


@pytest.mark.parametrize("point", FETCH_POINTS)
def test_fetch_killed_at_each_point_then_fetch_completes(
    upstream: Upstream, forge_root: Path, point: str
) -> None:
    before = _inputs(forge_root)
    r = run_forge("fetch", cwd=forge_root, env={"DGR_FAULT": point})
    assert r.code in KILLED, r
    st = run_forge("status", cwd=forge_root)
    assert st.code == 0 and "Traceback" not in st.stderr, st
    r = run_forge("fetch", cwd=forge_root)
    assert r.code == 0, r
    _assert_at_pin(forge_root, upstream)
    assert _inputs(forge_root) == before


@pytest.mark.parametrize("point", ["fetch.journal", "fetch.objects", "fetch.checkout"])
def test_killed_fetch_is_completed_by_patch(
    upstream: Upstream, forge_root: Path, point: str
) -> None:
    series = make_series(forge_root, upstream)
    before = _inputs(forge_root)
    r = run_forge("patch", cwd=forge_root, env={"DGR_FAULT": point})
    assert r.code in KILLED, r
    r = run_forge("patch", cwd=forge_root)
    assert r.code == 0, r
    _assert_patched(forge_root, series, before)


@pytest.mark.parametrize("point", ["fetch.journal", "fetch.objects", "fetch.checkout"])
def test_fetch_disk_full_then_fetch_completes(
    upstream: Upstream, forge_root: Path, point: str
) -> None:
    r = run_forge("fetch", cwd=forge_root, env={"DGR_FAULT": f"{point}:enospc"})
    assert r.code == 1, r
    assert "No space left on device" in r.stderr and "Traceback" not in r.stderr, r
    assert run_forge("fetch", cwd=forge_root).code == 0
    _assert_at_pin(forge_root, upstream)


def test_commit_without_its_trees_is_fetched_again(upstream: Upstream, forge_root: Path) -> None:
    """What a killed loose-object fetch could leave: the commit and its root tree only. The pin
    then is not "present": fetch gets it again instead of failing on `unable to read tree`."""
    src = src_dir(forge_root)
    src.mkdir(parents=True)
    sh_git(src, "init", "-q")
    for kind, oid in (("commit", upstream.head), ("tree", upstream.tree(upstream.head))):
        raw = subprocess.run(
            ["git", "cat-file", kind, oid], cwd=upstream.path, capture_output=True, check=True
        ).stdout
        made = subprocess.run(
            ["git", "hash-object", "-t", kind, "-w", "--stdin"],
            cwd=src,
            input=raw,
            capture_output=True,
            check=True,
        ).stdout.decode()
        assert made.strip() == oid  # the commit and its root tree, none of the rest
    r = run_forge("fetch", cwd=forge_root)
    assert r.code == 0, r
    _assert_at_pin(forge_root, upstream)


@pytest.mark.parametrize("point", PATCH_POINTS)
def test_patch_killed_at_each_point_then_patch_completes(
    upstream: Upstream, forge_root: Path, point: str
) -> None:
    series = make_series(forge_root, upstream)
    assert run_forge("fetch", cwd=forge_root).code == 0
    before = _inputs(forge_root)
    r = run_forge("patch", cwd=forge_root, env={"DGR_FAULT": point})
    assert r.code in KILLED, r
    st = run_forge("status", cwd=forge_root)
    assert st.code == 0 and "Traceback" not in st.stderr, st
    r = run_forge("patch", cwd=forge_root)
    assert r.code == 0, r
    _assert_patched(forge_root, series, before)


@pytest.mark.parametrize("point", ["patch.journal", "patch.applied", "patch.verified"])
def test_patch_disk_full_rolls_back_and_next_patch_completes(
    upstream: Upstream, forge_root: Path, point: str
) -> None:
    series = make_series(forge_root, upstream)
    before = _inputs(forge_root)
    r = run_forge("patch", cwd=forge_root, env={"DGR_FAULT": f"{point}:enospc"})
    assert r.code == 1, r
    assert "No space left on device" in r.stderr and "Traceback" not in r.stderr, r
    src = src_dir(forge_root)
    assert sh_git(src, "rev-parse", "HEAD") == series.pin  # rolled back
    assert not (src / ".git" / "dgr-patching").exists()  # only once the roll-back worked
    r = run_forge("patch", cwd=forge_root)
    assert r.code == 0, r
    _assert_patched(forge_root, series, before)


def test_stale_git_locks_and_a_half_finished_am_are_cleaned(
    upstream: Upstream, forge_root: Path
) -> None:
    """What a `git am` killed or stopped by a full disk leaves: index.lock, ORIG_HEAD.lock,
    a rebase-apply directory `am --abort` cannot use. The forge's journal says it is ours."""
    series = make_series(forge_root, upstream)
    before = _inputs(forge_root)
    assert run_forge("patch", cwd=forge_root).code == 0
    src = src_dir(forge_root)
    gd = src / ".git"
    sh_git(src, "checkout", "-q", "--detach", "HEAD~2")  # mid-series
    (gd / "rebase-apply").mkdir()
    (gd / "rebase-apply" / "next").write_text("2\n")
    (gd / "index.lock").write_text("")
    (gd / "ORIG_HEAD.lock").write_text("")
    (gd / "dgr-patching").write_text(series.pin + "\n")
    st = run_forge("status", cwd=forge_root)
    assert st.code == 0 and "dgr-forge patch" in st.stdout, st
    r = run_forge("patch", cwd=forge_root)
    assert r.code == 0, r
    _assert_patched(forge_root, series, before)
    assert not (gd / "index.lock").exists() and not (gd / "ORIG_HEAD.lock").exists()


def test_random_kills_of_fetch_and_patch_never_break_the_next_run(
    upstream: Upstream, forge_root: Path
) -> None:
    """Six SIGKILLs of the whole process group at seeded random moments (bounded: each
    run is at most a few seconds), the workspace reset in between so every run has work;
    `status` never fails, and a final plain `patch` completes exactly."""
    rng = random.Random(1234)
    series = make_series(forge_root, upstream)
    before = _inputs(forge_root)
    src = src_dir(forge_root)
    started = time.monotonic()
    for i in range(6):
        command = rng.choice(["fetch", "patch"])
        proc = forge_popen(
            command,
            cwd=forge_root,
            env=forge_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        time.sleep(rng.uniform(0.1, 0.8))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        rc = proc.wait(timeout=30)
        st = run_forge("status", cwd=forge_root)
        assert st.code == 0 and "Traceback" not in st.stderr, (i, st)
        if rc == 0 and (src / ".git").exists():  # it finished first: give the next one work
            if i % 2:
                sh_git(src, "checkout", "-q", "--detach", series.pin)
            else:
                shutil.rmtree(forge_root / ".dgr" / "src")
    assert time.monotonic() - started < 120
    r = run_forge("patch", cwd=forge_root)
    assert r.code == 0, r
    _assert_patched(forge_root, series, before)


def test_scratch_dirs_live_in_the_workspace_and_dead_owners_are_cleaned(
    tmp_path: Path, upstream: Upstream, forge_root: Path
) -> None:
    make_series(forge_root, upstream)
    assert run_forge("patch", cwd=forge_root).code == 0
    tmp = forge_root / ".dgr" / "tmp"
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp / f"dgr-scratch-{dead.pid}-x1"
    live = tmp / f"dgr-scratch-{os.getpid()}-x2"
    other = tmp / "someone-elses"
    for d in (stale, live, other):
        d.mkdir(parents=True)
    tmpdir = tmp_path / "TMPDIR"
    tmpdir.mkdir()
    for args in (["patch", "--check"], ["status"]):
        r = run_forge(*args, cwd=forge_root, env={"TMPDIR": str(tmpdir)})
        assert r.code == 0, r
    assert not stale.exists() and live.exists() and other.exists()
    assert list(tmpdir.iterdir()) == []  # nothing in $TMPDIR
    assert sorted(p.name for p in tmp.iterdir()) == sorted([live.name, other.name])


def test_depth_one_commit_without_its_shallow_entry_is_fetched_again(
    upstream: Upstream, forge_root: Path
) -> None:
    """A depth-1 fetch killed after its pack but before `.git/shallow`: the pin is there
    with its whole tree, but its parent is missing and not grafted (every `git log` fails).
    Found by the random-kill test; the next fetch must fetch again."""
    assert run_forge("fetch", cwd=forge_root).code == 0
    src = src_dir(forge_root)
    assert (src / ".git" / "shallow").exists()
    (src / ".git" / "shallow").unlink()
    (src / ".git" / "dgr-fetching").write_text(upstream.head + "\n")  # the killed transfer
    sh_git(src, "checkout", "-q", "--detach", upstream.head)
    r = run_forge("fetch", cwd=forge_root)
    assert r.code == 0, r
    sh_git(src, "log", "--format=%H", upstream.head)  # history readable again
    _assert_at_pin(forge_root, upstream)


def test_journal_stays_when_the_roll_back_fails_and_the_next_patch_finishes_it(
    upstream: Upstream, forge_root: Path
) -> None:
    """A full disk mid-series, and the roll-back fails too: the journal must stay (it is
    what tells the next run that the half-applied tree is the forge's), and the hint names
    a command that works."""
    series = make_series(forge_root, upstream)
    before = _inputs(forge_root)
    fault = "patch.applied:enospc,patch.rollback:enospc"
    r = run_forge("--json", "patch", cwd=forge_root, env={"DGR_FAULT": fault})
    assert r.code == 1, r
    assert "back at the pin failed too" in r.json["error"], r
    assert "dgr-forge patch" in r.json["hint"] and "Traceback" not in r.stderr, r
    src = src_dir(forge_root)
    assert (src / ".git" / "dgr-patching").exists()
    st = run_forge("status", cwd=forge_root)
    assert st.code == 0 and "dgr-forge patch" in st.stdout, st
    r = run_forge("patch", cwd=forge_root)
    assert r.code == 0, r
    _assert_patched(forge_root, series, before)
