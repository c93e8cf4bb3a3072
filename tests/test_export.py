"""`dgr-forge export`: the workspace's commits become the canonical, byte-stable series."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest
from support.cli import run_forge
from support.git import Upstream, sh_git
from support.patches import AUTHOR_ENV, commit_in, head, make_series, snapshot, src_dir

from dgr_forge.upstream import manifest, manifest_edit
from dgr_forge.upstream.export import compute_series, slug

MANIFEST = Path("manifests") / "llama.cpp.toml"


def forge(root: Path, *args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return run_forge("--root", str(root), "--json", *args, env=env)


def message(res) -> str:  # type: ignore[no-untyped-def]
    data = res.json
    return f"{data.get('error')} {data.get('hint')}"


def state(root: Path) -> dict[str, tuple[bytes, int]]:
    """Bytes and mtimes of patches/ and the manifest."""
    snap = {f"patches/{k}": v for k, v in snapshot(root / "patches").items()}
    path = root / MANIFEST
    snap[str(MANIFEST)] = (path.read_bytes(), path.stat().st_mtime_ns)
    return snap


def commented(root: Path) -> None:
    """Add the kind of comments a person writes into the manifest."""
    path = root / MANIFEST
    text = path.read_text()
    text = text.replace("[[patches.series]]", "# why this patch exists\n[[patches.series]]")
    text = text.replace('dir = "patches/llama.cpp"', 'dir = "patches/llama.cpp"  # the series')
    path.write_text(text)


@pytest.fixture
def exported(upstream: Upstream, forge_root: Path) -> Path:
    """A forge root whose series went through `patch` + `export` once (canonical form)."""
    make_series(forge_root, upstream)
    commented(forge_root)
    (forge_root / "patches" / "llama.cpp" / ".gitkeep").write_text("")
    assert forge(forge_root, "patch").code == 0
    res = forge(forge_root, "export")
    assert res.code == 0, res
    return forge_root


def test_first_export_canonicalizes_and_records_trees(upstream: Upstream, forge_root: Path) -> None:
    series = make_series(forge_root, upstream, with_trees=False)
    assert forge(forge_root, "patch").code == 0
    res = forge(forge_root, "export")
    assert res.code == 0, res
    m = manifest.load(forge_root / MANIFEST, forge_root)
    assert [e.file for e in m.series] == series.files
    assert [e.tree for e in m.series] == series.trees
    assert m.result_tree == series.trees[-1]
    for entry in m.series:
        data = m.patch_path(entry).read_bytes()
        assert data.startswith(b"From 0000000000000000000000000000000000000000 ")
        assert b"\r\n" not in data and b"[PATCH" not in data
        assert not data.rstrip().endswith(b"-- ")  # no signature
        assert b"\n-- \n" not in data
        assert b"index " in data and len(data.split(b"index ")[1].split(b"..")[0]) == 40
        # committed files keep ordinary permissions (not the temp file's 0600)
        assert m.patch_path(entry).stat().st_mode & 0o044 == 0o044
    assert (forge_root / MANIFEST).stat().st_mode & 0o044 == 0o044


def test_unchanged_series_export_changes_no_byte_and_no_mtime(exported: Path) -> None:
    before = state(exported)
    res = forge(exported, "export")
    assert res.code == 0, res
    assert res.json["changed"] is False and res.json["written"] == []
    assert state(exported) == before


def test_one_line_edit_in_patch_2_changes_only_its_file_and_lines(exported: Path) -> None:
    src = src_dir(exported)
    before = state(exported)
    manifest_before = (exported / MANIFEST).read_text()
    c1, c2, c3 = sh_git(src, "rev-list", "--reverse", "HEAD~3..HEAD").split()
    # the scripted equivalent of `git rebase -i` + "edit" on patch 2
    sh_git(src, "checkout", "-q", "--detach", c2)
    text = (src / "ggml" / "src" / "ggml.c").read_text().replace("return 2;", "return 3;")
    (src / "ggml" / "src" / "ggml.c").write_text(text)
    sh_git(src, "commit", "-q", "-a", "--amend", "--no-edit", env=AUTHOR_ENV)
    sh_git(src, "cherry-pick", c3, env=AUTHOR_ENV)
    del c1

    res = forge(exported, "export")
    assert res.code == 0, res
    m = manifest.load(exported / MANIFEST, exported)
    files = [e.file for e in m.series]
    assert res.json["written"] == [files[1]] and res.json["removed"] == []
    after = state(exported)
    changed = {k for k in after if after[k] != before.get(k)}
    assert changed == {f"patches/llama.cpp/{files[1]}", str(MANIFEST)}
    diff = [
        line
        for line in difflib.unified_diff(
            manifest_before.splitlines(), (exported / MANIFEST).read_text().splitlines(), n=0
        )
        if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
    ]
    new = m.series
    # patch 2's hash and tree; patch 3's and the result's tree (trees are cumulative)
    assert sorted(diff) == sorted(
        [
            *(f"-{ln}" for ln in _lines(manifest_before, 1) + _lines(manifest_before, 2, True)),
            f'+sha256 = "{new[1].sha256}"',
            f'+tree = "{new[1].tree}"',
            f'+tree = "{new[2].tree}"',
            f'-tree = "{_old_result(manifest_before)}"',
            f'+tree = "{m.result_tree}"',
        ]
    )
    assert "# why this patch exists" in (exported / MANIFEST).read_text()
    assert '"patches/llama.cpp"  # the series' in (exported / MANIFEST).read_text()
    # and the new series reproduces in a fresh workspace
    ws2 = str(exported / "ws2")
    again = run_forge("--root", str(exported), "--workspace", ws2, "--json", "patch")
    assert again.code == 0 and again.json["result_tree"] == m.result_tree, again
    # export left the workspace on exactly the commits `patch` makes from the files
    assert again.json["head_commit"] == head(src)
    assert forge(exported, "patch").json["changed"] is False


def _lines(text: str, index: int, tree_only: bool = False) -> list[str]:
    entry = text.split("[[patches.series]]")[index + 1].split("\n\n")[0]
    keys = ("tree",) if tree_only else ("sha256", "tree")
    return [ln for ln in entry.splitlines() if ln.split(" ")[0] in keys]


def _old_result(text: str) -> str:
    return text.split("[patches.result]")[1].split('"')[1]


def test_dropped_commit_removes_its_file_and_entry(exported: Path) -> None:
    src = src_dir(exported)
    files = [e.file for e in manifest.load(exported / MANIFEST, exported).series]
    sh_git(src, "reset", "-q", "--hard", "HEAD~1")
    res = forge(exported, "export")
    assert res.code == 0, res
    assert res.json["removed"] == [files[2]] and res.json["written"] == []
    assert not (exported / "patches" / "llama.cpp" / files[2]).exists()
    assert (exported / "patches" / "llama.cpp" / ".gitkeep").exists()
    m = manifest.load(exported / MANIFEST, exported)
    assert [e.file for e in m.series] == files[:2]


def test_new_commit_becomes_patch_4(exported: Path) -> None:
    src = src_dir(exported)
    commit_in(src, {"README.md": "# llama, patched\n"}, "README: say it is patched", 5)
    before = state(exported)
    res = forge(exported, "export")
    assert res.code == 0, res
    assert res.json["written"] == ["0004-readme-say-it-is-patched.patch"]
    after = state(exported)
    for key, value in before.items():
        if key.endswith(".patch"):
            assert after[key] == value
    assert forge(exported, "patch").json["changed"] is False  # the workspace is the series


def test_uncommitted_edits_are_refused(exported: Path) -> None:
    src = src_dir(exported)
    (src / "README.md").write_text("uncommitted\n")
    before = state(exported)
    res = forge(exported, "export")
    assert res.code == 3, res
    assert "uncommitted" in message(res) and "README.md" in message(res)
    assert state(exported) == before
    assert (src / "README.md").read_text() == "uncommitted\n"


@pytest.mark.parametrize("step", ["staged", "swapped"])
def test_failure_mid_export_leaves_the_old_series(exported: Path, step: str) -> None:
    src = src_dir(exported)
    sh_git(src, "reset", "-q", "--hard", "HEAD~1")
    commit_in(src, {"README.md": "x\n"}, "Another change", 6)
    before = state(exported)
    res = forge(exported, "export", env={"DGR_FAULT": f"export.{step}:fail"})
    assert res.code == 1 and "injected" in message(res), res
    assert state(exported) == before
    assert [p.name for p in (exported / "patches").iterdir()] == ["llama.cpp"]
    assert not list((exported / "manifests").glob(".*"))
    ok = forge(exported, "export")
    assert ok.code == 0 and ok.json["changed"] is True, ok


def test_killed_between_renames_is_recovered(exported: Path) -> None:
    """The one non-atomic instant: the old dir renamed away, the new one not yet in place."""
    pdir = exported / "patches" / "llama.cpp"
    before = state(exported)
    pdir.rename(exported / "patches" / ".llama.cpp.export-old-999")
    res = forge(exported, "export")
    assert res.code == 0, res
    assert state(exported) == before


def test_hand_edited_patch_file_is_exported_after_patch_refuses_it(exported: Path) -> None:
    m = manifest.load(exported / MANIFEST, exported)
    path = m.patch_path(m.series[1])
    path.write_bytes(path.read_bytes().replace(b"+    return 2;", b"+    return 22;"))
    refused = forge(exported, "patch")
    assert refused.code == 2 and "dgr-forge export" in message(refused)
    res = forge(exported, "export")
    assert res.code == 0, res
    m2 = manifest.load(exported / MANIFEST, exported)
    assert m2.series[1].sha256 != m.series[1].sha256
    assert b"return 22;" in m2.patch_path(m2.series[1]).read_bytes()
    ok = forge(exported, "patch")
    assert ok.code == 0 and ok.json["changed"] is False, ok
    assert "return 22;" in (src_dir(exported) / "ggml" / "src" / "ggml.c").read_text()


def test_hand_edited_file_and_workspace_edits_is_refused(exported: Path) -> None:
    m = manifest.load(exported / MANIFEST, exported)
    path = m.patch_path(m.series[1])
    path.write_bytes(path.read_bytes().replace(b"+    return 2;", b"+    return 22;"))
    commit_in(src_dir(exported), {"README.md": "y\n"}, "mine", 7)
    before = state(exported)
    res = forge(exported, "export")
    assert res.code == 3 and "both changed" in message(res), res
    assert state(exported) == before


def test_compute_series_touches_nothing_and_matches(exported: Path, tmp_path: Path) -> None:
    m = manifest.load(exported / MANIFEST, exported)
    src = src_dir(exported)
    before, before_head = state(exported), head(src)
    series = compute_series(src, m.commit, tmp_path / "out")
    assert [p.file for p in series] == [e.file for e in m.series]
    for p, e in zip(series, m.series, strict=True):
        assert (tmp_path / "out" / p.file).read_bytes() == m.patch_path(e).read_bytes()
        assert p.sha256 == e.sha256 and p.tree == e.tree
    assert state(exported) == before and head(src) == before_head


def test_slug_is_stable() -> None:
    assert slug("Add layer range ownership") == "add-layer-range-ownership"
    assert slug("ggml: CUDA (fix) — über!") == "ggml-cuda-fix-ber"
    assert slug("!!!") == "patch"
    assert len(slug("x" * 200)) == 52


def test_manifest_edit_keeps_comments_and_moves_pin() -> None:
    text = (
        '# top comment\nschema = 1\n\n[upstream]\nname = "llama.cpp"\n'
        'commit = "' + "a" * 40 + '"  # the pin\n\n[patches]\ndir = "patches/llama.cpp"\n\n'
        '# first\n[[patches.series]]\nfile = "0001-a.patch"\nsha256 = "' + "1" * 64 + '"\n\n'
        '# second\n[[patches.series]]\nfile = "0002-b.patch"\nsha256 = "' + "2" * 64 + '"\n'
    )
    new = manifest_edit.updated_text(
        text,
        [manifest.PatchEntry(file="0001-b.patch", sha256="3" * 64, tree="c" * 40)],
        "c" * 40,
        upstream_commit="b" * 40,
        upstream_tree="d" * 40,
    )
    assert "# top comment" in new and "# the pin" in new
    assert "# second" in new and "# first" not in new  # the comment went with its patch
    assert f'commit = "{"b" * 40}"  # the pin' in new
    assert "0002-b.patch" not in new and 'file = "0001-b.patch"' in new
    assert new.index("[[patches.series]]") < new.index("[patches.result]")


def test_export_from_the_bare_pin_is_refused(exported: Path) -> None:
    src = src_dir(exported)
    sh_git(src, "checkout", "-q", "--detach", "HEAD~3")
    before = state(exported)
    res = forge(exported, "export")
    assert res.code == 3 and "delete all 3 patches" in message(res), res
    assert state(exported) == before


def test_export_refuses_merges_empty_commits_and_foreign_bases(exported: Path) -> None:
    src = src_dir(exported)
    tip = head(src)
    before = state(exported)
    # an empty commit
    sh_git(src, "commit", "-q", "--allow-empty", "-m", "nothing", env=AUTHOR_ENV)
    res = forge(exported, "export")
    assert res.code == 3 and "changes nothing" in message(res), res
    # a merge commit
    sh_git(src, "checkout", "-q", "--detach", tip)
    side = commit_in(src, {"README.md": "side\n"}, "side", 8)
    sh_git(src, "checkout", "-q", "--detach", tip)
    commit_in(src, {"docs/other.md": "other\n"}, "other", 9)
    sh_git(src, "merge", "-q", "--no-edit", side, env=AUTHOR_ENV)
    res = forge(exported, "export")
    assert res.code == 3 and "merge" in message(res), res
    # a HEAD that is not based on the pin
    sh_git(src, "checkout", "-q", "--orphan", "elsewhere")
    sh_git(src, "commit", "-q", "-m", "unrelated", env=AUTHOR_ENV)
    res = forge(exported, "export")
    assert res.code == 3 and "not based on the pinned commit" in message(res), res
    assert state(exported) == before


def test_export_without_a_workspace_is_bad_input(upstream: Upstream, forge_root: Path) -> None:
    make_series(forge_root, upstream)
    before = state(forge_root)
    res = forge(forge_root, "export")
    assert res.code == 2 and "dgr-forge patch" in message(res), res
    assert state(forge_root) == before


# ----------------------------------------------------------------------------- issue 15


@pytest.mark.parametrize(
    "line", ["---", "--- a/x", "diff --git a/x b/x", "From nobody Mon Sep 17 00:00:00 2001"]
)
def test_message_git_am_would_cut_is_refused_naming_commit_and_line(
    exported: Path, line: str
) -> None:
    src = src_dir(exported)
    (src / "README.md").write_text("x\n")
    sh_git(src, "add", "-A")
    body = f"Explain the change\n\nfirst paragraph\n{line}\nlast paragraph\n"
    sh_git(src, "commit", "-q", "-m", body, env=AUTHOR_ENV)
    commit = head(src)
    before = state(exported)
    res = forge(exported, "export")
    assert res.code == 2, res
    assert commit[:12] in message(res) and "line 4" in message(res), res
    assert line[:20] in message(res) and "reword" in message(res)
    assert state(exported) == before


def test_message_round_trip_is_exact(exported: Path) -> None:
    """A message with indented look-alikes, trailers and blank lines survives export ->
    patch -> re-export byte for byte, and `check` passes."""
    src = src_dir(exported)
    (src / "README.md").write_text("x\n")
    sh_git(src, "add", "-A")
    body = (
        "Explain the change\n\nfirst paragraph\n  --- indented\n  diff --git quoted\n"
        " From a quote\n\nSigned-off-by: A <a@b.invalid>\n"
    )
    sh_git(src, "commit", "-q", "-m", body, env=AUTHOR_ENV)
    message_before = sh_git(src, "log", "-1", "--format=%B")
    assert forge(exported, "export").code == 0
    files = state(exported)
    # a fresh workspace from the files: the same message, and a re-export changes nothing
    shutil.rmtree(exported / ".dgr")
    assert forge(exported, "patch").code == 0
    assert sh_git(src_dir(exported), "log", "-1", "--format=%B") == message_before
    again = forge(exported, "export")
    assert again.code == 0 and again.json["changed"] is False, again
    assert {k: v[0] for k, v in state(exported).items()} == {k: v[0] for k, v in files.items()}
    assert forge(exported, "check").code == 0


def test_forge_written_comments_do_not_go_stale() -> None:
    text = (
        'schema = 1\n\n[upstream]\nname = "llama.cpp"\ncommit = "' + "a" * 40 + '"\n'
        '# tree = "<40 hex>"  # add after the first verified fetch\n\n'
        '[patches]\ndir = "patches/llama.cpp"\n'
        "# the series is empty for now; `dgr-forge export` writes [[patches.series]] here\n"
    )
    entry = manifest.PatchEntry(file="0001-a.patch", sha256="1" * 64, tree="c" * 40)
    moved = manifest_edit.updated_text(text, [entry], "c" * 40, upstream_tree="d" * 40)
    assert "# tree =" not in moved and "series is empty" not in moved
    assert f'tree = "{"d" * 40}"' in moved
    # no tree yet, no series yet: the comments still tell the truth and stay
    same = manifest_edit.updated_text(text, [], "e" * 40)
    assert "# tree =" in same and "series is empty" in same


def test_export_adding_and_dropping_patches_leaves_no_double_blank_lines(
    exported: Path,
) -> None:
    src = src_dir(exported)
    commit_in(src, {"docs/extra.md": "extra\n"}, "docs: extra", 5)
    assert forge(exported, "export").code == 0
    text = (exported / MANIFEST).read_text()
    assert "\n\n\n" not in text, text
    assert text.count("[[patches.series]]") == 4 and "# why this patch exists" in text
    sh_git(src, "reset", "-q", "--hard", "HEAD~2")
    assert forge(exported, "export").code == 0
    text = (exported / MANIFEST).read_text()
    assert "\n\n\n" not in text and text.count("[[patches.series]]") == 2, text


SQUASH_MESSAGE = """ggml: backport the rpc fix (#1234)

* rpc: check the tensor size

* rpc: keep the old wire format
  (a continuation line, indented)

An indented diff, as reviewers paste them:

    diff --git a/ggml/src/ggml.c b/ggml/src/ggml.c
    --- a/ggml/src/ggml.c
    +++ b/ggml/src/ggml.c

---  two spaces after the dashes is text too
----
From here on it is different (no mbox date: git keeps it)

---------

Co-authored-by: Jane Doe <jane@example.com>
Co-authored-by: John Roe <john@example.com>
"""


def test_real_upstream_messages_round_trip_byte_for_byte(exported: Path, tmp_path: Path) -> None:
    """A GitHub squash merge (`---------`, `Co-authored-by:`), bullets and an indented diff
    survive export -> apply -> re-export exactly (issue 19)."""
    src = src_dir(exported)
    (src / "docs").mkdir(exist_ok=True)
    (src / "docs" / "rpc.md").write_text("rpc\n")
    sh_git(src, "add", "-A")
    msg = tmp_path / "msg"
    msg.write_text(SQUASH_MESSAGE)
    sh_git(src, "commit", "-q", "-F", str(msg), env=AUTHOR_ENV)
    original = sh_git(src, "log", "-1", "--format=%B")
    res = forge(exported, "export")
    assert res.code == 0, res
    files = state(exported)
    fresh = tmp_path / "fresh"
    assert forge(exported, "--workspace", str(fresh), "patch").code == 0
    applied = fresh / "src" / "llama.cpp"
    assert sh_git(applied, "log", "-1", "--format=%B") == original
    res = forge(exported, "--workspace", str(fresh), "--json", "export")
    assert res.code == 0 and res.json["changed"] is False, res
    assert {k: v[0] for k, v in state(exported).items()} == {k: v[0] for k, v in files.items()}


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("---   ", "separator"),
        ("Index: src/llama.cpp", "CVS"),
        ("From nobody Mon Sep 17 00:00:00 2001", "mbox"),
        ("From: Somebody Else <else@example.com>", "mail header"),
    ],
)
def test_message_lines_git_am_would_cut_are_refused(exported: Path, line: str, why: str) -> None:
    src = src_dir(exported)
    (src / "new.txt").write_text("new\n")
    sh_git(src, "add", "-A")
    sh_git(src, "commit", "-q", "-m", "subject", "-m", f"{line}\nmore text", env=AUTHOR_ENV)
    before = state(exported)
    res = forge(exported, "export")
    assert res.code == 2, res
    assert "line 3" in res.json["error"] and why in res.json["error"], res
    assert sh_git(src, "rev-parse", "HEAD")[:12] in res.json["error"]
    assert state(exported) == before
