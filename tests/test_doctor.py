"""`dgr-forge doctor`: host probes and the lane verdicts `build` relies on."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from support.build import nvcc_path, path_without
from support.cli import run_forge
from support.git import Upstream
from support.roots import copy_product, make_forge_root


def _root(tmp_path: Path, upstream: Upstream) -> Path:
    root = make_forge_root(tmp_path / "forge", upstream)
    copy_product(root)
    return root


def test_doctor_reports_tools_and_lanes(tmp_path: Path, upstream: Upstream) -> None:
    root = _root(tmp_path, upstream)
    res = run_forge("--root", str(root), "--json", "doctor")
    assert res.code == 0, res
    data = res.json
    tools = {t["name"]: t for t in data["tools"]}
    assert tools["cmake"]["found"] and tools["cmake"]["version"]
    assert tools["ninja"]["found"] and tools["ninja"]["version"]
    lanes = {lane["lane"]: lane for lane in data["lanes"]}
    assert set(lanes) == {"cpu", "cuda", "cuda-sm90", "rocm", "vulkan", "metal"}
    assert lanes["cpu"]["buildable"] == bool(shutil.which("gcc") and shutil.which("g++"))
    assert not lanes["metal"]["buildable"] and not lanes["metal"]["host_os_ok"]
    assert "cpu lane:" in res.stderr and "metal lane: needs darwin" in res.stderr
    assert not (root / ".dgr").exists()  # doctor only looks


def test_doctor_cuda_lane_names_missing_cublas(tmp_path: Path, upstream: Upstream) -> None:
    root = _root(tmp_path, upstream)
    res = run_forge("--root", str(root), "--json", "doctor")
    libs = {lib["name"]: lib for lib in res.json["libraries"]}
    cuda = next(lane for lane in res.json["lanes"] if lane["lane"] == "cuda")
    if libs["cublas"]["found"]:
        assert "cublas" not in [m["name"] for m in cuda["missing"]]
        return
    assert "cublas" in [m["name"] for m in cuda["missing"]]
    assert "cuBLAS (library cublas)" in res.stderr
    if nvcc_path() and shutil.which("nvcc"):
        # this machine: CUDA 13 without cuBLAS -> exactly cuBLAS, with the package names
        assert cuda["summary"] == "missing cuBLAS"
        # the exact command of each way: NVIDIA's wheels, the distribution, NVIDIA's repo
        assert "pip: pip install nvidia-cublas" in res.stderr
        assert "apt-get install nvidia-cuda-dev libcublas12 (Debian/Ubuntu)" in res.stderr
        assert "apt-get install libcublas-dev-13-0 (NVIDIA's CUDA apt repository" in res.stderr
        assert "dgr-forge toolchain install cuda" in res.stderr


def test_doctor_without_compilers_lists_packages(tmp_path: Path, upstream: Upstream) -> None:
    root = _root(tmp_path, upstream)
    bare = tmp_path / "bin"
    bare.mkdir()
    os.symlink("/usr/bin/git", bare / "git")
    res = run_forge("--root", str(root), "--json", "doctor", env={"PATH": str(bare)})
    assert res.code == 0, res
    cpu = next(lane for lane in res.json["lanes"] if lane["lane"] == "cpu")
    assert not cpu["buildable"]
    assert {m["name"] for m in cpu["missing"]} == {"gcc", "g++"}
    assert "debian: apt-get install build-essential (Debian/Ubuntu)" in res.stderr


def test_missing_tool_without_nvcc_on_path(tmp_path: Path, upstream: Upstream) -> None:
    root = _root(tmp_path, upstream)
    env = {"PATH": path_without("nvcc"), "CUDA_PATH": "", "CUDA_HOME": ""}
    res = run_forge("--root", str(root), "--json", "doctor", env=env)
    cuda = next(lane for lane in res.json["lanes"] if lane["lane"] == "cuda")
    assert "nvcc" in [m["name"] for m in cuda["missing"]]


def test_bad_probe_file_is_exit_2(tmp_path: Path, upstream: Upstream) -> None:
    root = _root(tmp_path, upstream)
    probes = root / "toolchains" / "probes.toml"
    probes.write_text(probes.read_text().replace("[tools.cmake]\n", "[tools.cmake]\nbogus = 1\n"))
    res = run_forge("--root", str(root), "--json", "doctor")
    assert res.code == 2
    assert "toolchains/probes.toml: tools.cmake.bogus: unknown key" in res.stderr
    recipe = root / "recipes" / "cpu.toml"
    probes.write_text(probes.read_text().replace("bogus = 1\n", ""))
    recipe.write_text(recipe.read_text().replace('"g++"]', '"g++", "nosuchtool"]'))
    res = run_forge("--root", str(root), "--json", "doctor")
    assert res.code == 2 and "unknown tool probe 'nosuchtool'" in res.stderr


def test_lanes_matrix_before_any_build(tmp_path: Path, upstream: Upstream) -> None:
    root = _root(tmp_path, upstream)
    res = run_forge("--root", str(root), "--json", "lanes")
    assert res.code == 0, res
    rows = {r["lane"]: r for r in res.json["lanes"]}
    assert rows["cpu"]["backend"] == "CPU" and rows["cpu"]["last_build"] is None
    assert rows["cuda"]["backend"] == "CUDA"
    assert rows["metal"]["buildable"] is False


# ----------------------------------------------------------------------------- doctor --lane


def test_doctor_lane_exits_2_naming_what_is_missing(tmp_path: Path, upstream: Upstream) -> None:
    """CI runs `doctor --lane L` first: a lane that cannot build here fails the job, saying
    why, with `build`'s exit code for the same lane (2)."""
    import platform

    root = _root(tmp_path, upstream)
    lane = "cuda" if platform.system() == "Darwin" else "metal"  # never buildable here
    res = run_forge("--root", str(root), "--json", "doctor", "--lane", lane)
    assert res.code == 2, res
    assert res.json["ok"] is False and res.json["exit_code"] == 2
    assert res.json["selected"] == [lane]
    assert res.json["unbuildable"] == [lane]
    assert [entry["lane"] for entry in res.json["lanes"]] == [lane]
    assert f"{lane} lane: cannot build here" in res.stderr  # --json: human text on stderr
    assert "needs darwin" in res.stderr or "nvcc" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (root / ".dgr").exists()

    # a lane with nothing missing passes, and `--lane` may repeat
    bare = tmp_path / "bin"
    bare.mkdir()
    os.symlink("/usr/bin/git", bare / "git")
    res = run_forge("--root", str(root), "doctor", "--lane", "cpu", env={"PATH": str(bare)})
    assert res.code == 2 and "cpu lane: cannot build here" in res.stdout, res
    assert "gcc" in res.stdout and "apt-get install build-essential" in res.stdout
    if shutil.which("gcc") and shutil.which("g++"):
        ok = run_forge("--root", str(root), "--json", "doctor", "--lane", "cpu")
        assert ok.code == 0, ok
        assert ok.json["unbuildable"] == [] and "cpu lane: buildable" in ok.stderr
        both = run_forge("--root", str(root), "doctor", "--lane", "cpu", "--lane", lane)
        assert both.code == 2 and f"{lane} lane: cannot build here" in both.stdout


