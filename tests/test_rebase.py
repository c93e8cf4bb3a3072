"""`dgr-forge rebase`: a real series replayed onto a test upstream that moves on."""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from pathlib import Path

import pytest
from support.cli import run_forge
from support.git import Upstream, sh_git
from support.rebase import (
    GGML_NEW,
    GGML_OLD,
    LLAMA_OWNER_OLD,
    kill,
    make_series,
    patch,
    start_paused,
    upstream_edit,
)
from support.roots import Series

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def series(tmp_path: Path, upstream: Upstream) -> Series:
    return make_series(tmp_path, upstream)


def pinned(s: Series) -> dict[str, object]:
    return tomllib.loads(s.manifest.read_text())


def outcomes(result_json: dict[str, object]) -> dict[str, str]:
    rows = result_json["patches"]
    assert isinstance(rows, list)
    return {r["file"][:4]: r["outcome"] for r in rows}


def conflicting_upstream(s: Series) -> str:
    """Upstream rewrites the very lines patch 1 changes."""
    return upstream_edit(
        s.upstream,
        "src/llama.cpp",
        LLAMA_OWNER_OLD,
        "    return layer < 0 ? -1 : 0; /* upstream: validate */\n",
        "llama: validate the layer index",
    )


def shift_patch_1(s: Series) -> str:
    """An unrelated upstream change that moves patch 1's lines (it gets refreshed)."""
    text = (s.upstream.path / "src/llama.cpp").read_text()
    return s.upstream.commit({"src/llama.cpp": "// upstream: moved\n" + text}, "llama: move")


def assert_at_old_state(s: Series, before: dict[str, bytes], old_head: str) -> None:
    assert s.snapshot() == before  # byte for byte
    assert sh_git(s.src, "rev-parse", "HEAD") == old_head
    assert sh_git(s.src, "status", "--porcelain") == ""
    assert not (s.root / ".dgr" / "rebase.json").exists()
    assert not patch(s.root).changed  # the old series is intact and already applied


# ----------------------------------------------------------------------------- (a)


def test_unrelated_upstream_change_carries_cleanly(series: Series) -> None:
    s = series
    up = s.upstream
    # shifts patch 1's lines (offsets move), leaves the other files alone
    text = (up.path / "src/llama.cpp").read_text()
    up.commit({"src/llama.cpp": "// upstream: a header comment\n\n" + text}, "llama: comment")
    new = up.commit({"docs/changes.md": "upstream moved on\n"}, "docs: changes")
    before = s.snapshot()

    r = s.forge("rebase", "--onto", new, "--json")
    assert r.code == 0, r
    res = r.json
    assert res["status"] == "done" and res["new_commit"] == new
    got = outcomes(res)
    assert got == {"0001": "refreshed", "0002": "unchanged", "0003": "unchanged"}
    # re-pinned with commit + tree, hashes and per-patch trees rewritten
    m = pinned(s)
    assert m["upstream"]["commit"] == new  # type: ignore[index]
    assert m["upstream"]["tree"] == up.tree(new)  # type: ignore[index]
    assert s.patch_files() == sorted(k for k in before if k.endswith(".patch"))
    # rewritten files keep ordinary permissions (not a temp file's 0600)
    for path in [s.root / "manifests" / "llama.cpp.toml", *s.patches_dir.glob("*.patch")]:
        assert path.stat().st_mode & 0o044 == 0o044, path
    after = s.snapshot()
    assert (
        after["0002-ggml-count-the-rpc-backend.patch"]
        == before["0002-ggml-count-the-rpc-backend.patch"]
    )
    assert (
        after["0001-llama-add-layer-range-ownership.patch"]
        != before["0001-llama-add-layer-range-ownership.patch"]
    )
    # the report a release engineer pastes into the PR
    report = Path(res["report"])
    assert report.name == f"rebase-{s.pin[:12]}-{new[:12]}.json"
    data = json.loads(report.read_text())
    assert data["old"]["commit"] == s.pin and data["new"]["commit"] == new
    assert [p["outcome"] for p in data["patches"]] == ["refreshed", "unchanged", "unchanged"]
    md = Path(res["report_markdown"]).read_text()
    assert s.pin[:12] in md and new[:12] in md and "refreshed" in md
    # the workspace is at the new pin + series, and check agrees with everything
    assert not patch(s.root).changed
    assert s.forge("check").code == 0


