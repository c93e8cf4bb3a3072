"""No-op commands are cheap: count every git process with a shim on PATH.

The shim is a real executable named `git` that appends one line per invocation to a file
and then execs the real git, so nothing about git's behaviour changes.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from support.cli import run_forge
from support.git import Upstream, sh_git
from support.patches import make_series


def _shim(tmp_path: Path) -> tuple[dict[str, str], Path]:
    real = shutil.which("git")
    assert real is not None
    bindir = tmp_path / "shim-bin"
    bindir.mkdir()
    log = tmp_path / "git-calls.log"
    shim = bindir / "git"
    shim.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\nexec "{real}" "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}, log


def _one_file_patches(forge_root: Path, upstream: Upstream, prefix: str, n: int) -> dict[str, str]:
    """n files of 20 lines at a new pin (PREFIX00.md ...), a patch each on its line 10,
    applied; the files as pinned."""
    text = "".join(f"line {k}\n" for k in range(1, 21))
    files = {f"{prefix}{i:02d}.md": text for i in range(n)}
    pin = upstream.commit(dict(files), f"docs: {n} files")
    edits: list[tuple[dict[str, str | None], str]] = [
        ({name: body.replace("line 10\n", "line 10 (dgr)\n")}, f"docs: patch {name}")
        for name, body in files.items()
    ]
    make_series(forge_root, upstream, edits, pin=pin)
    assert run_forge("patch", cwd=forge_root).code == 0
    return files


def _count(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_no_op_status_and_patch_run_git_few_times(
    tmp_path: Path, upstream: Upstream, forge_root: Path
) -> None:
    make_series(forge_root, upstream)
    assert run_forge("patch", cwd=forge_root).code == 0
    # the first fetch records the upstream's build number in the manifest (issue 29), once
    assert run_forge("fetch", cwd=forge_root).code == 0
    env, log = _shim(tmp_path)

    res = run_forge("status", cwd=forge_root, env=env)
    assert res.code == 0 and "applied" in res.stdout, res
    calls = _count(log)
    assert 1 <= len(calls) <= 5, calls

    log.unlink()
    res = run_forge("patch", cwd=forge_root, env=env)
    assert res.code == 0 and "nothing to do" in res.stdout, res
    calls = _count(log)
    assert 1 <= len(calls) <= 3, calls

    log.unlink()
    res = run_forge("fetch", cwd=forge_root, env=env)
    assert res.code == 0 and "nothing to do" in res.stdout, res
    assert len(_count(log)) <= 2, _count(log)


def _tree_cache(root: Path) -> Path:
    return root / ".dgr" / "src" / "llama.cpp" / ".git" / "dgr" / "trees.json"


def test_no_op_status_on_a_long_series_without_trees_asks_git_a_fixed_number_of_times(
    tmp_path: Path, upstream: Upstream, forge_root: Path
) -> None:
    # 60 patches, the manifest records no per-patch trees: they are computed once (by the
    # patch that applies them) and cached in the workspace, keyed by pin and patch bytes
    edits: list[tuple[dict[str, str | None], str]] = [
        ({f"docs/long-{i:02d}.md": f"line {i}\n"}, f"docs: long {i}") for i in range(60)
    ]
    series = make_series(forge_root, upstream, edits, with_trees=False)
    assert (
        "tree"
        not in (forge_root / "manifests" / "llama.cpp.toml")
        .read_text()
        .split("[patches]")[1]
        .split("[patches.result]")[0]
    )
    assert run_forge("patch", cwd=forge_root).code == 0
    env, log = _shim(tmp_path)

    res = run_forge("--json", "status", cwd=forge_root, env=env)
    assert res.code == 0 and res.json["patches"]["applied"] is True, res
    assert {p["state"] for p in res.json["patches"]["series"]} == {"applied"}
    assert 1 <= len(_count(log)) <= 5, _count(log)

    log.unlink()
    res = run_forge("patch", cwd=forge_root, env=env)
    assert res.code == 0 and "nothing to do" in res.stdout, res
    assert 1 <= len(_count(log)) <= 5, _count(log)

    # no cache (a workspace patched by an older forge): the first status computes the trees
    # once, the next one is a no-op again
    _tree_cache(forge_root).unlink()
    log.unlink()
    res = run_forge("--json", "status", cwd=forge_root, env=env)
    assert res.code == 0 and res.json["patches"]["applied"] is True, res
    assert len(_count(log)) > 60, len(_count(log))
    log.unlink()
    res = run_forge("--json", "status", cwd=forge_root, env=env)
    assert res.code == 0 and res.json["patches"]["applied"] is True, res
    assert 1 <= len(_count(log)) <= 5, _count(log)

    # a changed patch byte misses the cache: that patch is named, never a stale "applied"
    last = (
        series.root
        / "patches"
        / "llama.cpp"
        / sorted(p.name for p in (series.root / "patches" / "llama.cpp").glob("*.patch"))[-1]
    )
    last.write_bytes(last.read_bytes().replace(b"line 59", b"line 5x"))
    res = run_forge("--json", "status", cwd=forge_root)
    assert res.code == 0, res
    states = [p["state"] for p in res.json["patches"]["series"]]
    assert states[:59] == ["applied"] * 59 and states[59] == "changed on disk", states
    assert res.json["patches"]["applied"] is False


def test_a_hostile_tree_cache_is_recomputed_never_trusted_blindly(
    tmp_path: Path, upstream: Upstream, forge_root: Path
) -> None:
    make_series(forge_root, upstream, with_trees=False)
    assert run_forge("patch", cwd=forge_root).code == 0
    cache = _tree_cache(forge_root)
    good = cache.read_text()
    # the right trees, but a file no series needs (17 MiB): not read, recomputed
    huge = good.rstrip()[:-1] + ', "pad": "' + "x" * (17 << 20) + '"}'
    hostile = ("not json", '{"schema": 1, "trees": []}', '{"schema": 1, "trees": {"x": 1}}', huge)
    for bad in hostile:
        cache.write_text(bad)
        res = run_forge("--json", "status", cwd=forge_root)
        assert res.code == 0 and res.json["patches"]["applied"] is True, (bad[:40], res)
        assert cache.read_text() == good  # recomputed and written back
    # a wrong tree under the right key: the workspace does not match it, so status asks
    # git again (the series is still applied) and the cache is corrected
    key = next(iter(json.loads(good)["trees"]))
    cache.write_text(json.dumps({"schema": 1, "trees": {key: "0" * 40}}))
    res = run_forge("--json", "status", cwd=forge_root)
    assert res.code == 0 and res.json["patches"]["applied"] is True, res
    assert cache.read_text() == good
    # a no-op patch with a wrong cached tree is not a no-op: it re-checks and stays correct
    cache.write_text(json.dumps({"schema": 1, "trees": {key: "0" * 40}}))
    res = run_forge("patch", cwd=forge_root)
    assert res.code == 0, res
    assert run_forge("--json", "status", cwd=forge_root).json["patches"]["applied"] is True


def test_a_rebase_asks_git_a_fixed_number_of_times_whatever_the_series_length(
    tmp_path: Path, upstream: Upstream, forge_root: Path
) -> None:
    # 16 patches, one file each; upstream then moves the lines of every other patched file
    # (the shape of bench.rebase): the replay, the export and its round trip are batched,
    # so the count does not grow with the series (it was five git processes a patch)
    files = _one_file_patches(forge_root, upstream, "docs/r-", 16)
    assert run_forge("export", cwd=forge_root).code == 0  # the canonical bytes, as in use
    new = upstream.commit(
        {name: "moved\n\n" + body for name, body in list(files.items())[::2]}, "docs: headers"
    )
    env, log = _shim(tmp_path)
    res = run_forge("--json", "rebase", "--onto", new, cwd=forge_root, env=env)
    assert res.code == 0, res
    outcomes = [p["outcome"] for p in res.json["patches"]]
    assert outcomes == ["refreshed", "unchanged"] * 8, outcomes
    calls = _count(log)
    # 4 of them count the new pin's build number (in the local server), once per rebase
    assert len(calls) <= 31, "\n".join(calls)
    # the replay was the batch's: one merge and one fast-import for the whole series
    commands = [_subcommand(c) for c in calls]
    assert commands.count("fetch") == 1, commands  # the new pin with the range after the old
    assert commands.count("merge-tree") == 1 and commands.count("fast-import") == 1, commands
    assert commands.count("apply") == 1, commands  # the round trip: one run
    assert run_forge("check", cwd=forge_root).code == 0


def test_a_rebase_to_a_conflict_and_its_continue_ask_git_a_fixed_number_of_times(
    tmp_path: Path, upstream: Upstream, forge_root: Path
) -> None:
    """Upstream conflicts with patch 9 of 16: the start fetches the new pin and the range
    after the old one in one transfer (what explains the conflict), replays patches 1-8
    from the one merge for many and stops after that patch's own merge; `--continue`
    writes the resolution with the writer the rest of the replay uses (no cat-file, no
    commit-tree of its own), the rest is one merge again, and the build number the start
    counted is not counted again (issue 46)."""
    files = _one_file_patches(forge_root, upstream, "docs/r-", 16)
    assert run_forge("export", cwd=forge_root).code == 0
    moved = {name: "moved\n\n" + body for name, body in list(files.items())[::2]}
    moved["docs/r-08.md"] = moved["docs/r-08.md"].replace("line 10\n", "line 10 (up)\n")
    new = upstream.commit(moved, "docs: headers")
    env, log = _shim(tmp_path)
    res = run_forge("--json", "rebase", "--onto", new, cwd=forge_root, env=env)
    assert res.code == 3, res
    commands = [_subcommand(c) for c in _count(log)]
    assert commands.count("fetch") == 1, commands
    assert commands.count("merge-tree") == 2, commands  # the one for many, patch 9's own
    assert commands.count("fast-import") == 1, commands  # patches 1-8
    # 4 of them count the new pin's build number (beside the replay), kept for the finish
    assert len(commands) <= 31, commands

    src = forge_root / ".dgr" / "src" / "llama.cpp"
    conflicted = src / "docs" / "r-08.md"
    conflicted.write_text(moved["docs/r-08.md"].replace("line 10 (up)\n", "line 10 (both)\n"))
    sh_git(src, "add", "docs/r-08.md")
    log.unlink()
    res = run_forge("--json", "rebase", "--continue", cwd=forge_root, env=env)
    assert res.code == 0, res
    outcomes = [p["outcome"] for p in res.json["patches"]]
    assert outcomes[8] == "resolved" and outcomes.count("refreshed") == 7, outcomes
    commands = [_subcommand(c) for c in _count(log)]
    assert "commit-tree" not in commands and "cat-file" in commands, commands
    assert commands.count("cat-file") == 1, commands  # the commit objects, once
    assert commands.count("merge-tree") == 1, commands
    assert not [c for c in _count(log) if "rev-list --count" in c], _count(log)  # not again
    assert len(commands) <= 22, commands
    assert run_forge("check", cwd=forge_root).code == 0


def _subcommand(line: str) -> str:
    """The git command of a logged call ("-c key=value" settings skipped)."""
    words = iter(line.split())
    for word in words:
        if word == "-c":
            next(words, None)
            continue
        return word
    return ""


def test_patching_a_fetched_workspace_asks_git_a_fixed_number_of_times(
    tmp_path: Path, upstream: Upstream, forge_root: Path
) -> None:
    """A fetched, unpatched workspace (HEAD at the pin) is measured with one status (the
    ignored files `status` shows come from it too) and one walk (no second walk, no look-up
    of the pin ref: no other base can lie above HEAD), and `patch` takes HEAD from that
    measurement and the new tree from am's chain."""
    make_series(forge_root, upstream)
    assert run_forge("fetch", cwd=forge_root).code == 0
    env, log = _shim(tmp_path)
    for command, walks in (("status", 1), ("patch", 2)):  # patch: and am's new chain
        log.unlink(missing_ok=True)
        res = run_forge(command, cwd=forge_root, env=env)
        assert res.code == 0, res
        calls = [c.split("protocol.fd.allow=never ")[-1] for c in _count(log)]
        assert len([c for c in calls if c.startswith("log --first-parent")]) == walks, calls
        # one walk of the work tree: its changes and its ignored files together
        assert len([c for c in calls if c.startswith("status")]) == 1, calls
        assert not [c for c in calls if "refs/dgr/pin" in c or "HEAD^{commit}" in c], calls
    # am, then the chain it made: no rev-parse of the new HEAD's tree after it
    assert calls[-1].startswith("log --first-parent"), calls
    assert [c.split()[0] for c in calls].count("am") == 1, calls


