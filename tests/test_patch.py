"""`dgr-forge patch`: apply the series on the pin, exactly, reproducibly, safely."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.cli import run_forge
from support.git import Upstream, sh_git
from support.patches import (
    AUTHOR_ENV,
    commit_in,
    gnu_patch_needs_fuzz,
    head,
    make_series,
    plain_am_tree,
    snapshot,
    src_dir,
)
from support.roots import sha256, write_manifest


def patch(root: Path, *args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return run_forge("--root", str(root), "--json", "patch", *args, env=env)


def message(res) -> str:  # type: ignore[no-untyped-def]
    """The error and its fix as the JSON carries them (stderr is wrapped for terminals)."""
    data = res.json
    return f"{data.get('error')} {data.get('hint')}"


def chain(repo: Path, n: int) -> list[list[str]]:
    """[commit, tree, committer name, committer date, author date] for the top n commits."""
    out = sh_git(repo, "log", f"-{n}", "--format=%H %T %cn %cI %aI")
    return [line.split() for line in out.splitlines()]


def test_applies_series_like_plain_git_am(
    tmp_path: Path, upstream: Upstream, forge_root: Path
) -> None:
    series = make_series(forge_root, upstream)
    res = patch(forge_root)
    assert res.code == 0, res
    data = res.json
    assert data["changed"] is True and data["patches"] == series.files
    expected = plain_am_tree(tmp_path, upstream, series.pin, series.paths(forge_root))
    assert data["result_tree"] == expected == series.trees[-1]
    src = src_dir(forge_root)
    commits = chain(src, 4)
    assert commits[3][0] == series.pin
    for c, tree in zip(reversed(commits[:3]), series.trees, strict=True):
        assert c[1] == tree
        assert c[2] == "dgr-forge"
        assert c[3] == c[4]  # committer date = the patch's own date
    assert sh_git(src, "log", "-1", "--format=%an <%ae>|%s") == (
        "Patch Author <author@dgr.invalid>|docs: add DGR notes"
    )
    assert sh_git(src, "status", "--porcelain") == ""


def test_commit_ids_equal_across_workspaces_and_environments(
    upstream: Upstream, forge_root: Path, tmp_path: Path
) -> None:
    make_series(forge_root, upstream)
    a = run_forge("--root", str(forge_root), "--workspace", str(tmp_path / "wa"), "--json", "patch")
    b = run_forge(
        "--root",
        str(forge_root),
        "--workspace",
        str(tmp_path / "wb"),
        "--json",
        "patch",
        env={
            "TZ": "Asia/Tokyo",
            "GIT_COMMITTER_NAME": "Someone Else",
            "GIT_COMMITTER_EMAIL": "else@example.invalid",
            "GIT_COMMITTER_DATE": "2030-01-01T00:00:00Z",
        },
    )
    assert a.code == 0 and b.code == 0, (a, b)
    assert a.json["head_commit"] == b.json["head_commit"]
    assert a.json["result_tree"] == b.json["result_tree"]


def test_second_patch_moves_nothing(upstream: Upstream, forge_root: Path) -> None:
    make_series(forge_root, upstream)
    assert patch(forge_root).code == 0
    src = src_dir(forge_root)
    before_head, before = head(src), snapshot(src)
    index_mtime = (src / ".git" / "index").stat().st_mtime_ns
    res = patch(forge_root)
    assert res.code == 0, res
    assert res.json["changed"] is False
    assert head(src) == before_head
    assert snapshot(src) == before
    assert (src / ".git" / "index").stat().st_mtime_ns == index_mtime


def test_noop_also_without_trees_in_the_manifest(upstream: Upstream, forge_root: Path) -> None:
    series = make_series(forge_root, upstream, with_trees=False)
    first = patch(forge_root)
    assert first.code == 0 and first.json["changed"] is True, first
    assert first.json["result_tree"] == series.trees[-1]
    second = patch(forge_root)
    assert second.code == 0 and second.json["changed"] is False, second


@pytest.mark.parametrize("which", [0, 1, 2])
def test_flipped_byte_is_refused_before_anything_moves(
    upstream: Upstream, forge_root: Path, which: int
) -> None:
    series = make_series(forge_root, upstream)
    assert patch(forge_root).code == 0
    src = src_dir(forge_root)
    before_head, before = head(src), snapshot(src)
    path = series.paths(forge_root)[which]
    expected_sha = sha256(path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    manifest_before = (forge_root / "manifests" / "llama.cpp.toml").read_bytes()
    res = patch(forge_root)
    assert res.code == 2, res
    assert series.files[which] in message(res)
    assert expected_sha in message(res) and sha256(path) in message(res)
    assert "dgr-forge export" in message(res)
    assert res.json["file"].endswith(series.files[which])
    assert head(src) == before_head and snapshot(src) == before
    assert (forge_root / "manifests" / "llama.cpp.toml").read_bytes() == manifest_before


def fuzzy_series(root: Path, upstream: Upstream) -> list[str]:
    """One patch whose context differs from the pin in one line: GNU patch would apply it
    with fuzz; git must not."""
    work = root.parent / "fuzz-author"
    sh_git(root.parent, "clone", "-q", str(upstream.path), str(work))
    original = (work / "src" / "llama.cpp").read_text()
    # a context-only change that is NOT part of the exported patch
    ctx = original.replace('#include "llama.h"\n', '#include "llama.h" // ctx\n')
    commit_in(work, {"src/llama.cpp": ctx}, "ctx", 0)
    changed = ctx.replace('return "upstream";', 'return "dgr";')
    commit_in(work, {"src/llama.cpp": changed}, "Return dgr", 1)
    pdir = root / "patches" / "llama.cpp"
    out = sh_git(work, "format-patch", "-q", "-k", "--zero-commit", "-1", "-o", str(pdir))
    del out
    produced = sorted(pdir.glob("*.patch"))
    target = pdir / "0001-return-dgr.patch"
    produced[0].rename(target)
    write_manifest(root, upstream, [target.name], None)
    return [target.name]


def test_patch_needing_fuzz_is_a_conflict(upstream: Upstream, forge_root: Path) -> None:
    files = fuzzy_series(forge_root, upstream)
    fuzz = gnu_patch_needs_fuzz(upstream.path, forge_root / "patches" / "llama.cpp" / files[0])
    assert fuzz in (True, None)  # the test is meaningful: GNU patch would accept it with fuzz
    res = patch(forge_root)
    assert res.code == 3, res
    assert files[0] in message(res) and "src/llama.cpp" in message(res)
    assert "hunk 1/1 @@" in message(res)
    conflicts = res.json["conflicts"]
    assert conflicts[0]["file"] == "src/llama.cpp"
    src = src_dir(forge_root)
    assert head(src) == upstream.head  # back at the pin
    assert sh_git(src, "status", "--porcelain") == ""
    assert "dgr" not in (src / "src" / "llama.cpp").read_text()
    assert not (src / ".git" / "rebase-apply").exists()


def escape_patch(root: Path, upstream: Upstream, path: str) -> str:
    text = (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: Mallory <m@evil.invalid>\n"
        "Date: Wed, 1 Jan 2025 00:00:00 +0000\n"
        "Subject: escape\n\n---\n"
        f"diff --git a/{path} b/{path}\n"
        "new file mode 100644\n"
        "index 0000000000000000000000000000000000000000..ce013625030ba8dba906f756967f9e9ca394464a\n"
        "--- /dev/null\n"
        f"+++ b/{path}\n"
        "@@ -0,0 +1 @@\n"
        "+hello\n"
    )
    name = "0001-escape.patch"
    (root / "patches" / "llama.cpp" / name).write_text(text)
    write_manifest(root, upstream, [name], None)
    return name


def test_dotdot_path_is_refused_before_anything_is_written(
    tmp_path: Path, upstream: Upstream, forge_root: Path
) -> None:
    name = escape_patch(forge_root, upstream, "../../../escaped.txt")
    res = patch(forge_root)
    assert res.code == 2, res
    assert (
        name in message(res) and "../../../escaped.txt" in message(res) and "'..'" in message(res)
    )
    assert not src_dir(forge_root).exists()  # not even fetched
    assert not list(tmp_path.rglob("escaped.txt"))


def test_git_dir_path_is_refused(upstream: Upstream, forge_root: Path) -> None:
    escape_patch(forge_root, upstream, ".git/hooks/post-checkout")
    res = patch(forge_root)
    assert res.code == 2 and ".git" in message(res), res


def test_write_through_symlink_is_refused(
    tmp_path: Path, upstream: Upstream, forge_root: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(str(outside), upstream.path / "vendor")
    sh_git(upstream.path, "add", "vendor")
    sh_git(upstream.path, "commit", "-q", "-m", "vendor link")
    pin = sh_git(upstream.path, "rev-parse", "HEAD")
    upstream.commits.append(pin)
    text = (forge_root / "manifests" / "llama.cpp.toml").read_text()
    name = escape_patch(forge_root, upstream, "vendor/planted.txt")
    write_manifest(forge_root, upstream, [name], None, pin=pin)
    del text
    res = patch(forge_root)
    assert res.code == 2, res
    assert "vendor/planted.txt" in message(res) and "symlink" in message(res)
    assert list(outside.iterdir()) == []
    src = src_dir(forge_root)
    assert head(src) == pin  # fetched, nothing applied


def test_symlink_made_by_an_earlier_patch_is_refused(
    tmp_path: Path, upstream: Upstream, forge_root: Path
) -> None:
    pdir = forge_root / "patches" / "llama.cpp"
    link = (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: Mallory <m@evil.invalid>\n"
        "Date: Wed, 1 Jan 2025 00:00:00 +0000\n"
        "Subject: link\n\n---\n"
        "diff --git a/out b/out\n"
        "new file mode 120000\n"
        "index 0000000000000000000000000000000000000000..0b5e1a5c9ff0e9b1dc4b1e0c4ae3bcd0a3cbbc44\n"
        "--- /dev/null\n"
        "+++ b/out\n"
        "@@ -0,0 +1 @@\n"
        f"+{tmp_path}\n"
        "\\ No newline at end of file\n"
    )
    (pdir / "0001-link.patch").write_text(link)
    escape_patch(forge_root, upstream, "out/planted.txt")
    (pdir / "0001-escape.patch").rename(pdir / "0002-escape.patch")
    write_manifest(forge_root, upstream, ["0001-link.patch", "0002-escape.patch"], None)
    res = patch(forge_root)
    assert res.code == 2, res
    assert "0002-escape.patch" in message(res) and "symlink" in message(res)
    assert not (tmp_path / "planted.txt").exists()
    assert head(src_dir(forge_root)) == upstream.head


def test_uncommitted_local_edits_are_kept(upstream: Upstream, forge_root: Path) -> None:
    make_series(forge_root, upstream)
    assert patch(forge_root).code == 0
    src = src_dir(forge_root)
    (src / "README.md").write_text("my edit\n")
    (src / "new.txt").write_text("new\n")
    before_head = head(src)
    res = patch(forge_root)
    assert res.code == 3, res
    assert "uncommitted" in message(res) and "README.md" in message(res)
    assert (src / "README.md").read_text() == "my edit\n"
    assert (src / "new.txt").read_text() == "new\n"
    assert head(src) == before_head


def test_local_commit_on_top_is_kept(upstream: Upstream, forge_root: Path) -> None:
    make_series(forge_root, upstream)
    assert patch(forge_root).code == 0
    src = src_dir(forge_root)
    mine = commit_in(src, {"README.md": "mine\n"}, "my change", 3)
    res = patch(forge_root)
    # the series did not move: nothing to apply, the commit stays on top (issue 19)
    assert res.code == 0 and res.json["changed"] is False, res
    assert res.json["local_commits"] == 1 and res.json["replayed"] == []
    assert "dgr-forge export" in res.stderr
    assert head(src) == mine


def test_partially_applied_series_is_completed(upstream: Upstream, forge_root: Path) -> None:
    series = make_series(forge_root, upstream)
    first = patch(forge_root)
    src = src_dir(forge_root)
    sh_git(src, "reset", "-q", "--hard", "HEAD~2")
    res = patch(forge_root)
    assert res.code == 0 and res.json["changed"] is True, res
    assert res.json["head_commit"] == first.json["head_commit"]
    assert sh_git(src, "rev-parse", "HEAD^{tree}") == series.trees[-1]


def test_changed_manifest_reapplies_from_the_pin(upstream: Upstream, forge_root: Path) -> None:
    series = make_series(forge_root, upstream)
    assert patch(forge_root).code == 0
    (forge_root / "patches" / "llama.cpp" / series.files[2]).unlink()
    write_manifest(forge_root, upstream, series.files[:2], series.trees[:2])
    res = patch(forge_root)
    assert res.code == 0 and res.json["changed"] is True, res
    src = src_dir(forge_root)
    assert sh_git(src, "rev-parse", "HEAD~2") == series.pin
    assert not (src / "docs" / "dgr.md").exists()


def test_tree_mismatch_in_manifest_fails_and_returns_to_pin(
    upstream: Upstream, forge_root: Path
) -> None:
    series = make_series(forge_root, upstream)
    wrong = series.trees[0]
    trees = [series.trees[0], wrong, series.trees[2]]
    write_manifest(forge_root, upstream, series.files, trees)
    res = patch(forge_root)
    assert res.code == 1, res
    assert (
        series.files[1] in message(res)
        and wrong in message(res)
        and series.trees[1] in message(res)
    )
    assert head(src_dir(forge_root)) == series.pin


def test_am_in_progress_is_not_tripped_over(upstream: Upstream, forge_root: Path) -> None:
    series = make_series(forge_root, upstream)
    assert patch(forge_root).code == 0
    src = src_dir(forge_root)
    sh_git(src, "checkout", "-q", "--detach", series.pin)
    (src / "src" / "llama.cpp").write_text("conflicting\n")
    sh_git(src, "commit", "-qam", "conflicting", env=AUTHOR_ENV)
    with pytest.raises(AssertionError):
        sh_git(src, "am", str(series.paths(forge_root)[0]), env=AUTHOR_ENV)
    res = patch(forge_root)
    assert res.code == 3, res
    assert "in progress" in message(res) and "--abort" in message(res)
    assert (src / ".git" / "rebase-apply").exists()


def test_killed_patch_run_is_rolled_back(upstream: Upstream, forge_root: Path) -> None:
    """A run killed mid-am leaves .git/rebase-apply and the journal: the next run rolls
    back to the pin and applies, instead of calling it the user's edits."""
    series = make_series(forge_root, upstream)
    assert patch(forge_root).code == 0
    src = src_dir(forge_root)
    sh_git(src, "checkout", "-q", "--detach", series.pin)
    sh_git(src, "am", "-q", str(series.paths(forge_root)[0]), env=AUTHOR_ENV)
    (src / ".git" / "rebase-apply").mkdir()
    (src / ".git" / "dgr-patching").write_text(series.pin + "\n")
    res = patch(forge_root)
    assert res.code == 0, res
    assert not (src / ".git" / "dgr-patching").exists()
    assert sh_git(src, "rev-parse", "HEAD^{tree}") == series.trees[-1]