def test_doctor_unknown_lane_is_exit_2(tmp_path: Path, upstream: Upstream) -> None:
    root = _root(tmp_path, upstream)
    for bad in ("nosuch", "-x", "../cpu", "cpu\x01"):
        res = run_forge("--root", str(root), "--json", "doctor", "--lane", bad)
        assert res.code == 2, res
        assert "unknown lane" in res.stderr and "known lanes: cpu" in res.stderr
        assert "Traceback" not in res.stderr
    plain = run_forge("--root", str(root), "doctor")
    assert plain.code == 0, plain  # without --lane, doctor only reports


def test_a_probe_without_a_description_is_described_by_its_name(tmp_path: Path) -> None:
    """The probe file's record is the decoded file: the name is its key, and a probe the file
    does not describe is shown by that name (in-process, no subprocess: ~1 ms)."""
    from dgr_forge.host.doctor import Doctor
    from dgr_forge.host.probes import load_probes

    probes = tmp_path / "probes.toml"
    probes.write_text(
        'schema = 1\n[tools.zz-none]\nexecutables = ["zz-none"]\n'
        '[tools.described]\nexecutables = ["zz-none"]\ndescription = "The Tool"\n'
        '[libraries.zzlib]\nnames = ["zzlib"]\nroots = ["/opt/zz-none"]\n'
    )
    doctor = Doctor(load_probes(probes), path_env="")
    assert doctor.tool("zz-none").description == "zz-none"
    assert doctor.tool("described").description == "The Tool"
    assert doctor.library("zzlib").description == "zzlib"
    assert not doctor.library("zzlib").found