def test_ref_is_resolved_and_printed(series: Series) -> None:
    s = series
    new = s.upstream.commit({"docs/x.md": "x\n"}, "docs: x")
    sh_git(s.upstream.path, "tag", "b9999")
    r = s.forge("rebase", "--onto", "b9999", "--json")
    assert r.code == 0, r
    assert r.json["new_commit"] == new
    assert new in r.stderr  # the full id that is pinned is shown
    assert pinned(s)["upstream"]["commit"] == new  # type: ignore[index]


# ----------------------------------------------------------------------------- (b)


def test_conflict_names_patch_file_and_upstream_commit_then_continue(series: Series) -> None:
    s = series
    culprit = conflicting_upstream(s)
    new = s.upstream.commit({"docs/after.md": "later\n"}, "docs: unrelated later commit")
    before = s.snapshot()

    r = s.forge("rebase", "--onto", new, "--json")
    assert r.code == 3, r
    err = r.json
    assert err["patch"] == "0001-llama-add-layer-range-ownership.patch"
    assert err["files"] == ["src/llama.cpp"]
    assert [c["commit"] for c in err["upstream_commits"]["src/llama.cpp"]] == [culprit]
    assert "0001-llama-add-layer-range-ownership.patch" in r.stderr
    assert "src/llama.cpp" in r.stderr and culprit[:12] in r.stderr
    assert "dgr-forge rebase --continue" in r.stderr and "--abort" in r.stderr
    assert s.snapshot() == before  # nothing written before success
    state = json.loads((s.root / ".dgr" / "rebase.json").read_text())
    assert state["phase"] == "conflict"

    # commands that would move or read the half-replayed workspace refuse, losing nothing
    conflicted_text = (s.src / "src/llama.cpp").read_text()
    # the cpu lane, so `build` gets as far as the workspace
    shutil.copytree(REPO / "toolchains", s.root / "toolchains", dirs_exist_ok=True)
    shutil.copy(REPO / "recipes" / "cpu.toml", s.root / "recipes" / "cpu.toml")
    for cmd in (["fetch"], ["fetch", "--force"], ["patch"], ["export"], ["build", "--no-sign"]):
        r = s.forge(*cmd)
        assert r.code == 3, (cmd, r)
        assert "a rebase is in progress" in r.stderr and "rebase --continue" in r.stderr, r
    assert (s.src / "src/llama.cpp").read_text() == conflicted_text
    assert s.snapshot() == before

    # a new shell: --continue refuses while the file is unresolved, losing nothing
    r = s.forge("rebase", "--continue")
    assert r.code == 3 and "src/llama.cpp" in r.stderr, r
    conflicted = (s.src / "src/llama.cpp").read_text()
    assert "<<<<<<<" in conflicted
    # staging the file with markers still in it is refused too
    sh_git(s.src, "add", "src/llama.cpp")
    r = s.forge("rebase", "--continue")
    assert r.code == 3 and "conflict markers" in r.stderr, r

    # resolve: keep upstream's validation, add our ownership rule
    resolved = (
        (s.upstream.path / "src/llama.cpp")
        .read_text()
        .replace(
            "    return layer < 0 ? -1 : 0; /* upstream: validate */\n",
            "    return layer < 0 ? -1 : layer % 2; /* dgr: odd layers are remote */\n",
        )
    )
    (s.src / "src/llama.cpp").write_text(resolved)
    sh_git(s.src, "add", "src/llama.cpp")
    r = s.forge("rebase", "--continue", "--json")
    assert r.code == 0, r
    assert outcomes(r.json) == {"0001": "resolved", "0002": "unchanged", "0003": "unchanged"}
    m = pinned(s)
    assert m["upstream"]["commit"] == new  # type: ignore[index]
    assert "layer % 2" in (s.patches_dir / "0001-llama-add-layer-range-ownership.patch").read_text()
    assert not (s.root / ".dgr" / "rebase.json").exists()
    md = Path(r.json["report_markdown"]).read_text()
    assert "resolved by hand" in md and culprit[:12] in md
    assert s.forge("check").code == 0


