"""Rebase and bump fetch only what they need (issue 29): across N upstream commits a
shallow workspace gets the commits between the two pins, never the history before the old
pin (the workspace used to deepen by 64, then 1,024 commits). The upstream has hundreds of
commits before the pin (git fast-import) and is served over file:// (protocol v2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.git import Upstream, sh_git
from support.history import add_history, before, between, pack_log, range_objects, workspace_commits
from support.rebase import GGML_OLD, make_series, upstream_edit
from support.roots import Series

HISTORY = 300  # commits before the pin
RANGE = 25  # commits between the old and the new pin


@pytest.fixture
def series(tmp_path: Path, upstream: Upstream) -> Series:
    add_history(upstream, HISTORY)
    return make_series(tmp_path, upstream)


def _move_upstream(s: Series, conflict: bool) -> tuple[str, str]:
    """RANGE commits after the pin; with `conflict`, the 10th rewrites patch 2's lines."""
    add_history(s.upstream, 9, "docs/changes.md")
    culprit = ""
    if conflict:
        culprit = upstream_edit(
            s.upstream, "ggml/src/ggml.c", GGML_OLD, "    return 3; /* upstream */\n", "ggml: 3"
        )
    else:
        s.upstream.commit({"docs/unrelated.md": "x\n"}, "docs: unrelated")
    add_history(s.upstream, RANGE - 10, "docs/changes.md")
    return s.upstream.head, culprit


def _assert_fetched_only_the_range(s: Series, new: str) -> None:
    have = workspace_commits(s.src)
    old = s.pin
    assert not have & before(s.upstream, old), (
        f"{len(have & before(s.upstream, old))} commits from before the old pin were fetched"
    )
    assert between(s.upstream, old, new) <= have  # the range, walkable for the report


def test_conflicting_rebase_fetches_only_the_range(series: Series) -> None:
    s = series
    assert (s.src / ".git" / "shallow").exists()  # fetch made a depth-1 workspace
    assert len(before(s.upstream, s.pin)) >= HISTORY
    new, culprit = _move_upstream(s, conflict=True)
    r = s.forge("rebase", "--onto", new, "--json")
    assert r.code == 3, r
    # the report still names the upstream commit that touched the conflicted file
    assert [c["commit"] for c in r.json["upstream_commits"]["ggml/src/ggml.c"]] == [culprit]
    _assert_fetched_only_the_range(s, new)


def _old_dated_commit(s: Series) -> None:
    """A commit dated long before the pin (a rebased pull request): a date cut misses it."""
    when = "2001-01-01T00:00:00Z"
    env = {"GIT_COMMITTER_DATE": when, "GIT_AUTHOR_DATE": when}
    sh_git(s.upstream.path, "commit", "-q", "--allow-empty", "-m", "old-dated", env=env)
    s.upstream.commits.append(sh_git(s.upstream.path, "rev-parse", "HEAD"))


def _assert_sent_only_the_range(s: Series, new: str, sent: int, slack: int = 0) -> None:
    """The scratch workspace of a dry run is gone afterwards: count what the server sent.
    The range's own objects, plus at most the new pin's tree once (a depth-1 want of it
    is sent whole), plus `slack`; the history before the pin adds 4 objects a commit."""
    need = range_objects(s.upstream, s.pin, new)
    tree = len(sh_git(s.upstream.path, "ls-tree", "-r", "-t", new).splitlines())
    assert need <= sent <= need + tree + 1 + slack, (sent, need, tree)


def test_dry_run_fetches_only_the_range(tmp_path: Path, series: Series) -> None:
    s = series
    new, culprit = _move_upstream(s, conflict=True)
    log = pack_log(tmp_path / "server")
    r = s.forge("rebase", "--onto", new, "--dry-run", "--json", env=log.env)
    assert r.code == 3, r
    conflict = next(p for p in r.json["patches"] if p["outcome"] == "conflict")
    assert [c["commit"] for c in conflict["upstream_commits"]] == [culprit]
    _assert_sent_only_the_range(s, new, log.objects)


