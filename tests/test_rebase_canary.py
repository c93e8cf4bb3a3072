"""`rebase --dry-run` (the upstream canary), `--onto` forms, honest reports, `--url` checks."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest
from support.git import Upstream, sh_git
from support.rebase import GGML_NEW, GGML_OLD, LLAMA_OWNER_OLD, make_series, upstream_edit
from support.roots import Series


@pytest.fixture
def series(tmp_path: Path, upstream: Upstream) -> Series:
    return make_series(tmp_path, upstream)


def everything(s: Series) -> dict[str, object]:
    """Manifest, patches/ and the workspace: what a dry run must leave byte-identical."""
    return {
        **s.snapshot(),
        "head": sh_git(s.src, "rev-parse", "HEAD"),
        "status": sh_git(s.src, "status", "--porcelain", "--ignored"),
        "refs": sh_git(s.src, "for-each-ref"),
        "objects": sorted(p.name for p in (s.src / ".git" / "objects").iterdir()),
        "rebase": (s.root / ".dgr" / "rebase.json").exists(),
    }


def conflicting_upstream(s: Series) -> str:
    return upstream_edit(
        s.upstream,
        "src/llama.cpp",
        LLAMA_OWNER_OLD,
        "    return layer < 0 ? -1 : 0; /* upstream: validate */\n",
        "llama: validate the layer index",
    )


def outcomes(rows: list[dict[str, object]]) -> dict[str, object]:
    return {str(r["file"])[:4]: r["outcome"] for r in rows}


# ----------------------------------------------------------------------------- canary


def test_dry_run_names_the_conflict_and_touches_nothing(series: Series, tmp_path: Path) -> None:
    s = series
    culprit = conflicting_upstream(s)
    taken = upstream_edit(s.upstream, "ggml/src/ggml.c", GGML_OLD, GGML_NEW, "ggml: count rpc")
    before = everything(s)
    report = tmp_path / "canary.md"
    r = s.forge("rebase", "--onto", taken, "--dry-run", "--report", str(report), "--json")
    assert r.code == 3, r
    assert r.json["status"] == "dry-run" and r.json["would_conflict"] is True
    assert outcomes(r.json["patches"]) == {
        "0001": "conflict",
        "0002": "dropped",
        "0003": "unchanged",
    }
    rows = {row["file"][:4]: row for row in r.json["patches"]}
    assert rows["0001"]["files"] == ["src/llama.cpp"]
    assert [c["commit"] for c in rows["0001"]["upstream_commits"]] == [culprit]
    assert [c["commit"] for c in rows["0002"]["upstream_commits"]] == [taken]
    assert r.json["counts"]["conflict"] == 1 and r.json["counts"]["dropped"] == 1
    # the console says the same, naming patch, file and upstream commit
    assert "would conflict in src/llama.cpp" in r.stderr and culprit[:12] in r.stderr
    md = report.read_text()
    assert "0001-llama-add-layer-range-ownership.patch" in md and culprit[:12] in md
    assert "would conflict" in md and taken[:12] in md
    assert everything(s) == before
    assert not list((s.root / ".dgr" / "tmp").glob("dgr-*"))  # its scratch is gone


def test_dry_run_clean_exits_0_and_a_real_rebase_agrees(series: Series) -> None:
    s = series
    text = (s.upstream.path / "src/llama.cpp").read_text()
    new = s.upstream.commit({"src/llama.cpp": "// upstream: moved\n" + text}, "llama: move")
    before = everything(s)
    dry = s.forge("rebase", "--onto", new, "--dry-run", "--json")
    assert dry.code == 0, dry
    assert dry.json["would_conflict"] is False
    assert everything(s) == before
    real = s.forge("rebase", "--onto", new, "--json")
    assert real.code == 0, real
    assert outcomes(dry.json["patches"]) == outcomes(real.json["patches"])


def test_dry_run_report_path_is_checked(series: Series) -> None:
    s = series
    new = s.upstream.commit({"docs/z.md": "z\n"}, "docs: z")
    before = everything(s)
    link = s.root.parent / "link.md"
    link.symlink_to(s.manifest)
    bad_paths = (s.manifest, s.patches_dir / "x.md", s.root / "no" / "such.md", link, s.root)
    for bad in map(str, bad_paths):
        r = s.forge("rebase", "--onto", new, "--dry-run", "--report", bad)
        assert r.code == 2 and "--report" in r.stderr, r
    r = s.forge("rebase", "--onto", new, "--report", "x.md")
    assert r.code == 2 and "--dry-run" in r.stderr, r
    assert everything(s) == before


# ----------------------------------------------------------------------------- --onto forms


def test_onto_annotated_tag_is_peeled_and_pinned(series: Series) -> None:
    s = series
    new = s.upstream.commit({"docs/t.md": "t\n"}, "docs: t")
    sh_git(s.upstream.path, "tag", "-a", "v9.0", "-m", "release 9.0", new)
    tag_object = sh_git(s.upstream.path, "rev-parse", "v9.0")
    assert tag_object != new
    for onto in ("v9.0", tag_object):
        r = s.forge("rebase", "--onto", onto, "--dry-run", "--json")
        assert r.code == 0, r
        assert r.json["new_commit"] == new
    r = s.forge("rebase", "--onto", "v9.0", "--json")
    assert r.code == 0, r
    assert r.json["new_commit"] == new
    assert f"resolves to {new}" in r.stderr
    pinned = tomllib.loads(s.manifest.read_text())
    assert pinned["upstream"]["commit"] == new
    assert not (s.root / ".dgr" / "rebase.json").exists()
    assert s.forge("check").code == 0


def test_onto_abbreviated_id_and_lightweight_tag_and_branch(series: Series) -> None:
    s = series
    a = s.upstream.commit({"docs/a.md": "a\n"}, "docs: a")
    r = s.forge("rebase", "--onto", a[:10], "--dry-run", "--json")
    assert r.code == 0, r
    assert r.json["new_commit"] == a
    sh_git(s.upstream.path, "tag", "light", a)
    sh_git(s.upstream.path, "branch", "feature", a)
    for onto in ("light", "feature"):
        r = s.forge("rebase", "--onto", onto, "--dry-run", "--json")
        assert r.code == 0 and r.json["new_commit"] == a, r


@pytest.mark.parametrize("onto", ["--upload-pack=touch x", "-x", "a..b", "a\nb", "x" * 300])
def test_hostile_onto_is_bad_input(series: Series, onto: str) -> None:
    before = everything(series)
    r = series.forge("rebase", f"--onto={onto}")
    assert r.code == 2 and "--onto" in r.stderr, r
    assert "Traceback" not in r.stderr
    assert everything(series) == before


# ----------------------------------------------------------------------------- --url


def test_url_injection_never_runs(series: Series, tmp_path: Path) -> None:
    s = series
    marker = tmp_path / "pwned"
    new = s.upstream.commit({"docs/z.md": "z\n"}, "docs: z")
    before = everything(s)
    for url in (f"--upload-pack=touch {marker};git-upload-pack", f"ext::sh -c 'touch {marker}'"):
        for extra in ((), ("--dry-run",)):
            r = s.forge("rebase", "--onto", new, "--url", url, *extra)
            assert r.code == 2 and "--url" in r.stderr, r
            assert not marker.exists()
    assert everything(s) == before


def test_url_credentials_are_masked(series: Series) -> None:
    s = series
    r = s.forge("rebase", "--onto", "no-such-tag", "--url", "https://user:SECRET@127.0.0.1:9/x.git")
    assert r.code != 0
    assert "SECRET" not in r.stderr + r.stdout, r


# ----------------------------------------------------------------------------- honest reports


def test_resolved_to_empty_is_dropped_by_hand_not_upstreamed(series: Series) -> None:
    s = series
    conflicting_upstream(s)
    new = s.upstream.head
    r = s.forge("rebase", "--onto", new)
    assert r.code == 3, r
    # keep upstream's side: the patch becomes empty by a person's choice
    sh_git(s.src, "checkout", "--ours", "--", "src/llama.cpp")
    sh_git(s.src, "add", "src/llama.cpp")
    r = s.forge("rebase", "--continue", "--json")
    assert r.code == 0, r
    assert outcomes(r.json["patches"]) == {
        "0001": "dropped-by-hand",
        "0002": "unchanged",
        "0003": "unchanged",
    }
    assert r.json["counts"]["dropped-by-hand"] == 1 and r.json["counts"]["dropped"] == 0
    md = Path(r.json["report_markdown"]).read_text()
    assert "dropped by hand" in md and "upstreamed" not in md
    data = json.loads(Path(r.json["report"]).read_text())
    assert data["counts"] == r.json["counts"]
    assert "1 dropped-by-hand" in r.stderr and "1 dropped-by-hand" in md
    assert s.forge("check").code == 0


def test_manifest_url_injection_through_rebase_never_runs(series: Series, tmp_path: Path) -> None:
    s = series
    marker = tmp_path / "pwned"
    new = s.upstream.commit({"docs/z.md": "z\n"}, "docs: z")
    text = s.manifest.read_text()
    s.manifest.write_text(text.replace(s.upstream.url, f"--upload-pack=touch {marker};x"))
    for extra in ((), ("--dry-run",)):
        r = s.forge("rebase", "--onto", "v1", *extra)
        assert r.code == 2 and "url" in r.stderr, r
        r = s.forge("rebase", "--onto", new, *extra)
        assert r.code == 2 and "url" in r.stderr, r
    assert not marker.exists()


def test_upstreamed_names_the_commit_that_took_it_not_every_one_touching_the_file(
    series: Series,
) -> None:
    s = series
    text = (s.upstream.path / "ggml/src/ggml.c").read_text()
    other = s.upstream.commit(
        {"ggml/src/ggml.c": text + "/* upstream: unrelated */\n"}, "ggml: note"
    )
    took = upstream_edit(s.upstream, "ggml/src/ggml.c", GGML_OLD, GGML_NEW, "ggml: count rpc")
    r = s.forge("rebase", "--onto", took, "--json")
    assert r.code == 0, r
    rows = {row["file"][:4]: row for row in r.json["patches"]}
    assert rows["0002"]["outcome"] == "dropped"
    assert [c["commit"] for c in rows["0002"]["upstream_commits"]] == [took]
    assert other[:12] not in Path(r.json["report_markdown"]).read_text()


def test_dry_run_without_a_workspace_creates_none(series: Series) -> None:
    s = series
    new = s.upstream.commit({"docs/z.md": "z\n"}, "docs: z")
    shutil.rmtree(s.root / ".dgr")
    before = s.snapshot()
    r = s.forge("rebase", "--onto", new, "--dry-run", "--json")
    assert r.code == 0, r
    assert set(outcomes(r.json["patches"]).values()) == {"unchanged"}
    assert s.snapshot() == before
    assert not (s.root / ".dgr" / "src").exists()