def test_a_conflict_after_patches_merged_in_memory_shows_in_the_work_tree(
    series: Series,
) -> None:
    # patch 1 merges cleanly (in memory, the work tree not touched), patch 2 conflicts:
    # the work tree is brought to patch 1's new commit first, so the conflict shows there
    s = series
    shift_patch_1(s)  # patch 1 is refreshed (merged in memory)
    culprit = upstream_edit(
        s.upstream, "ggml/src/ggml.c", GGML_OLD, "    return 1 + 0; /* upstream */\n", "ggml: x"
    )
    r = s.forge("rebase", "--onto", culprit, "--json")
    assert r.code == 3, r
    assert r.json["patch"] == "0002-ggml-count-the-rpc-backend.patch"
    state = json.loads((s.root / ".dgr" / "rebase.json").read_text())
    first = state["patches"][0]["new_commit"]
    assert first and sh_git(s.src, "rev-parse", "HEAD") == first == state["head"]
    assert sh_git(s.src, "rev-parse", "HEAD^") == culprit
    assert "// upstream: moved" in (s.src / "src/llama.cpp").read_text()
    assert "layer % 2" in (s.src / "src/llama.cpp").read_text()  # patch 1, refreshed
    assert "<<<<<<<" in (s.src / "ggml/src/ggml.c").read_text()
    assert sh_git(s.src, "ls-files", "-u").strip()  # git's own unmerged entries

    (s.src / "ggml/src/ggml.c").write_text(
        (s.upstream.path / "ggml/src/ggml.c").read_text().replace("1 + 0", "2")
    )
    sh_git(s.src, "add", "ggml/src/ggml.c")
    r = s.forge("rebase", "--continue", "--json")
    assert r.code == 0, r
    assert outcomes(r.json) == {"0001": "refreshed", "0002": "resolved", "0003": "unchanged"}
    assert sh_git(s.src, "status", "--porcelain") == ""  # the work tree is at the new head
    assert s.forge("check").code == 0


# ----------------------------------------------------------------------------- (c)


def test_upstreamed_patch_is_dropped_and_later_ones_renumbered(series: Series) -> None:
    s = series
    new = upstream_edit(s.upstream, "ggml/src/ggml.c", GGML_OLD, GGML_NEW, "ggml: count rpc")
    banner = s.root / "patches" / "llama.cpp" / "0003-tools-print-a-build-banner.patch"
    before = banner.stat()
    r = s.forge("rebase", "--onto", new, "--json")
    assert r.code == 0, r
    assert outcomes(r.json) == {"0001": "unchanged", "0002": "dropped", "0003": "unchanged"}
    # renumbered with the same bytes: the old file itself (linked, not written and synced again)
    after = (banner.parent / "0002-tools-print-a-build-banner.patch").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    rows = {row["file"][:4]: row for row in r.json["patches"]}
    assert rows["0002"]["new_file"] is None
    # the report says where it went
    assert [c["commit"] for c in rows["0002"]["upstream_commits"]] == [new]
    assert rows["0003"]["new_file"] == "0002-tools-print-a-build-banner.patch"
    assert s.patch_files() == [
        "0001-llama-add-layer-range-ownership.patch",
        "0002-tools-print-a-build-banner.patch",
    ]
    series_files = [e["file"] for e in pinned(s)["patches"]["series"]]  # type: ignore[index]
    assert series_files == s.patch_files()
    assert "dropped" in Path(r.json["report_markdown"]).read_text()
    assert s.forge("check").code == 0


