"""`bump`: the roller, on an upstream with a long first-parent history after the pin.

The history (built once per module): the series' pin, then 50 first-parent commits:
commit 10 takes patch 0002 upstream (it becomes empty: dropped), commit 30 rewrites the
lines patch 0001 changes (it conflicts from there on), the rest touch docs. The newest
clean commit is therefore commit 29, the first breaking one commit 30.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.git import make_upstream, sh_git
from support.rebase import GGML_NEW, GGML_OLD, LLAMA_OWNER_OLD, make_series, upstream_edit
from support.roots import Series

from dgr_forge.core.output import Reporter
from dgr_forge.upstream.rebase.bump import Break, max_replays, search

AFTER = 50
TAKEN_AT = 10  # 1-based: the upstream commit that takes patch 0002
BREAKS_AT = 30  # 1-based: the upstream commit that conflicts with patch 0001
MERGE_AT = 42  # 1-based: a merge commit


@dataclasses.dataclass
class History:
    series: Series
    after: list[str]  # the first-parent commits after the pin, oldest first


@pytest.fixture(scope="module")
def _history(tmp_path_factory: pytest.TempPathFactory) -> History:
    base = tmp_path_factory.mktemp("bump")
    up = make_upstream(base / "upstream")
    s = make_series(base, up)
    after: list[str] = []
    for i in range(1, AFTER + 1):
        if i == TAKEN_AT:
            after.append(
                upstream_edit(up, "ggml/src/ggml.c", GGML_OLD, GGML_NEW, "ggml: count rpc")
            )
        elif i == BREAKS_AT:
            new = "    return layer < 0 ? -1 : 0; /* upstream: validate */\n"
            after.append(
                upstream_edit(up, "src/llama.cpp", LLAMA_OWNER_OLD, new, "llama: validate layer")
            )
        elif i == MERGE_AT:
            # a long-lived branch forked before the pin, merged: the merge is a candidate,
            # the branch's own commits are not, and its history before the pin never comes
            sh_git(up.path, "checkout", "-q", "-b", "side", up.commits[1])
            side = up.commit({"docs/side.md": "side\n"}, "docs: side branch")
            sh_git(up.path, "checkout", "-q", "main")
            sh_git(up.path, "merge", "-q", "--no-ff", "-m", "merge side", side)
            after.append(sh_git(up.path, "rev-parse", "HEAD"))
        else:
            after.append(up.commit({f"docs/log-{i}.md": f"entry {i}\n"}, f"docs: log {i}"))
    sh_git(up.path, "branch", "release", after[20])
    return History(s, after)


@pytest.fixture
def h(_history: History, tmp_path: Path) -> History:
    """The forge root (and its workspace) copied for this test; the upstream is shared,
    and no test changes it."""
    root = tmp_path / "forge"
    shutil.copytree(_history.series.root, root, symlinks=True)
    return History(dataclasses.replace(_history.series, root=root), _history.after)


def everything(s: Series) -> dict[str, object]:
    """Manifest, patches/ and the workspace: what a dry run must leave byte-identical."""
    return {
        **s.snapshot(),
        "head": sh_git(s.src, "rev-parse", "HEAD"),
        "status": sh_git(s.src, "status", "--porcelain", "--ignored"),
        "refs": sh_git(s.src, "for-each-ref"),
        "objects": sorted(p.name for p in (s.src / ".git" / "objects").iterdir()),
        "shallow": (s.src / ".git" / "shallow").read_text(),
        "rebase": (s.root / ".dgr" / "rebase.json").exists(),
    }


def pinned(s: Series) -> str:
    return str(tomllib.loads(s.manifest.read_text())["upstream"]["commit"])


# ----------------------------------------------------------------------------- the CLI


def test_dry_run_names_newest_clean_and_first_breaking_and_touches_nothing(
    h: History, tmp_path: Path
) -> None:
    s, after = h.series, h.after
    before = everything(s)
    report = tmp_path / "bump.md"
    r = s.forge("bump", "--dry-run", "--json", "--report", str(report))
    assert r.code == 3, r
    d = r.json
    assert d["pin"] == s.pin and d["target"] == after[-1]
    assert d["newest_clean"] == after[BREAKS_AT - 2]
    fb = d["first_breaking"]
    assert fb["commit"] == after[BREAKS_AT - 1]
    assert fb["patch"].startswith("0001-") and fb["files"] == ["src/llama.cpp"]
    assert [c["commit"] for c in fb["upstream_commits"]] == [after[BREAKS_AT - 1]]
    assert d["candidates"] == AFTER
    assert d["replays"] <= math.ceil(math.log2(AFTER)) + 2 == d["max_replays"]
    assert d["moved"] is False and d["dry_run"] is True
    assert [x["file"][:4] for x in d["dropped"]] == ["0002"]
    assert [c["commit"] for c in d["dropped"][0]["upstream_commits"]] == [after[TAKEN_AT - 1]]
    # the report and the console say the same
    md = report.read_text()
    assert d["report_markdown"] == str(report)
    for needle in (after[BREAKS_AT - 2], after[BREAKS_AT - 1][:12], fb["patch"], "src/llama.cpp"):
        assert needle in md, needle
    assert after[TAKEN_AT - 1][:12] in md and "stopped short" in md
    assert f"first breaking: {after[BREAKS_AT - 1][:12]}" in r.stderr
    assert everything(s) == before
    assert not list((s.root / ".dgr" / "tmp").glob("dgr-*"))  # its scratch is gone


def test_bump_repins_at_the_newest_clean_commit_and_check_passes(h: History) -> None:
    s, after = h.series, h.after
    r = s.forge("bump", "--json")
    assert r.code == 3, r  # stopped short of the target: a patch breaks
    assert r.json["moved"] is True and r.json["status"] == "bumped"
    assert r.json["newest_clean"] == pinned(s) == after[BREAKS_AT - 2]
    assert r.json["replays"] <= max_replays(AFTER)
    assert r.json["first_breaking"]["commit"] == after[BREAKS_AT - 1]
    # exactly what `rebase --onto` does: 0002 upstreamed and dropped, the rest carried
    assert [p[:4] for p in s.patch_files()] == ["0001", "0002"]
    assert {p["file"][:4]: p["outcome"] for p in r.json["patches"]} == {
        "0001": "unchanged",
        "0002": "dropped",
        "0003": "unchanged",
    }
    assert Path(r.json["rebase_report_markdown"]).is_file()
    assert not (s.root / ".dgr" / "rebase.json").exists()
    assert s.forge("check").code == 0
    # one fetch of the range: the merged branch's history from before the pin stayed away
    assert (
        subprocess.run(
            ["git", "-C", str(s.src), "cat-file", "-e", s.upstream.commits[1]], capture_output=True
        ).returncode
        != 0
    )
    # the next night: nothing new is clean, the pin stays, exit 3 again
    again = s.forge("bump", "--json")
    assert again.code == 3 and again.json["moved"] is False, again
    assert again.json["first_breaking"]["commit"] == after[BREAKS_AT - 1]
    # no clean candidate: the bisection alone, no verifying replay
    assert again.json["replays"] <= max_replays(AFTER - BREAKS_AT + 1) - 1


@pytest.mark.parametrize("how", ["abbreviated", "branch"])
def test_to_a_clean_commit_reaches_it_with_two_replays(h: History, how: str) -> None:
    s, after = h.series, h.after
    to = {"abbreviated": after[20][:10], "branch": "release"}[how]
    before = everything(s)
    r = s.forge("bump", "--to", to, "--dry-run", "--json")
    assert r.code == 0, r
    assert r.json["target"] == r.json["newest_clean"] == after[20]
    assert r.json["first_breaking"] is None and r.json["replays"] == 2
    assert everything(s) == before


def test_bump_to_the_current_pin_is_exit_0_and_changes_nothing(h: History) -> None:
    s = h.series
    before = everything(s)
    for extra in ((), ("--dry-run",)):
        r = s.forge("bump", "--to", s.pin, "--json", *extra)
        assert r.code == 0, r
        assert r.json["status"] == "noop" and r.json["moved"] is False
        assert r.json["newest_clean"] == r.json["target"] == s.pin
        assert everything(s) == before


@pytest.mark.parametrize(
    ("to", "words"),
    [
        ("-x", "--to"),
        ("--upload-pack=touch pwned", "--to"),
        ("a\0b", "NUL"),
        ("a..b", "--to"),
        ("x" * 300, "--to"),
        ("no-such-ref", "no such ref"),
        ("0" * 40, "not available"),
    ],
)
def test_hostile_to_is_a_clear_error_and_changes_nothing(h: History, to: str, words: str) -> None:
    s = h.series
    before = everything(s)
    r = s.forge("bump", f"--to={to}", "--dry-run")
    assert r.code == 2 and words in r.stderr, r
    assert "Traceback" not in r.stderr
    assert everything(s) == before
    assert not (s.root / "pwned").exists()


def test_dry_run_without_a_workspace_creates_none_and_mirror_is_used(h: History) -> None:
    s, after = h.series, h.after
    shutil.rmtree(s.root / ".dgr")
    before = s.snapshot()
    text = s.manifest.read_text()
    # the manifest's URL is unreachable: everything comes from the mirror
    s.manifest.write_text(text.replace(s.upstream.url, "https://127.0.0.1:9/llama.cpp.git"))
    r = s.forge("bump", "--to", after[5], "--dry-run", "--mirror", str(s.upstream.path), "--json")
    assert r.code == 0, r
    assert r.json["newest_clean"] == after[5] and r.json["replays"] == 2
    s.manifest.write_text(text)
    assert s.snapshot() == before
    assert not (s.root / ".dgr" / "src").exists()


def test_report_inside_the_inputs_and_a_rebase_in_progress_are_refused(h: History) -> None:
    s, after = h.series, h.after
    before = everything(s)
    r = s.forge("bump", "--dry-run", "--report", str(s.patches_dir / "bump.md"))
    assert r.code == 2 and "--report" in r.stderr, r
    assert everything(s) == before
    assert s.forge("rebase", "--onto", after[BREAKS_AT - 1]).code == 3  # stops on 0001
    r = s.forge("bump", "--dry-run")
    assert r.code == 3 and "rebase" in r.stderr and "in progress" in r.stderr, r


def test_to_older_than_the_pin_is_refused(h: History) -> None:
    s = h.series
    older = s.upstream.commits[1]
    r = s.forge("bump", "--to", older, "--dry-run")
    assert r.code == 2 and "not a descendant of the pin" in r.stderr, r


# ----------------------------------------------------------------------------- the search


def _run(
    n: int,
    clean: Callable[[int], bool],
    real: Callable[[int], bool] | None = None,
    real_probes: bool = False,
) -> tuple[int, int | None, int]:
    def probe(i: int) -> Break | None:
        return None if clean(i) else Break(str(i), "p", [], [])

    def real_probe(i: int) -> Break | None:
        return None if (real or clean)(i) else Break(str(i), "p", [], [])

    def verify(i: int) -> tuple[Break | None, object]:
        return (None, "ok") if real_probe(i) is None else (real_probe(i), None)

    r = search(n, probe, verify, Reporter(quiet=True), real_probe if real_probes else None)
    return r.newest_clean, r.first_breaking, r.replays


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 9, 50, 300])
def test_bisection_is_exact_within_the_budget(n: int) -> None:
    for breaks in sorted({0, 1, n // 3, n // 2, n - 1, n}):  # first broken index (n: none)
        newest, first, replays = _run(n, lambda i, b=breaks: i < b)
        assert newest == breaks - 1
        assert first == (breaks if breaks < n else None)
        assert replays <= max_replays(n), (n, breaks, replays)


def test_a_contradicting_real_replay_narrows_the_search_again() -> None:
    # the dry-run probe says 0..29 clean; the real replay finds 20..29 broken too
    newest, first, _ = _run(50, lambda i: i < 30, real=lambda i: i < 20)
    assert (newest, first) == (19, 20)
    # with real replays as probes after the first contradiction: a bisection again
    newest, first, bisected = _run(300, lambda i: True, lambda i: i < 20, real_probes=True)
    assert (newest, first) == (19, 20) and bisected <= 2 * max_replays(300)
    assert _run(300, lambda i: True, lambda i: i < 20)[2] > 200  # without: one by one
    # clean again past a break (upstream later took the conflicting patch): the answer
    # is never past a known break
    newest, first, _ = _run(50, lambda i: i < 10 or i >= 40)
    assert newest == 49 and first is None
    # a clean island after a break that bisection never probes is not guessed at: the
    # answer is a clean commit right before a broken one
    assert _run(50, lambda i: i < 10 or 30 <= i < 45)[:2] == (9, 10)


def test_a_real_replay_that_contradicts_the_probes_narrows_and_never_lands_on_it(
    tmp_path: Path, upstream: Any
) -> None:
    """The workspace's own merge settings (a merge driver that always fails, for
    src/llama.cpp) make the real rebase conflict where the work-tree-free probes, which
    never read them, find every candidate clean: the rebase is undone each time and the
    search narrows below it, so the pin lands on the newest commit the real replay takes."""
    s = make_series(tmp_path, upstream)
    after = []
    for i in range(1, 9):
        if i == 3:  # touches the patched file far from the patch: needs a file-level merge
            text = (upstream.path / "src/llama.cpp").read_text()
            after.append(upstream.commit({"src/llama.cpp": text + "// upstream\n"}, "llama: note"))
        else:
            after.append(upstream.commit({f"docs/n{i}.md": f"{i}\n"}, f"docs: n{i}"))
    (s.src / ".git" / "info").mkdir(exist_ok=True)
    (s.src / ".git" / "info" / "attributes").write_text("src/llama.cpp merge=refuse\n")
    sh_git(s.src, "config", "merge.refuse.driver", "false")
    r = s.forge("bump", "--json")
    assert r.code == 3, r
    assert r.json["newest_clean"] == pinned(s) == after[1]
    assert r.json["first_breaking"]["commit"] == after[2]
    assert r.json["first_breaking"]["files"] == ["src/llama.cpp"]
    assert "narrowing the search below it with real replays" in r.stderr
    # after the contradiction, a bisection with real replays: not a walk down one by one
    assert r.json["replays"] <= 2 + max_replays(len(after))
    assert not (s.root / ".dgr" / "rebase.json").exists()


def test_a_killed_replay_that_must_change_nothing_is_never_continued(h: History) -> None:
    """bump's real probes replay in the workspace and undo it (`canary`); one killed in
    the middle leaves its state: `rebase --continue` refuses it (it would finish a series
    with the conflicting patch left out), `--abort` restores everything."""
    from dgr_forge.core.forge import Forge
    from dgr_forge.upstream import manifest
    from dgr_forge.upstream.rebase import Onto, start

    s, after = h.series, h.after
    before = s.snapshot()
    forge = Forge.locate(s.root, None)
    m = manifest.load(forge.upstream_manifest, forge.root)
    start(forge, Reporter(quiet=True), m, Onto(rev=after[BREAKS_AT - 1]), canary=True)
    r = s.forge("rebase", "--continue")
    assert r.code == 3 and "dry run" in r.stderr, r
    assert s.forge("rebase", "--abort").code == 0
    assert s.snapshot() == before and pinned(s) == s.pin