def test_a_commit_and_its_tree_are_one_call_and_a_hostile_name_is_no_commit(
    upstream: Upstream,
) -> None:
    from dgr_forge.core import gitutil

    tree = upstream.tree(upstream.head)
    assert gitutil.commit_and_tree(upstream.path, upstream.head) == (upstream.head, tree)
    for hostile in ("--help", f"{upstream.head}\n{upstream.head}", "..", "0" * 40, tree, "a\0b"):
        assert gitutil.commit_and_tree(upstream.path, hostile) is None, hostile


def test_a_fresh_fetch_is_the_raw_fetch_and_a_parallel_checkout(
    tmp_path: Path, upstream: Upstream, forge_root: Path
) -> None:
    """A first fetch runs git as often as the raw `git init` + `git fetch --depth 1 <sha>`
    + `git checkout` do, beside one check of the pin and its tree and the pin's ref: no
    status of the empty repository it just made, nothing counted, no second transfer; and
    the checkout writes with parallel workers (issue 46: the checkout is most of a fetch's
    time after the transfer). (A root's first fetch also counts the upstream's build
    number, once: not here.)"""
    assert run_forge("fetch", cwd=forge_root).code == 0
    shutil.rmtree(forge_root / ".dgr" / "src")
    env, log = _shim(tmp_path)
    res = run_forge("fetch", cwd=forge_root, env=env)
    assert res.code == 0, res
    calls = _count(log)
    commands = [_subcommand(c) for c in calls]
    assert commands.count("fetch") == 1 and len(calls) <= 5, "\n".join(calls)
    checkout = [c for c in calls if _subcommand(c) == "checkout"]
    assert len(checkout) == 1 and "checkout.workers=0" in checkout[0], calls