# ----------------------------------------------------------------------------- (d)


def test_abort_restores_everything_byte_for_byte(series: Series) -> None:
    s = series
    conflicting_upstream(s)
    new = s.upstream.head
    before = s.snapshot()
    old_head = sh_git(s.src, "rev-parse", "HEAD")
    r = s.forge("rebase", "--onto", new)
    assert r.code == 3, r
    # starting another rebase meanwhile is refused, naming the way out
    again = s.forge("rebase", "--onto", new)
    assert again.code == 3 and "in progress" in again.stderr and "--abort" in again.stderr

    r = s.forge("rebase", "--abort", "--json")
    assert r.code == 0, r
    assert r.json["status"] == "aborted"
    assert_at_old_state(s, before, old_head)
    # and nothing left to continue or abort
    for flag in ("--continue", "--abort"):
        r = s.forge("rebase", flag)
        assert r.code == 2 and "no rebase in progress" in r.stderr, r


# ----------------------------------------------------------------------------- (e)


@pytest.mark.parametrize("step", ["rebase.replay:0002", "rebase.commit:0002", "rebase.swapped"])
def test_killed_mid_rebase_then_continue(series: Series, step: str) -> None:
    s = series
    new = shift_patch_1(s)
    proc = start_paused(s, step, "--onto", new)
    kill(proc)
    assert (s.root / ".dgr" / "rebase.json").exists()
    if step.startswith("rebase.replay"):  # as if git itself had died mid-step
        (s.src / ".git" / "index.lock").write_text("")
    r = s.forge("rebase", "--continue", "--json")
    assert r.code == 0, r
    if step.startswith("rebase.replay"):
        assert "stale" in r.stderr and "index.lock" in r.stderr
    assert outcomes(r.json) == {"0001": "refreshed", "0002": "unchanged", "0003": "unchanged"}
    assert pinned(s)["upstream"]["commit"] == new  # type: ignore[index]
    assert s.forge("check").code == 0


@pytest.mark.parametrize("step", ["rebase.replay:0002", "rebase.commit:0002", "rebase.swapped"])
def test_killed_mid_rebase_then_abort(series: Series, step: str) -> None:
    s = series
    shift_patch_1(s)
    before = s.snapshot()
    old_head = sh_git(s.src, "rev-parse", "HEAD")
    proc = start_paused(s, step, "--onto", s.upstream.head)
    kill(proc)
    if step == "rebase.swapped":  # killed between writing patches/ and the manifest
        assert s.snapshot() != before
    r = s.forge("rebase", "--abort")
    assert r.code == 0, r
    assert_at_old_state(s, before, old_head)


def test_stale_git_state_is_reported_not_tripped_over(series: Series) -> None:
    s = series
    new = s.upstream.commit({"docs/z.md": "z\n"}, "docs: z")
    gitdir = s.src / ".git"
    (gitdir / "rebase-apply").mkdir()
    before = s.snapshot()
    r = s.forge("rebase", "--onto", new)
    assert r.code == 3, r
    assert "rebase-apply" in r.stderr and "am --abort" in r.stderr
    assert s.snapshot() == before
    assert not (s.root / ".dgr" / "rebase.json").exists()
    assert (gitdir / "rebase-apply").is_dir()  # reported, not removed: it may be someone's
    # a lone index.lock is a killed run's leftover (we hold the workspace lock): cleared
    (gitdir / "rebase-apply").rmdir()
    (gitdir / "index.lock").write_text("")
    r = s.forge("rebase", "--onto", new)
    assert r.code == 0 and "stale" in r.stderr, r


# ----------------------------------------------------------------------------- (f)