def test_check_reports_per_patch_and_touches_nothing(upstream: Upstream, forge_root: Path) -> None:
    series = make_series(forge_root, upstream)
    assert patch(forge_root).code == 0
    src = src_dir(forge_root)
    before_head, before = head(src), snapshot(src)
    index = (src / ".git" / "index").read_bytes()
    ok = patch(forge_root, "--check")
    assert ok.code == 0, ok
    assert [p["status"] for p in ok.json["patches"]] == ["applies"] * 3
    assert [p["tree"] for p in ok.json["patches"]] == series.trees

    # make patch 2 not apply: its context no longer matches the pin
    path = series.paths(forge_root)[1]
    path.write_text(path.read_text().replace(" int ggml_backend_count(void) {", " int x(void) {"))
    bad = patch(forge_root, "--check")
    assert bad.code == 1, bad
    states = [(p["file"], p["status"], p["changed_on_disk"]) for p in bad.json["patches"]]
    assert states == [
        (series.files[0], "applies", False),
        (series.files[1], "conflict", True),
        (series.files[2], "skipped", False),
    ]
    assert bad.json["patches"][1]["conflicts"][0]["file"] == "ggml/src/ggml.c"
    assert "hunk 1/1" in bad.json["patches"][1]["conflicts"][0]["hunks"][0]
    assert head(src) == before_head and snapshot(src) == before
    assert (src / ".git" / "index").read_bytes() == index