@pytest.mark.parametrize("kept", ["0" * 40 + " 7\n", "garbage", "", "{new} -1\n", "{new} 99 x\n"])
def test_a_kept_build_number_of_another_pin_or_unreadable_is_counted_again(
    upstream: Upstream, forge_root: Path, kept: str
) -> None:
    """What the start keeps in the rebase journal is taken only as "<the new pin> <digits>"."""
    text = "".join(f"line {n}\n" for n in range(1, 21))
    pin = upstream.commit({"docs/a.md": text, "docs/b.md": text}, "docs: two files")
    edits: list[tuple[dict[str, str | None], str]] = [
        ({"docs/a.md": text.replace("line 3\n", "line 3 (dgr)\n")}, "docs: a"),
        ({"docs/b.md": text.replace("line 3\n", "line 3 (dgr)\n")}, "docs: b"),
    ]
    make_series(forge_root, upstream, edits, pin=pin)
    assert run_forge("patch", cwd=forge_root).code == 0
    new = upstream.commit({"docs/a.md": text.replace("line 3\n", "line 3 (up)\n")}, "docs: up")
    assert run_forge("rebase", "--onto", new, cwd=forge_root).code == 3
    cache = forge_root / ".dgr" / "rebase" / "build-number"
    assert cache.read_text() == f"{new} {len(upstream.commits)}\n" and len(upstream.commits) != 7
    cache.write_text(kept.replace("{new}", new))
    src = forge_root / ".dgr" / "src" / "llama.cpp"
    (src / "docs" / "a.md").write_text(text.replace("line 3\n", "line 3 (both)\n"))
    sh_git(src, "add", "docs/a.md")
    assert run_forge("rebase", "--continue", cwd=forge_root).code == 0
    manifest = (forge_root / "manifests" / "llama.cpp.toml").read_text()
    assert f"build_number = {len(upstream.commits)}\n" in manifest, manifest