def test_fresh_workspace_reproduces_the_result_tree(series: Series, tmp_path: Path) -> None:
    s = series
    text = (s.upstream.path / "src/llama.cpp").read_text()
    s.upstream.commit({"src/llama.cpp": "// moved\n" + text}, "llama: move lines")
    new = upstream_edit(s.upstream, "ggml/src/ggml.c", GGML_OLD, GGML_NEW, "ggml: upstreamed")
    r = s.forge("rebase", "--onto", new)
    assert r.code == 0, r
    result_tree = pinned(s)["patches"]["result"]["tree"]  # type: ignore[index]
    r = run_forge("--root", str(s.root), "--workspace", str(tmp_path / "fresh"), "patch", "--json")
    assert r.code == 0, r
    assert r.json["changed"] is True and r.json["result_tree"] == result_tree
    src = Path(r.json["src_dir"])
    assert sh_git(src, "rev-parse", "HEAD^{tree}") == result_tree
    # the very commits the rebase made: same inputs, same ids on any machine
    assert sh_git(src, "rev-parse", "HEAD") == sh_git(s.src, "rev-parse", "HEAD")


# ----------------------------------------------------------------------------- refusals


def test_bad_usage_and_unknown_refs(series: Series) -> None:
    s = series
    before = s.snapshot()
    r = s.forge("rebase")
    assert r.code == 2 and "exactly one of" in r.stderr, r
    r = s.forge("rebase", "--onto", s.pin, "--continue")
    assert r.code == 2, r
    r = s.forge("rebase", "--onto", "no-such-tag")
    assert r.code == 2 and "no-such-tag" in r.stderr, r
    # issue 15: an abbreviated id is accepted (peeled to the full commit), an unknown one
    # is still bad input naming it
    r = s.forge("rebase", "--onto", s.pin[:10], "--json")
    assert r.code == 0 and r.json["status"] == "noop", r
    r = s.forge("rebase", "--onto", "abcdef0123")
    assert r.code == 2 and "abbreviated" in r.stderr and "abcdef0123" in r.stderr, r
    r = s.forge("rebase", "--onto", "1" * 40)
    assert r.code == 2 and "1" * 40 in r.stderr, r
    r = s.forge("rebase", "--onto", s.pin, "--json")
    assert r.code == 0 and r.json["status"] == "noop", r
    assert s.snapshot() == before
    assert not (s.root / ".dgr" / "rebase.json").exists()


def test_manifest_edited_during_rebase_is_refused(series: Series) -> None:
    s = series
    conflicting_upstream(s)
    r = s.forge("rebase", "--onto", s.upstream.head)
    assert r.code == 3, r
    before_manifest = s.manifest.read_bytes()
    s.manifest.write_text(s.manifest.read_text() + "# edited\n")
    edited = s.manifest.read_bytes()
    r = s.forge("rebase", "--continue")
    assert r.code == 3 and "changed since the rebase started" in r.stderr, r
    assert s.manifest.read_bytes() == edited
    # a patch file edited meanwhile is caught the same way; --abort keeps both edits
    s.manifest.write_bytes(before_manifest)
    patch_file = s.patches_dir / "0003-tools-print-a-build-banner.patch"
    patch_file.write_bytes(patch_file.read_bytes() + b"\n")
    r = s.forge("rebase", "--continue")
    assert r.code == 3 and "patch files changed" in r.stderr, r
    r = s.forge("rebase", "--abort")
    assert r.code == 0, r
    assert patch_file.read_bytes().endswith(b"\n\n")


def test_dirty_workspace_is_refused_and_the_edit_kept(series: Series) -> None:
    s = series
    new = s.upstream.commit({"docs/w.md": "w\n"}, "docs: w")
    edited = s.src / "README.md"
    edited.write_text("my local experiment\n")
    before = s.snapshot()
    r = s.forge("rebase", "--onto", new)
    assert r.code == 3 and "README.md" in r.stderr, r
    assert edited.read_text() == "my local experiment\n"
    assert s.snapshot() == before
    assert not (s.root / ".dgr" / "rebase.json").exists()


