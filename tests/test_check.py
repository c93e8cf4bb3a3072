"""`dgr-forge check`: the CI gate reproduces patches/ and the manifest byte for byte, and
every GGML_*/LLAMA_* option the recipes pass is still declared upstream."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.git import Upstream, sh_git
from support.rebase import make_series
from support.roots import Series

from dgr_forge.host.cmake_options import declared_options

CUDA_RECIPE = """\
schema = 1
[lane]
backend = "CUDA"
[cmake]
options = { GGML_CUDA = "ON", GGML_NATIVE = "OFF", CMAKE_CUDA_ARCHITECTURES = "89" }
"""


@pytest.fixture
def series(tmp_path: Path, upstream: Upstream) -> Series:
    s = make_series(tmp_path, upstream)
    (s.root / "recipes" / "cuda.toml").write_text(CUDA_RECIPE)
    return s


def test_clean_root_passes(series: Series) -> None:
    r = series.forge("check", "--json")
    assert r.code == 0, r
    assert r.json["series_reproduced"] is True
    assert r.json["differences"] == [] and r.json["option_problems"] == []
    assert r.json["options_checked"] == 2  # GGML_CUDA, GGML_NATIVE (CMAKE_* is CMake's own)
    # a scratch workspace: the root's own workspace is not created or touched
    assert not (series.root / ".dgr" / "reports").exists()


def test_hand_edited_patch_fails_with_a_diff(series: Series) -> None:
    s = series
    p = s.patches_dir / "0002-ggml-count-the-rpc-backend.patch"
    before = s.snapshot()
    # an edit that still applies: the added line's comment changes
    p.write_text(p.read_text().replace("cpu + rpc", "cpu and rpc"))
    edited = s.snapshot()
    r = s.forge("check", "--json")
    assert r.code == 1, r
    diffs = {d["path"]: d["diff"] for d in r.json["differences"]}
    # the file's blob ids no longer match its content, and the manifest's hash is stale
    assert set(diffs) == {
        "patches/llama.cpp/0002-ggml-count-the-rpc-backend.patch",
        "manifests/llama.cpp.toml",
    }
    assert "sha256" in diffs["manifests/llama.cpp.toml"]
    assert "+index " in diffs["patches/llama.cpp/0002-ggml-count-the-rpc-backend.patch"]
    assert "manifests/llama.cpp.toml differs" in r.stderr
    assert s.snapshot() == edited != before  # check never writes


def test_non_canonical_patch_file_fails(series: Series) -> None:
    s = series
    p = s.patches_dir / "0003-tools-print-a-build-banner.patch"
    # a trailing signature that the canonical exporter never writes
    p.write_bytes(p.read_bytes() + b"-- \n2.99.0\n\n")
    r = s.forge("check", "--json")
    assert r.code == 1, r
    paths = [d["path"] for d in r.json["differences"]]
    assert "patches/llama.cpp/0003-tools-print-a-build-banner.patch" in paths
    assert "2.99.0" in r.stderr


def test_patch_that_no_longer_applies_fails(series: Series) -> None:
    s = series
    p = s.patches_dir / "0001-llama-add-layer-range-ownership.patch"
    p.write_text(p.read_text().replace(" (void) layer;", " (void) layer; "))
    r = s.forge("check", "--json")
    assert r.code == 1, r
    assert "src/llama.cpp" in r.json["apply_error"]
    assert "0001-llama-add-layer-range-ownership.patch" in r.json["apply_error"]
    assert r.json["differences"] == []  # nothing to compare: it stopped at the patch


def test_undeclared_recipe_option_fails_naming_recipe_and_option(series: Series) -> None:
    s = series
    (s.root / "recipes" / "vulkan.toml").write_text(
        'schema = 1\n[lane]\nbackend = "Vulkan"\n[cmake]\noptions = { GGML_VULKANN = "ON" }\n'
    )
    r = s.forge("check", "--json")
    assert r.code == 1, r
    (problem,) = r.json["option_problems"]
    assert problem["recipe"] == "vulkan" and problem["option"] == "GGML_VULKANN"
    assert "recipes/vulkan.toml" in r.stderr and "GGML_VULKANN" in r.stderr
    assert "renamed or removed upstream" in r.stderr and "GGML_VULKAN" in r.stderr


def test_upstream_rename_is_caught_after_a_rebase(series: Series) -> None:
    """Upstream renames GGML_CUDA to GGML_CUDA_BACKEND (keeping a deprecated alias):
    a rebase carries cleanly, but check fails on the recipe until it is updated."""
    s = series
    cmake = (s.upstream.path / "CMakeLists.txt").read_text()
    cmake = cmake.replace(
        'option(GGML_CUDA "use CUDA" OFF)',
        'option(GGML_CUDA_BACKEND "use CUDA" OFF)\n'
        "llama_option_depr(WARNING GGML_CUDA GGML_CUDA_BACKEND)",
    )
    new = s.upstream.commit({"CMakeLists.txt": cmake}, "cmake: rename GGML_CUDA")
    r = s.forge("rebase", "--onto", new)
    assert r.code == 0, r
    r = s.forge("check", "--json")
    assert r.code == 2, r  # the recipe must change: bad input (issue 29)
    (problem,) = r.json["option_problems"]
    assert problem["option"] == "GGML_CUDA" and problem["renamed_to"] == "GGML_CUDA_BACKEND"
    assert problem["deprecated"] is True and "deprecated upstream at" in r.stderr
    assert "recipes/cuda.toml" in r.stderr


def test_declared_options_forms(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    (repo / "cmake").mkdir(parents=True)
    (repo / "CMakeLists.txt").write_text(
        'OPTION(GGML_A "a" ON)\n'
        'cmake_dependent_option(GGML_B "b" ON "GGML_A" OFF)\n'
        'set(LLAMA_C "x" CACHE STRING "c")\n'
        "set(LLAMA_NOT_CACHED 1)\n"
        '# option(GGML_COMMENTED "no" ON)\n'
    )
    (repo / "cmake" / "more.cmake").write_text(
        'set(GGML_D\n    OFF\n    CACHE BOOL "multi-line")\n'
    )
    sh_git(repo, "init", "-q")
    sh_git(repo, "add", "-A")
    names, renames = declared_options(repo)
    assert {"GGML_A", "GGML_B", "LLAMA_C", "GGML_D"} <= names
    assert "LLAMA_NOT_CACHED" not in names and "GGML_COMMENTED" not in names
    assert renames == {}


def test_mirror_is_passed_through(series: Series, tmp_path: Path) -> None:
    """An air-gapped CI host: the pinned URL is unreachable, a local mirror has the pin."""
    s = series
    mirror = tmp_path / "mirror.git"
    sh_git(tmp_path, "clone", "-q", "--mirror", str(s.upstream.path), str(mirror))
    gone = (tmp_path / "gone").as_uri()
    s.manifest.write_text(s.manifest.read_text().replace(s.upstream.url, gone))
    r = s.forge("check", "--json")
    assert r.code == 1 and r.json["apply_error"], r
    r = s.forge("check", "--mirror", str(mirror), "--json")
    assert r.code == 0, r
    # --offline reads the pin from this root's own workspace (which has it) ...
    r = s.forge("check", "--offline", "--json")
    assert r.code == 0, r
    # ... and without one it fails clearly instead of touching the network
    shutil.rmtree(s.root / ".dgr")
    r = s.forge("check", "--offline", "--json")
    assert r.code == 1 and "--offline" in r.json["apply_error"], r


def test_a_message_git_am_cuts_fails_check_naming_the_message(series: Series) -> None:
    """Issue 15: check compares messages too: a patch file whose message body holds a
    `---` line applies (same tree) but its message does not survive; check fails."""
    s = series
    p = s.patches_dir / "0003-tools-print-a-build-banner.patch"
    text = p.read_text()
    subject = "Subject: tools: print a build banner\n"
    assert subject in text
    p.write_text(text.replace(subject, subject + "\nwhy:\n---\nthe rest of the story\n", 1))
    edited = s.snapshot()
    r = s.forge("check", "--json")
    assert r.code == 1, r
    what = {d["path"]: d["what"] for d in r.json["differences"]}
    assert what["patches/llama.cpp/0003-tools-print-a-build-banner.patch"] == "message"
    assert "(its commit message)" in r.stderr
    assert s.snapshot() == edited