# hostile workspace caches (`.git/dgr/`): each is a miss, computed again; never a hang on
# a FIFO or a device, never a traceback
_BAD_CACHES = [
    ("fifo", lambda p: os.mkfifo(p)),
    ("link to /dev/zero", lambda p: p.symlink_to("/dev/zero")),
    ("directory", lambda p: p.mkdir()),
    ("not json", lambda p: p.write_bytes(b"\0not json")),
    ("another schema", lambda p: p.write_text('{"schema": 2, "trees": {}, "commits": {}}')),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["trees.json", "canonical.json"])
@pytest.mark.parametrize(("what", "make"), _BAD_CACHES, ids=[w for w, _ in _BAD_CACHES])
def test_a_hostile_workspace_cache_is_a_miss(
    upstream: Upstream, forge_root: Path, name: str, what: str, make: Callable[[Path], object]
) -> None:
    make_series(forge_root, upstream)
    assert run_forge("patch", cwd=forge_root).code == 0
    cache = _tree_cache(forge_root).parent / name
    cache.parent.mkdir(exist_ok=True)
    if cache.exists() or cache.is_symlink():
        cache.unlink()
    make(cache)
    res = run_forge("--json", "status", cwd=forge_root)
    assert res.code == 0 and res.json["patches"]["applied"] is True, (what, res)
    res = run_forge("export", cwd=forge_root)
    assert res.code == 0 and "Traceback" not in res.stderr, (what, res)
    res = run_forge("--json", "status", cwd=forge_root)  # HEAD is the series' own commits
    assert res.code == 0 and res.json["patches"]["applied"] is True, (what, res)