def test_continue_refuses_unstaged_changes_then_takes_a_committed_resolution(
    series: Series,
) -> None:
    s = series
    conflicting_upstream(s)
    r = s.forge("rebase", "--onto", s.upstream.head)
    assert r.code == 3, r
    resolved = (s.upstream.path / "src/llama.cpp").read_text().replace("0; /*", "layer % 2; /*")
    (s.src / "src/llama.cpp").write_text(resolved)
    sh_git(s.src, "add", "src/llama.cpp")
    (s.src / "README.md").write_text("stray edit\n")  # not part of the resolution
    r = s.forge("rebase", "--continue", "--json")
    assert r.code == 3 and "not staged" in r.json["error"], r
    assert r.json["files"] == ["README.md"]
    assert (s.src / "README.md").read_text() == "stray edit\n"  # nothing lost
    sh_git(s.src, "checkout", "--", "README.md")
    # the engineer commits the resolution by habit: its tree is taken, our metadata kept
    sh_git(s.src, "commit", "-q", "-m", "wip resolution")
    r = s.forge("rebase", "--continue", "--json")
    assert r.code == 0, r
    assert outcomes(r.json)["0001"] == "resolved"
    text = (s.patches_dir / "0001-llama-add-layer-range-ownership.patch").read_text()
    assert "Subject: llama: add layer-range ownership" in text and "wip" not in text


def test_url_moves_the_pin_to_a_fork(series: Series, tmp_path: Path) -> None:
    s = series
    fork = tmp_path / "fork"
    sh_git(tmp_path, "clone", "-q", str(s.upstream.path), str(fork))
    up = Upstream(fork, list(s.upstream.commits), 50)
    new = up.commit({"docs/fork.md": "fork\n"}, "fork: docs")
    r = s.forge("rebase", "--onto", new, "--url", up.url, "--json")
    assert r.code == 0, r
    m = pinned(s)
    assert m["upstream"]["url"] == up.url and m["upstream"]["commit"] == new  # type: ignore[index]
    assert "# the pin (test)" in s.manifest.read_text()  # comments kept


def test_empty_series_just_moves_the_pin(forge_root: Path, upstream: Upstream) -> None:
    new = upstream.commit({"docs/e.md": "e\n"}, "docs: e")
    r = run_forge("--root", str(forge_root), "rebase", "--onto", new, "--json")
    assert r.code == 0, r
    assert r.json["patches"] == []
    m = tomllib.loads((forge_root / "manifests" / "llama.cpp.toml").read_text())
    assert m["upstream"]["commit"] == new and m["upstream"]["tree"] == upstream.tree(new)


def test_offline_needs_a_commit_id(series: Series) -> None:
    r = series.forge("rebase", "--onto", "main", "--offline")
    assert r.code == 2 and "--offline" in r.stderr, r


def test_abbreviated_onto_a_tip_fetches_one_commit(series: Series) -> None:
    """Issue 19: an abbreviated id that a branch or tag points at is resolved from the
    ref listing; only that commit is fetched, not every branch and tag."""
    s = series
    new = s.upstream.commit({"docs/later.md": "later\n"}, "docs: later")
    r = s.forge("rebase", "--onto", new[:10], "--json")
    assert r.code == 0 and r.json["new_commit"] == new, r
    assert "fetching the upstream's branches and tags" not in r.stderr, r