@pytest.mark.parametrize("dated_before_pin", [False, True])
def test_bump_fetches_only_the_range(
    tmp_path: Path, series: Series, dated_before_pin: bool
) -> None:
    s = series
    if dated_before_pin:
        _old_dated_commit(s)
    new, _ = _move_upstream(s, conflict=True)
    log = pack_log(tmp_path / "server")
    r = s.forge("bump", "--to", new, "--dry-run", "--json", env=log.env)
    assert r.code == 3, r
    # reached by depth sized from the range: at most as many commits before the pin again
    _assert_sent_only_the_range(s, new, log.objects, 4 * (RANGE + 2) if dated_before_pin else 0)


def test_a_range_commit_dated_before_the_pin_is_still_reached(series: Series) -> None:
    """A date cut alone misses a commit whose date is older than the pin's (a rebased
    pull request): the range is then reached by depth from the new pin, sized from it."""
    s = series
    sh_git(
        s.upstream.path,
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "old-dated",
        env={
            "GIT_COMMITTER_DATE": "2001-01-01T00:00:00Z",
            "GIT_AUTHOR_DATE": "2001-01-01T00:00:00Z",
        },
    )
    s.upstream.commits.append(sh_git(s.upstream.path, "rev-parse", "HEAD"))
    new, culprit = _move_upstream(s, conflict=True)
    r = s.forge("rebase", "--onto", new, "--json")
    assert r.code == 3, r
    assert [c["commit"] for c in r.json["upstream_commits"]["ggml/src/ggml.c"]] == [culprit]
    have = workspace_commits(s.src)
    assert between(s.upstream, s.pin, new) <= have
    # sized from the range: at most as many commits before the pin as the range holds
    assert len(have & before(s.upstream, s.pin)) <= RANGE + 1


# ----------------------------------------------------------------------------- diagnosis


def _broken_new_pin(s: Series) -> tuple[str, str]:
    """A new pin whose one new blob the server has lost (a partial mirror)."""
    new = s.upstream.commit({"models/ggml-vocab-x.gguf": "vocab " * 400}, "models: vocab")
    blob = sh_git(s.upstream.path, "rev-parse", f"{new}:models/ggml-vocab-x.gguf")
    (s.upstream.path / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    return new, blob


@pytest.mark.parametrize(
    "command", [("rebase", "--onto"), ("rebase", "--dry-run", "--onto"), ("bump", "--to")]
)
def test_a_server_abort_is_named_with_its_own_words(
    series: Series, command: tuple[str, ...]
) -> None:
    s = series
    new, blob = _broken_new_pin(s)
    before = s.snapshot()
    r = s.forge(*command, new)
    assert r.code == 1, r
    assert "refused" not in r.stderr and "not available" not in r.stderr, r.stderr
    assert "the server aborted the transfer" in r.stderr and f"unable to read {blob}" in r.stderr
    assert "git fsck" in r.stderr and "network access" not in r.stderr
    assert s.snapshot() == before  # nothing lost: manifest and patches as they were


def test_rebase_calls_keep_the_transport_policy(tmp_path: Path, series: Series) -> None:
    """A remote URL that the user's git config rewrites onto a local repository is not
    read: rebase's ls-remote and fetches run under `fetch`'s transport policy."""
    s = series
    new = s.upstream.commit({"docs/later.md": "later\n"}, "docs: later")
    config = tmp_path / "gitconfig"
    config.write_text(f'[url "{s.upstream.url}"]\n\tinsteadOf = https://up.invalid/llama\n')
    before = s.snapshot()
    for rev in (new, "main"):  # a commit id (fetched), a branch (listed first)
        r = s.forge(
            "rebase", "--onto", rev, "--url", "https://up.invalid/llama",
            env={"GIT_CONFIG_GLOBAL": str(config)},
        )  # fmt: skip
        assert r.code == 1, r
        assert "transport 'file' not allowed" in r.stderr, r.stderr
        assert "the server" not in r.stderr and "--mirror" in r.stderr  # no server was asked
    assert s.snapshot() == before
    assert s.upstream.commits[-1] not in workspace_commits(s.src)