def test_a_bump_dry_run_asks_whether_the_range_arrived_once(
    tmp_path: Path, upstream: Upstream, forge_root: Path
) -> None:
    """The shallow workspace lacks old..new: the range is fetched, then one `merge-base
    OLD NEW` says it is walkable (not one to decide and another to answer)."""
    edits: list[tuple[dict[str, str | None], str]] = [
        ({"docs/bump.md": "ours\n"}, "docs: a note of ours")
    ]
    make_series(forge_root, upstream, edits)
    assert run_forge("patch", cwd=forge_root).code == 0
    old = json.loads(run_forge("--json", "status", cwd=forge_root).stdout)["upstream"]["commit"]
    for n in range(3):
        upstream.commit({f"docs/later-{n}.md": f"later {n}\n"}, f"docs: later {n}")
    env, log = _shim(tmp_path)
    res = run_forge("--json", "bump", "--dry-run", "--to", upstream.head, cwd=forge_root, env=env)
    assert res.code == 0, res
    asked = [c for c in _count(log) if _subcommand(c) == "merge-base" and old in c]
    ranged = [c for c in asked if c.split()[-1] == upstream.head and "--is-ancestor" not in c]
    assert len(ranged) == 1, [c.split("merge-base")[-1] for c in asked]


def test_a_continue_that_stops_at_the_next_patch_merges_it_once_and_no_tree_diff_more(
    tmp_path: Path, upstream: Upstream, forge_root: Path
) -> None:
    """Patches 2 and 3 of 4 both conflict: after 2's resolution, the one merge for 3..4
    conflicts in 3's own file, so nothing can be batched: it stops there, without the diff
    of that merge's tree (only 3's own merge and its cherry-pick follow)."""
    files = _one_file_patches(forge_root, upstream, "docs/c-", 4)
    text = files["docs/c-00.md"]
    moved = {f"docs/c-{i:02d}.md": text.replace("line 10\n", "line 10 (up)\n") for i in (1, 2)}
    new = upstream.commit(moved, "docs: upstream's line 10")
    assert run_forge("rebase", "--onto", new, cwd=forge_root).code == 3
    src = forge_root / ".dgr" / "src" / "llama.cpp"
    (src / "docs" / "c-01.md").write_text(text.replace("line 10\n", "line 10 (both)\n"))
    sh_git(src, "add", "docs/c-01.md")
    env, log = _shim(tmp_path)
    res = run_forge("--json", "rebase", "--continue", cwd=forge_root, env=env)
    assert res.code == 3 and "docs/c-02.md" in res.stderr, res
    commands = [_subcommand(c) for c in _count(log)]
    assert commands.count("merge-tree") == 2, commands  # the one for 3..4, then 3's own
    assert commands.count("diff-tree") == 1, commands  # what 3 and 4 change, once
    assert commands.count("cherry-pick") == 1, commands


def test_a_conflict_in_two_files_lists_the_upstream_range_once(
    tmp_path: Path, upstream: Upstream, forge_root: Path
) -> None:
    """One patch conflicts in two files: the upstream commits of old..new are listed once
    for the explanation, not once per file."""
    text = "".join(f"line {k}\n" for k in range(1, 21))
    files = {"docs/a.md": text, "docs/b.md": text}
    pin = upstream.commit(dict(files), "docs: two files")
    ours = {name: text.replace("line 10\n", "line 10 (dgr)\n") for name in files}
    make_series(forge_root, upstream, [(dict(ours), "docs: both files")], pin=pin)
    assert run_forge("patch", cwd=forge_root).code == 0
    theirs = {name: text.replace("line 10\n", "line 10 (up)\n") for name in files}
    new = upstream.commit(dict(theirs), "docs: upstream's line 10")
    env, log = _shim(tmp_path)
    res = run_forge("--json", "rebase", "--onto", new, cwd=forge_root, env=env)
    assert res.code == 3, res
    details = res.json
    assert details["files"] == ["docs/a.md", "docs/b.md"], details
    assert [c["commit"] for c in details["upstream_commits"]["docs/a.md"]] == [new], details
    assert [c["commit"] for c in details["upstream_commits"]["docs/b.md"]] == [new], details
    listed = [c for c in _count(log) if _subcommand(c) == "rev-list" and "--count" not in c]
    assert len(listed) == 1, listed