def test_abbreviated_onto_whose_fetch_fails_names_the_id_and_leaves_no_packs(
    series: Series,
) -> None:
    s = series
    s.upstream.commit({f"bulk/{i}.bin": os.urandom(60_000).hex() for i in range(30)}, "bulk")
    inner = s.upstream.commit({"docs/inner.md": "inner\n"}, "docs: inner")
    s.upstream.commit({"zz-tip.txt": os.urandom(2000).hex()}, "tip")
    blob = sh_git(s.upstream.path, "rev-parse", "HEAD:zz-tip.txt")
    (s.upstream.path / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    before = s.snapshot()
    pack = s.src / ".git" / "objects" / "pack"
    for leftover in ("tmp_pack_killed", "tmp_idx_killed"):  # what a killed fetch leaves
        (pack / leftover).write_bytes(b"\0" * 4096)
    r = s.forge("rebase", "--onto", inner[:10], "--json")
    assert r.code == 1, r
    assert inner[:10] in r.json["error"], r
    assert sorted(p.name for p in (s.src / ".git" / "objects" / "pack").glob("tmp_*")) == []
    assert s.snapshot() == before
    assert not (s.root / ".dgr" / "rebase.json").exists()


# ----------------------------------------------------------------------------- issue 29


def test_dry_run_names_are_the_files_the_real_rebase_writes(series: Series) -> None:
    """A conflicting 0002 is skipped by the dry run's replay but kept by the real rebase
    once resolved: the dry run says 0003 stays 0003, as the real rebase then writes it."""
    s = series
    upstream_edit(
        s.upstream, "ggml/src/ggml.c", GGML_OLD, "    return 3; /* upstream */\n", "ggml: three"
    )
    new = s.upstream.commit({"docs/later.md": "later\n"}, "docs: later")

    dry = s.forge("rebase", "--onto", new, "--dry-run", "--json")
    assert dry.code == 3, dry
    rows = {r["file"][:4]: r for r in dry.json["patches"]}
    assert rows["0002"]["outcome"] == "conflict"
    would_be = [r["new_file"] for r in dry.json["patches"]]
    assert would_be[2].startswith("0003-"), would_be
    for name in would_be:
        assert name in dry.stderr  # the table's "would be" column

    real = s.forge("rebase", "--onto", new)
    assert real.code == 3, real
    (s.src / "ggml/src/ggml.c").write_text(
        (s.upstream.path / "ggml/src/ggml.c")
        .read_text()
        .replace("return 3; /* upstream */", "return 2; /* dgr: cpu + rpc */")
    )
    sh_git(s.src, "add", "ggml/src/ggml.c")
    done = s.forge("rebase", "--continue", "--json")
    assert done.code == 0, done
    written = sorted(p.name for p in s.patches_dir.glob("*.patch"))
    assert written == would_be
    assert [r["new_file"] for r in done.json["patches"]] == would_be


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("next", "1"),  # a number as text
        ("next", 99),  # past the last step
        ("phase", 7),
        ("patches", [{"file": "0001-x.patch"}]),  # a step without its subject and commit
        ("patches", "0001"),
        ("conflict", ["not", "an", "object"]),
        ("canary", "yes"),
        ("surprise", True),  # a key this forge never writes
    ],
)
def test_a_damaged_rebase_state_is_exit_2_naming_the_key_and_loses_nothing(
    series: Series, key: str, value: object
) -> None:
    """rebase.json is read as its type says, every field: a hand-edited or damaged one is
    exit 2 naming the file and the key (never a traceback later, in the middle of a
    replay), and the workspace, the state and the series are left as they were."""
    s = series
    conflicting_upstream(s)
    assert s.forge("rebase", "--onto", s.upstream.head).code == 3
    path = s.root / ".dgr" / "rebase.json"
    state = json.loads(path.read_text())
    state[key] = value
    path.write_text(json.dumps(state))
    damaged = path.read_bytes()
    before = s.snapshot()
    for cmd in (["rebase", "--continue"], ["rebase", "--abort"]):
        r = s.forge(*cmd)
        assert r.code == 2, (cmd, r)
        assert "unreadable rebase state" in r.stderr and str(path) in r.stderr, r
        assert key in r.stderr, r
        assert "Traceback" not in r.stderr, r
        assert "fix:" in r.stderr, r
    shown = s.forge("status")  # tells the state is there, never a traceback
    assert "Traceback" not in shown.stderr and "rebase.json" in shown.stdout + shown.stderr
    assert path.read_bytes() == damaged and s.snapshot() == before
