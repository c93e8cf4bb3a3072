"""The upstream's build number, counted with the least transfer the server allows (issue 29,
h7 finding 1): a full local repository is counted where it is (no fetch at all); a local
server that is not (partial) but allows filters sends its commits only; a shallow one is
refused before any fetch (git 2.39 loops on a filtered fetch from it)."""

from __future__ import annotations

import json
import re
import stat
import types
from pathlib import Path

import pytest
from support.build import make_patched_root
from support.cli import run_forge
from support.git import Upstream, sh_git
from support.llamalike import make_llamalike_upstream

from dgr_forge.upstream import build_number, series_journal

HISTORY = 300


@pytest.fixture(scope="module")
def long_upstream(tmp_path_factory: pytest.TempPathFactory) -> Upstream:
    return make_llamalike_upstream(tmp_path_factory.mktemp("bn") / "upstream", history=HISTORY)


def _count(up: Upstream) -> int:
    return int(sh_git(up.path, "rev-list", "--count", up.head))


def _git_commands(trace: Path) -> list[list[str]]:
    """Every git command that ran (GIT_TRACE2_EVENT), as its argv."""
    if not trace.exists():
        return []
    events = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
    return [e["argv"] for e in events if e.get("event") == "start"]


def _partial_server(tmp_path: Path, up: Upstream) -> Path:
    """A blob-less clone of `up` that, as `up`, allows filters (as GitHub does)."""
    sh_git(up.path, "config", "uploadpack.allowFilter", "true")
    server = tmp_path / "partial.git"
    sh_git(
        tmp_path, "clone", "-q", "--bare", "--no-local", "--filter=blob:none", up.url, str(server)
    )
    sh_git(server, "config", "uploadpack.allowFilter", "true")
    return server


