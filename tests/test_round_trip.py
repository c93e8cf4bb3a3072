"""The round trip of an export (`export.verify_round_trip`) checks every patch against its
own commit's tree, also where patches are applied by one `git apply` in runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from msgspec.structs import replace
from support.git import sh_git

from dgr_forge.core.errors import OperationFailed
from dgr_forge.upstream import export
from dgr_forge.upstream.export import ExportedPatch, compute_series, verify_round_trip
from dgr_forge.upstream.series import scratch_index

LINES = "".join(f"line {n}\n" for n in range(1, 21))
# (path, line) edits, one commit each: two runs (patch 3 touches a.c again)
EDITS = [("a.c", 3), ("b.c", 3), ("a.c", 15), ("c.c", 7), ("d/e.c", 9)]


@pytest.fixture(scope="module")
def series(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[ExportedPatch]]:
    # read-only for the tests: verify_round_trip works on a scratch index
    tmp_path = tmp_path_factory.mktemp("round-trip")
    repo = tmp_path / "repo"
    (repo / "d").mkdir(parents=True)
    sh_git(repo, "init", "-q")
    for rel in ("a.c", "b.c", "c.c", "d/e.c"):
        (repo / rel).write_text(LINES)
    sh_git(repo, "add", "-A")
    sh_git(repo, "commit", "-q", "-m", "base")
    base = sh_git(repo, "rev-parse", "HEAD")
    for n, (rel, line) in enumerate(EDITS):
        path = repo / rel
        path.write_text(path.read_text().replace(f"line {line}\n", f"line {line} patched\n"))
        sh_git(repo, "commit", "-q", "-am", f"patch {n}")
    return repo, base, compute_series(repo, base, tmp_root=tmp_path / "tmp")


def test_a_faithful_series_round_trips(series: tuple[Path, str, list[ExportedPatch]]) -> None:
    repo, base, patches = series
    verify_round_trip(repo, base, patches)


@pytest.mark.parametrize("k", range(len(EDITS)))
def test_a_patch_that_gives_another_tree_is_named(
    series: tuple[Path, str, list[ExportedPatch]], k: int
) -> None:
    repo, base, patches = series
    # still applies (same lines, same counts), but writes other content
    wrong = patches[k].data.replace(b" patched\n", b" altered\n")
    assert wrong != patches[k].data
    bad = [*patches[:k], replace(patches[k], data=wrong), *patches[k + 1 :]]
    with pytest.raises(OperationFailed) as err:
        verify_round_trip(repo, base, bad)
    assert patches[k].file in str(err.value)


@pytest.mark.parametrize("k", range(len(EDITS)))
def test_a_patch_that_does_not_apply_is_named(
    series: tuple[Path, str, list[ExportedPatch]], k: int
) -> None:
    repo, base, patches = series
    wrong = patches[k].data.replace(b"\n line", b"\n lime", 1)  # a context line
    assert wrong != patches[k].data
    bad = [*patches[:k], replace(patches[k], data=wrong), *patches[k + 1 :]]
    with pytest.raises(OperationFailed) as err:
        verify_round_trip(repo, base, bad)
    assert patches[k].file in str(err.value) and "conflict" in str(err.value)


def test_a_change_two_patches_leave_out_is_still_found(
    series: tuple[Path, str, list[ExportedPatch]],
) -> None:
    # patches 4 and 5 exchange their files' bytes: each applies and the pair ends at the
    # right tree, but patch 4 alone does not give its commit's tree (a run made from the
    # files' paths alone would hold both and miss it)
    repo, base, patches = series
    swapped = [
        replace(patches[3], data=patches[4].data),
        replace(patches[4], data=patches[3].data),
    ]
    with pytest.raises(OperationFailed) as err:
        verify_round_trip(repo, base, [*patches[:3], *swapped])
    assert patches[3].file in str(err.value)


# a long-lived series: every patch touches one file again (a run each), checked in parts
LONG = 24


@pytest.fixture(scope="module")
def long_series(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[ExportedPatch]]:
    tmp_path = tmp_path_factory.mktemp("round-trip-long")
    repo = tmp_path / "repo"
    repo.mkdir()
    sh_git(repo, "init", "-q")
    text = "".join(f"line {n}\n" for n in range(1, 4 * LONG))
    (repo / "shared.c").write_text(text)
    sh_git(repo, "add", "-A")
    sh_git(repo, "commit", "-q", "-m", "base")
    base = sh_git(repo, "rev-parse", "HEAD")
    for n in range(LONG):
        line = 3 + 4 * n
        text = text.replace(f"line {line}\n", f"line {line} patched\n")
        (repo / "shared.c").write_text(text)
        sh_git(repo, "commit", "-q", "-am", f"patch {n}")
    return repo, base, compute_series(repo, base, tmp_root=tmp_path / "tmp")


@pytest.mark.parametrize("wrong_at", [(), (17,), (2, 17), (LONG - 1,)])
def test_a_long_series_checked_in_parts_names_its_first_wrong_patch(
    long_series: tuple[Path, str, list[ExportedPatch]],
    monkeypatch: pytest.MonkeyPatch,
    wrong_at: tuple[int, ...],
) -> None:
    repo, base, patches = long_series
    monkeypatch.setattr(export, "_VERIFY_WORKERS", 3)  # three parts, whatever the cores
    assert len(export._parts(export._disjoint_runs(repo, patches), 3)) == 3
    bad = [
        replace(p, data=p.data.replace(b" patched\n", b" altered\n")) if k in wrong_at else p
        for k, p in enumerate(patches)
    ]
    if not wrong_at:
        verify_round_trip(repo, base, bad)
        return
    with pytest.raises(OperationFailed) as err:
        verify_round_trip(repo, base, bad)
    first = patches[min(wrong_at)].file
    assert first in str(err.value), err.value
    assert all(patches[k].file not in str(err.value) for k in wrong_at if k != min(wrong_at))


def _one_commit(repo: Path) -> str:
    """A new repository at `repo` with one commit of one file `f`: that commit."""
    repo.mkdir()
    sh_git(repo, "init", "-q")
    (repo / "f").write_text("x\n")
    sh_git(repo, "add", "f")
    sh_git(repo, "commit", "-q", "-m", "x")
    return sh_git(repo, "rev-parse", "HEAD")


def test_a_quoted_alternates_line_is_read_unquoted(tmp_path: Path) -> None:
    # git reads an `objects/info/alternates` line that starts with `"` C-quoted (a path
    # with a quote or a non-ASCII byte, as git quotes it): the scratch index must list
    # the path itself, not the quoted text taken as a path under objects/
    upstream = tmp_path / 'up "q" str\u00e9am'
    commit = _one_commit(upstream)
    repo = tmp_path / "ws"
    repo.mkdir()
    sh_git(repo, "init", "-q")
    objects = upstream / ".git" / "objects"
    quoted = "".join(
        f"\\{chr(b)}" if chr(b) in '"\\' else chr(b) if b < 0x80 else f"\\{b:03o}"
        for b in os.fsencode(objects)
    )
    (repo / ".git" / "objects" / "info" / "alternates").write_text(f'"{quoted}"\n')
    with scratch_index(repo, commit) as env:
        listed = env["GIT_ALTERNATE_OBJECT_DIRECTORIES"].split(os.pathsep)
    assert listed == [str(repo / ".git" / "objects"), str(objects)]


@pytest.mark.parametrize("name", ["ws:a\u200bb", "ws:a\udcffb", 'ws:"q"\u00e9'])
def test_a_scratch_index_reads_objects_from_a_path_with_a_colon_and_any_byte(
    tmp_path: Path, name: str
) -> None:
    # git splits its alternates list at `:` and C-unquotes an entry that starts with `"`,
    # three octal digits a byte: a zero-width space (not printable) or a byte of a
    # non-UTF-8 name must reach git as the path's own bytes
    repo = tmp_path / name
    with scratch_index(repo, _one_commit(repo)) as env:
        listed = sh_git(repo, "ls-files", env=env)
    assert listed == "f"


def test_the_series_is_the_same_from_a_scratch_directory_with_a_newline_in_its_path(
    tmp_path: Path, series: tuple[Path, str, list[ExportedPatch]]
) -> None:
    # format-patch prints the files it writes one a line: under a root whose path holds
    # a newline, that listing splits in two (`wrote 10 files for 5 commits`)
    repo, base, patches = series
    again = compute_series(repo, base, tmp_root=tmp_path / "scratch\nline")
    assert [(p.file, p.data) for p in again] == [(p.file, p.data) for p in patches]
