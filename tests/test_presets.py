"""`dgr-forge presets`: CMakeUserPresets.json that builds what the forge builds."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from build_support import make_patched_root, make_worker
from forgetest import Upstream, run_forge


def test_presets_print_mirrors_recipes(tmp_path: Path, upstream: Upstream) -> None:
    root = make_patched_root(tmp_path / "forge", upstream)
    res = run_forge("--root", str(root), "--json", "presets", "--print")
    assert res.code == 0, res
    data = res.json["content"]
    assert data["version"] == 3
    names = [p["name"] for p in data["configurePresets"]]
    assert names == ["dgr-cpu", "dgr-cuda", "dgr-metal", "dgr-rocm", "dgr-vulkan"]
    cpu = data["configurePresets"][0]
    assert cpu["generator"] == "Ninja"
    assert cpu["binaryDir"] == str(root / ".dgr" / "build" / "cpu")
    assert cpu["toolchainFile"] == str(root / "toolchains" / "gcc.cmake")
    assert cpu["cacheVariables"]["GGML_NATIVE"] == "OFF"
    assert cpu["cacheVariables"]["CMAKE_EXPORT_COMPILE_COMMANDS"] == "ON"
    cuda = data["configurePresets"][1]
    assert cuda["cacheVariables"]["GGML_CUDA"] == "ON"
    assert [b["configurePreset"] for b in data["buildPresets"]] == names
    assert not (root / "CMakeUserPresets.json").exists()  # --print writes nothing


def test_presets_write_root_file(tmp_path: Path, upstream: Upstream) -> None:
    root = make_patched_root(tmp_path / "forge", upstream)
    # no worker and no upstream tree yet: nowhere `cmake --preset` would work (issue 13 #9)
    res = run_forge("--root", str(root), "--json", "presets", "--lane", "cpu")
    assert res.code == 2, res
    assert "dgr-forge patch" in res.stderr
    assert not (root / "CMakeUserPresets.json").exists()
    # --out still writes exactly where asked
    res = run_forge("--root", str(root), "--json", "presets", "--lane", "cpu", "--out", str(root))
    assert res.code == 0, res
    path = root / "CMakeUserPresets.json"
    assert res.json["path"] == str(path)
    assert [p["name"] for p in json.loads(path.read_text())["configurePresets"]] == ["dgr-cpu"]


@pytest.mark.slow
def test_ide_preset_builds_the_same_tree(tmp_path: Path, upstream: Upstream) -> None:
    """An IDE configuring with the preset reuses the forge's build: the forge stays a no-op."""
    root = make_patched_root(tmp_path / "forge", upstream)
    worker = make_worker(tmp_path / "worker")
    first = run_forge(
        "--root", str(root), "--json", "build", "--worker", str(worker), "--no-sign", "-j", "2"
    )
    assert first.code == 0, first
    res = run_forge(
        "--root",
        str(root),
        "presets",
        "--lane",
        "cpu",
        "--worker",
        str(worker),
        "--out",
        str(worker),
    )
    assert res.code == 0, res
    from dgr_forge.lanes.doctor import Doctor, load_probes

    cmake = Doctor(load_probes(root / "toolchains" / "probes.toml")).tool("cmake").path
    assert cmake
    subprocess.run([cmake, "--preset", "dgr-cpu"], cwd=worker, check=True, capture_output=True)
    built = subprocess.run(
        [cmake, "--build", "--preset", "dgr-cpu"],
        cwd=worker,
        check=True,
        capture_output=True,
        text=True,
    )
    assert "no work to do" in built.stdout  # same args -> same build graph, nothing rebuilt
    again = run_forge("--root", str(root), "--json", "build", "--worker", str(worker), "--no-sign")
    assert again.code == 0, again
    assert again.json["lanes"][0]["configured"] is False, again.stderr


def test_presets_refuse_to_write_through_a_planted_symlink(
    tmp_path: Path, upstream: Upstream
) -> None:
    root = make_patched_root(tmp_path / "forge", upstream)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "CMakeUserPresets.json").symlink_to(victim)
    res = run_forge("--root", str(root), "presets", "--lane", "cpu", "--out", str(out))
    assert res.code == 2, res
    assert "symlink" in res.stderr and "Traceback" not in res.stderr
    assert victim.read_text() == "keep\n"