def test_empty_series_is_the_pin(upstream: Upstream, forge_root: Path) -> None:
    res = patch(forge_root)
    assert res.code == 0, res
    assert res.json["head_commit"] == upstream.head
    again = patch(forge_root)
    assert again.code == 0 and again.json["changed"] is False


def test_sigkill_mid_am_then_patch_recovers(upstream: Upstream, forge_root: Path) -> None:
    """A real kill while `git am` runs: the next `patch` rolls back and applies, exactly."""
    import signal
    import subprocess
    import time

    from support.cli import forge_cmd, forge_env

    edits: list[tuple[dict[str, str | None], str]] = [
        ({f"docs/kill-{i}.md": f"note {i}\n"}, f"docs: kill note {i}") for i in range(40)
    ]
    series = make_series(forge_root, upstream, edits)
    src = src_dir(forge_root)
    assert run_forge("--root", str(forge_root), "fetch").code == 0
    proc = subprocess.Popen(
        forge_cmd("--root", str(forge_root), "patch"),
        env=forge_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # killed with its git children, as CI cancelling a job does
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (src / ".git" / "rebase-apply").exists():
        time.sleep(0.002)
    killed_mid_am = (src / ".git" / "rebase-apply").exists()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert killed_mid_am, "git am finished before the kill; the test did not test anything"
    assert (src / ".git" / "dgr-patching").exists()  # the journal marks the run as ours
    res = patch(forge_root)
    assert res.code == 0, res
    assert sh_git(src, "rev-parse", "HEAD^{tree}") == series.trees[-1]
    assert not (src / ".git" / "dgr-patching").exists()
    assert sh_git(src, "status", "--porcelain") == ""


def test_patch_without_date_header_is_refused(upstream: Upstream, forge_root: Path) -> None:
    name = escape_patch(forge_root, upstream, "docs/ok.txt")
    path = forge_root / "patches" / "llama.cpp" / name
    path.write_text(path.read_text().replace("Date: Wed, 1 Jan 2025 00:00:00 +0000\n", ""))
    write_manifest(forge_root, upstream, [name], None)
    res = patch(forge_root)
    assert res.code == 2 and "'Date:'" in message(res) and name in message(res), res
    assert not src_dir(forge_root).exists()


def test_patch_without_a_diff_is_refused(upstream: Upstream, forge_root: Path) -> None:
    name = "0001-nothing.patch"
    (forge_root / "patches" / "llama.cpp" / name).write_text(
        "From: A <a@b.invalid>\nDate: Wed, 1 Jan 2025 00:00:00 +0000\nSubject: nothing\n\nbody\n"
    )
    write_manifest(forge_root, upstream, [name], None)
    res = patch(forge_root)
    assert res.code == 2 and "no diff" in message(res) and name in message(res), res


def test_result_tree_mismatch_fails_and_returns_to_pin(
    upstream: Upstream, forge_root: Path
) -> None:
    series = make_series(forge_root, upstream, with_trees=False)
    write_manifest(forge_root, upstream, series.files, None, result_tree=series.trees[0])
    res = patch(forge_root)
    assert res.code == 1, res
    text = message(res)
    assert series.trees[0] in text and series.trees[-1] in text and series.files[-1] in text
    assert head(src_dir(forge_root)) == series.pin


def _absolute_patch(root: Path, upstream: Upstream, old: str, new: str) -> str:
    text = (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: Mallory <m@evil.invalid>\n"
        "Date: Wed, 1 Jan 2025 00:00:00 +0000\n"
        "Subject: absolute\n\n---\n"
        f"--- {old}\n"
        f"+++ {new}\n"
        "@@ -0,0 +1 @@\n"
        "+hello\n"
    )
    name = "0001-absolute.patch"
    (root / "patches" / "llama.cpp" / name).write_text(text)
    write_manifest(root, upstream, [name], None)
    return name


@pytest.mark.parametrize(
    ("old", "new", "line", "shown"),
    [("/dev/null", "/tmp/x", 8, "/tmp/x"), ("/etc/x", "b/etc/x", 7, "/etc/x")],
)
def test_absolute_path_in_a_patch_is_bad_input(
    tmp_path: Path, upstream: Upstream, forge_root: Path, old: str, new: str, line: int, shown: str
) -> None:
    name = _absolute_patch(forge_root, upstream, old, new)
    for args in ([], ["--check"]):
        res = patch(forge_root, *args)
        assert res.code == 2, res
        assert name in message(res) and "absolute path" in message(res), res
        assert f"line {line}" in message(res) and shown in message(res), res
        assert res.json["line"] == line
    assert not src_dir(forge_root).exists()  # refused before anything was fetched


def test_check_fails_when_a_file_differs_from_the_manifest(
    upstream: Upstream, forge_root: Path
) -> None:
    """A file edited so that it still applies is not the series the manifest pins."""
    series = make_series(forge_root, upstream)
    path = series.paths(forge_root)[2]
    path.write_bytes(path.read_bytes().replace(b"Body of", b"Body of the"))
    res = patch(forge_root, "--check")
    assert res.code == 1, res
    assert res.json["applies"] is True
    assert res.json["changed_on_disk"] == [series.files[2]]
    assert "differ from the manifest's sha256" in res.stderr and series.files[2] in res.stderr


def test_patch_started_during_an_export_waits_and_sees_the_new_manifest(
    tmp_path: Path, upstream: Upstream, forge_root: Path
) -> None:
    """The manifest is read under the lock: a `patch` that starts while another run (here:
    a stand-in for `export`, holding the workspace lock while it rewrites patches/ and the
    manifest) is busy waits, then applies the new series instead of calling it edited."""
    from support.daemon import Background

    from dgr_forge.core.forge import Forge
    from dgr_forge.core.lock import workspace_lock
    from dgr_forge.core.output import Reporter

    make_series(forge_root, upstream)
    assert patch(forge_root).code == 0
    forge = Forge(root=forge_root, workspace=forge_root / ".dgr")
    with workspace_lock(forge, Reporter(quiet=True)):
        bg = Background("--json", "patch", cwd=forge_root)
        bg.wait_for("waiting for")
        edits: list[tuple[dict[str, str | None], str]] = [
            ({"docs/new.md": "new\n"}, "docs: a new first patch"),
            ({"docs/other.md": "other\n"}, "docs: another"),
        ]
        new = make_series(forge_root, upstream, edits)  # the "export": new files + manifest
    out, _err = bg.proc.communicate(timeout=120)
    assert bg.proc.returncode == 0, (out, bg.lines)
    assert json.loads(out)["changed"] is True
    src = src_dir(forge_root)
    assert sh_git(src, "rev-parse", "HEAD^{tree}") == new.trees[-1]


def test_check_reports_the_tampered_patch_not_the_next_one(
    upstream: Upstream, forge_root: Path
) -> None:
    """A patch file changed so that it still applies but gives another tree: that patch is
    reported (tree-mismatch, changed on disk); the untouched one after it is not blamed."""
    series = make_series(forge_root, upstream)
    assert patch(forge_root).code == 0
    path = series.paths(forge_root)[1]
    path.write_text(path.read_text().replace("return 2;", "return 3;"))
    res = patch(forge_root, "--check")
    assert res.code == 1, res
    states = [(p["file"], p["status"], p["changed_on_disk"]) for p in res.json["patches"]]
    assert states == [
        (series.files[0], "applies", False),
        (series.files[1], "tree-mismatch", True),
        (series.files[2], "skipped", False),
    ]
    st = run_forge("--root", str(forge_root), "--json", "status")
    rows = {p["file"]: p["state"] for p in st.json["patches"]["series"]}
    assert rows[series.files[1]] == "changed on disk" and rows[series.files[2]] == "applied"
