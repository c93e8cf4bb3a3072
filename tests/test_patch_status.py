"""`dgr-forge status`: the per-patch table (applied / pending / changed on disk / conflict)."""

from __future__ import annotations

from pathlib import Path

from support.cli import run_forge
from support.git import Upstream, sh_git
from support.patches import make_series, snapshot, src_dir


def status(root: Path):  # type: ignore[no-untyped-def]
    res = run_forge("--root", str(root), "--json", "status")
    assert res.code == 0, res
    return res.json["patches"]


def states(info) -> list[str]:  # type: ignore[no-untyped-def]
    return [p["state"] for p in info["series"]]


def test_status_per_patch_states(upstream: Upstream, forge_root: Path) -> None:
    series = make_series(forge_root, upstream)
    assert states(status(forge_root)) == ["pending"] * 3  # not fetched yet
    assert run_forge("--root", str(forge_root), "patch").code == 0
    info = status(forge_root)
    assert states(info) == ["applied"] * 3 and info["applied"] is True

    src = src_dir(forge_root)
    sh_git(src, "reset", "-q", "--hard", "HEAD~1")
    assert states(status(forge_root)) == ["applied", "applied", "pending"]

    # patch 2 edited by hand: "changed on disk"; the workspace still has patch 3 applied
    assert run_forge("--root", str(forge_root), "patch").code == 0
    path = series.paths(forge_root)[1]
    path.write_text(path.read_text().replace(" int ggml_backend_count(void) {", " int x(void) {"))
    before = snapshot(src)
    info = status(forge_root)
    assert states(info) == ["applied", "changed on disk", "applied"]
    assert "manifest's version" in info["series"][1]["detail"]
    sh_git(src, "reset", "-q", "--hard", "HEAD~1")
    assert states(status(forge_root)) == ["applied", "changed on disk", "pending"]
    assert snapshot(src) != before
    before = snapshot(src)
    status(forge_root)
    assert snapshot(src) == before  # status writes nothing


def test_status_conflict_and_local_edits(upstream: Upstream, forge_root: Path) -> None:
    make_series(forge_root, upstream)
    assert run_forge("--root", str(forge_root), "patch").code == 0
    src = src_dir(forge_root)
    (src / "README.md").write_text("edited\n")
    info = status(forge_root)
    assert info["applied"] is False
    assert any("README.md" in line for line in info["local_edits"]["uncommitted"])

    # a new upstream pin where patch 1's lines changed: patch 1 conflicts
    upstream.commit({"src/llama.cpp": "// rewritten upstream\n"}, "rewrite")
    text = (forge_root / "manifests" / "llama.cpp.toml").read_text()
    old_pin = upstream.commits[-2]
    text = text.replace(old_pin, upstream.head).replace(
        upstream.tree(old_pin), upstream.tree(upstream.head)
    )
    (forge_root / "manifests" / "llama.cpp.toml").write_text(text)
    sh_git(src, "checkout", "-q", "--", "README.md")
    sh_git(src, "fetch", "-q", str(upstream.path), upstream.head)
    info = status(forge_root)
    assert states(info)[0] == "conflict" and "src/llama.cpp" in info["series"][0]["detail"]
