"""The series' footprint (`check`, `status`) and `[patches] budget`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.git import Upstream, sh_git
from support.rebase import make_series
from support.roots import Series

from dgr_forge.upstream.series import _count


@pytest.fixture
def series(tmp_path: Path, upstream: Upstream) -> Series:
    return make_series(tmp_path, upstream)


def _numstat(patch: Path) -> tuple[int, int]:
    """git's own count of a patch's added and removed lines (the oracle)."""
    out = subprocess.run(
        ["git", "apply", "--numstat", str(patch)], capture_output=True, text=True, check=True
    ).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    return sum(int(r[0]) for r in rows), sum(int(r[1]) for r in rows)


def _set_budget(s: Series, value: str) -> bytes:
    path = s.root / "manifests" / "llama.cpp.toml"
    text = path.read_text().replace(
        "[patches]\n", f"[patches]\nbudget = {{ upstream_lines = {value} }}\n", 1
    )
    path.write_text(text)
    return path.read_bytes()


def test_check_and_status_show_the_footprint_per_patch_and_in_total(series: Series) -> None:
    r = series.forge("check", "--json")
    assert r.code == 0, r
    fp = r.json["footprint"]
    want = [_numstat(series.patches_dir / f) for f in series.files]
    assert [(p["added"], p["removed"]) for p in fp["patches"]] == want
    assert fp["upstream_lines"] == sum(a + b for a, b in want) > 0
    assert fp["budget"] is None and fp["over_budget"] is False and fp["new_files"] == 0
    assert f"footprint: +{fp['added']} -{fp['removed']} = {fp['upstream_lines']}" in r.stderr
    st = series.forge("status", "--json")
    assert st.json["patches"]["footprint"] == fp


def test_a_budget_the_series_passes_fails_check_naming_the_patches(series: Series) -> None:
    total = series.forge("check", "--json").json["footprint"]["upstream_lines"]
    _set_budget(series, str(total))
    assert series.forge("check").code == 0  # exactly at the budget
    path = series.root / "manifests" / "llama.cpp.toml"
    path.write_text(
        path.read_text().replace(f"upstream_lines = {total}", f"upstream_lines = {total - 1}")
    )
    r = series.forge("check", "--json")
    assert r.code == 1, r
    assert r.json["footprint"]["over_budget"] is True
    assert r.json["footprint"]["grew"] == list(series.files)
    assert f"over its budget of {total - 1}" in r.stderr
    assert all(f in r.stderr for f in series.files)


@pytest.mark.parametrize("value", ["0", "-3", '"400"', "1.5", "true", "{ n = 1 }"])
def test_a_budget_that_is_not_a_positive_integer_is_exit_2(series: Series, value: str) -> None:
    written = _set_budget(series, value)
    r = series.forge("check")
    assert r.code == 2, r
    assert "patches.budget.upstream_lines" in r.stderr, r  # the key, not an unknown table
    assert (series.root / "manifests" / "llama.cpp.toml").read_bytes() == written  # untouched


def test_files_the_series_adds_are_counted_apart(upstream: Upstream, tmp_path: Path) -> None:
    up = upstream.path
    base = upstream.head
    (up / "src" / "dgr-hooks.h").write_text("#pragma once\nint dgr_hook(void);\n")
    sh_git(up, "add", "-A")
    sh_git(up, "commit", "-q", "-m", "add the hooks header")
    (up / "src" / "dgr-hooks.h").write_text(
        "#pragma once\nint dgr_hook(void);\nint dgr_two(void);\n"
    )
    text = (up / "src" / "llama.cpp").read_text()
    (up / "src" / "llama.cpp").write_text('#include "dgr-hooks.h"\n' + text)
    sh_git(up, "commit", "-q", "-am", "use it")
    out = tmp_path / "p"
    sh_git(up, "format-patch", "-q", "--full-index", "-o", str(out), f"{base}..HEAD")
    own: set[str] = set()
    first, second = sorted(out.iterdir())
    assert _count(first.read_bytes(), own) == (0, 0, ["src/dgr-hooks.h"], 2)
    assert _count(second.read_bytes(), own) == (1, 0, [], 1)  # the header is the series' own