@pytest.mark.parametrize("form", ["file-url", "path"])
def test_a_full_local_upstream_is_counted_in_place_with_no_transfer(
    tmp_path: Path, long_upstream: Upstream, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    trace = tmp_path / "trace2.json"
    monkeypatch.setenv("GIT_TRACE2_EVENT", str(trace))
    url = long_upstream.url if form == "file-url" else str(long_upstream.path)
    number, how = build_number.count(tmp_path / "ws", url, long_upstream.head, tmp_path / "tmp")
    assert number == _count(long_upstream) and number > HISTORY, how
    assert "no transfer" in how, how
    ran = _git_commands(trace)
    assert ran, "GIT_TRACE2_EVENT recorded nothing"
    assert not [a for a in ran if {"fetch", "upload-pack", "pack-objects"} & set(a)], ran
    assert not (tmp_path / "tmp").exists() or not list((tmp_path / "tmp").iterdir())


def test_a_partial_local_server_that_allows_filters_sends_its_commits_only(
    tmp_path: Path, long_upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not counted in place (a partial clone may lack history), so fetched: with
    uploadpack.allowFilter the server sends commits only, no tree, no blob."""
    server = _partial_server(tmp_path, long_upstream)
    kept: list[Path] = []
    # the scratch repository the count fetched into, kept to count what arrived
    monkeypatch.setattr(
        series_journal, "shutil", types.SimpleNamespace(rmtree=lambda p, **_: kept.append(p))
    )
    number, how = build_number.count(
        tmp_path / "ws", server.as_uri(), long_upstream.head, tmp_path / "tmp"
    )
    assert number == _count(long_upstream), how
    assert len(kept) == 1
    assert stat.S_IMODE(kept[0].stat().st_mode) == 0o700  # another user never reads it
    stats = dict(line.split(": ") for line in sh_git(kept[0], "count-objects", "-v").splitlines())
    # commits only: one object per commit (a whole fetch: their trees and blobs too)
    assert int(stats["in-pack"]) == number, stats


def test_a_shallow_local_server_is_refused_before_any_fetch(
    tmp_path: Path, long_upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    sh_git(long_upstream.path, "config", "uploadpack.allowFilter", "true")
    server = tmp_path / "shallow.git"
    sh_git(tmp_path, "clone", "-q", "--bare", "--depth", "5", long_upstream.url, str(server))
    sh_git(server, "config", "uploadpack.allowFilter", "true")
    trace = tmp_path / "trace2.json"
    monkeypatch.setenv("GIT_TRACE2_EVENT", str(trace))
    number, how = build_number.count(
        tmp_path / "ws", server.as_uri(), long_upstream.head, tmp_path / "tmp"
    )
    assert number is None and "shallow" in how, how
    assert not [a for a in _git_commands(trace) if "fetch" in a]


@pytest.mark.parametrize("where", ["subdirectory", "missing", "device"])
def test_a_local_url_that_is_no_repository_is_never_counted(
    tmp_path: Path, long_upstream: Upstream, where: str
) -> None:
    """A directory inside a repository is not that repository (git's discovery would
    walk up to it); a missing path or a device is no repository at all."""
    url = {
        "subdirectory": str(long_upstream.path / "docs"),
        "missing": (tmp_path / "nothing-here").as_uri(),
        "device": "/dev/zero",
    }[where]
    number, how = build_number.count(tmp_path / "ws", url, long_upstream.head, tmp_path / "tmp")
    assert number is None, how


@pytest.mark.parametrize("key", ["/nonexistent/signing.pem", "/dev/zero", "-rf"])
def test_a_bad_key_is_refused_before_the_count_and_the_manifest_edit(
    tmp_path: Path, upstream: Upstream, key: str
) -> None:
    """h7 finding 5: `build --key <missing file>` waited for the count's fetch and had
    edited the manifest by then. Bad input is refused before any work, losing nothing."""
    root = make_patched_root(tmp_path / "forge", upstream)
    assert run_forge("--root", str(root), "patch").code == 0
    manifest = root / "manifests" / "llama.cpp.toml"
    manifest.write_bytes(re.sub(rb"(?m)^build_number = \d+\n", b"", manifest.read_bytes()))
    before = manifest.read_bytes()
    src = root / ".dgr" / "src" / "llama.cpp"
    assert sh_git(src, "rev-parse", "--is-shallow-repository") == "true"  # number unknown
    trace = tmp_path / "trace2.json"
    res = run_forge(
        "--root", str(root), "--json", "build", "--lane", "cpu", f"--key={key}",
        env={"GIT_TRACE2_EVENT": str(trace)},
    )  # fmt: skip
    assert res.code == 2, res
    assert "key" in res.stderr.lower(), res.stderr
    assert manifest.read_bytes() == before
    assert not [a for a in _git_commands(trace) if "fetch" in a]


class _Steps:
    """The progress lines a count says (a Reporter's `step`)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def step(self, message: str) -> None:
        self.lines.append(message)


def test_a_count_that_fetches_history_says_so_first_and_one_in_place_says_nothing(
    tmp_path: Path, long_upstream: Upstream
) -> None:
    """Fetching the pin's history (seconds on llama.cpp's ~10k commits) is a step the user
    sees before it starts, naming the server (masked); a count in place fetches nothing."""
    steps = _Steps()
    number, how = build_number.count(
        tmp_path / "ws", long_upstream.url, long_upstream.head, tmp_path / "tmp", steps
    )
    assert number == _count(long_upstream) and "no transfer" in how, how
    assert steps.lines == []

    server = _partial_server(tmp_path, long_upstream)
    number, how = build_number.count(
        tmp_path / "ws", server.as_uri(), long_upstream.head, tmp_path / "tmp", steps
    )
    assert number == _count(long_upstream), how
    (line,) = steps.lines
    assert long_upstream.head[:12] in line and "commits only" in line, line
    assert str(server) in line, line


def test_a_counts_step_line_never_shows_a_credential(
    tmp_path: Path, long_upstream: Upstream
) -> None:
    steps = _Steps()
    url = f"file://dgr:s3cret-token@localhost{long_upstream.path}"
    number, how = build_number.count(
        tmp_path / "ws", url, long_upstream.head, tmp_path / "tmp", steps
    )
    assert number == _count(long_upstream), how  # git's file:// takes no user info
    (line,) = steps.lines
    assert "s3cret-token" not in line and "***@" in line, line
    assert "s3cret-token" not in how, how
