"""A certification binds the lane's whole input (issue 20 #7): besides recipe, pin and
series, the toolchain file, the forge's cmake/ modules and the worker; any change lapses
it, and `lanes` says which."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
import pytest
from support.cli import run_forge
from support.reports import lane_build
from support.roots import REPO
from test_certify import advertised, run_certify, status, trust

from dgr_forge.attest import keys, reports
from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import sha256_file
from dgr_forge.core.output import Reporter

TOOLCHAIN = "set(CMAKE_C_COMPILER gcc)\n"
ATTESTED = "attested, not checked"  # a valid record of a person's evidence (issue 30)


@pytest.fixture
def toolchain_report(forge: Forge, tmp_path: Path) -> Path:
    """A report of the cpu lane built with toolchains/gcc.cmake (the recipe names it)."""
    (forge.toolchains_dir / "gcc.cmake").write_text(TOOLCHAIN)
    shutil.copy(REPO / "toolchains" / "probes.toml", forge.toolchains_dir / "probes.toml")
    recipe = forge.recipes_dir / "cpu.toml"
    recipe.write_text(recipe.read_text().replace("[cmake]", 'toolchain = "gcc"\n[cmake]'))
    (forge.cmake_dir / "DgrBuildInfo.cmake").write_text("# module\n")
    build = msgspec.structs.replace(
        lane_build(forge),
        toolchain_file="toolchains/gcc.cmake",
        toolchain_sha256=sha256_file(forge.toolchains_dir / "gcc.cmake"),
    )
    keys.generate(tmp_path / "ci.pem")
    return reports.write_report(forge, build, keys.load_signer(tmp_path / "ci.pem"), Reporter())


def test_toolchain_cmake_module_change_lapses_and_lanes_says_which(
    forge: Forge, toolchain_report: Path, tmp_path: Path
) -> None:
    keys.generate(tmp_path / "release.pem")
    trust(forge, tmp_path / "release.pem")
    evidence = tmp_path / "run.log"
    evidence.write_text("passed\n")
    r = run_certify(forge, toolchain_report, evidence, tmp_path / "release.pem", "--hardware", "x")
    assert r.code == 0, r
    assert list(advertised(forge)) == ["cpu"]

    toolchain = forge.toolchains_dir / "gcc.cmake"
    toolchain.write_text(TOOLCHAIN + "set(CMAKE_CXX_FLAGS_INIT -O0)\n")
    assert advertised(forge) == {}
    reason = status(forge).reason
    assert reason.startswith("lapsed:") and "toolchains/gcc.cmake" in reason, reason
    lanes = run_forge("--root", str(forge.root), "--json", "lanes")
    assert lanes.code == 0, lanes
    shown = next(ln for ln in lanes.json["lanes"] if ln["lane"] == "cpu")
    assert "toolchains/gcc.cmake" in str(shown), shown
    toolchain.write_text(TOOLCHAIN)
    assert list(advertised(forge)) == ["cpu"]

    (forge.cmake_dir / "DgrBuildInfo.cmake").write_text("# module, changed\n")
    assert "cmake/" in status(forge).reason
    (forge.cmake_dir / "DgrBuildInfo.cmake").write_text("# module\n")
    assert list(advertised(forge)) == ["cpu"]


def test_certify_refuses_a_report_built_with_another_toolchain_file(
    forge: Forge, toolchain_report: Path, tmp_path: Path
) -> None:
    (forge.toolchains_dir / "gcc.cmake").write_text(TOOLCHAIN + "# edited after the build\n")
    keys.generate(tmp_path / "release.pem")
    evidence = tmp_path / "run.log"
    evidence.write_text("passed\n")
    r = run_certify(forge, toolchain_report, evidence, tmp_path / "release.pem", "--hardware", "x")
    assert r.code == 2, r
    assert "toolchains/gcc.cmake" in r.stderr


def test_a_worker_change_lapses_it(forge: Forge, toolchain_report: Path, tmp_path: Path) -> None:
    keys.generate(tmp_path / "release.pem")
    trust(forge, tmp_path / "release.pem")
    evidence = tmp_path / "run.log"
    evidence.write_text("passed\n")
    (forge.root / "manifests" / "shard-worker.toml").write_text(
        'schema = 1\n[worker]\npath = "worker"\n'
    )
    r = run_certify(forge, toolchain_report, evidence, tmp_path / "release.pem", "--hardware", "x")
    assert r.code == 0, r
    assert r.json["inputs"]["worker"]["location"] == "worker", r.json

    def lane_status() -> dict[str, object]:
        res = run_forge("--root", str(forge.root), "--json", "lanes")
        assert res.code == 0, res
        return next(ln for ln in res.json["lanes"] if ln["lane"] == "cpu")  # type: ignore[no-any-return]

    assert lane_status()["certification"]["reason"] == ATTESTED  # valid, never advertised
    main = forge.root / "worker" / "w.cpp"
    main.write_text(main.read_text() + "// changed\n")
    shown = lane_status()
    assert shown["certified"] is False
    assert "the worker changed" in str(shown["certification"]), shown


def test_a_tool_version_change_on_the_host_lapses_it(forge: Forge, tmp_path: Path) -> None:
    """The certification binds the host's tools the lane builds with (cmake, ninja, the
    recipe's tools) by version: another gcc on PATH lapses it, with both versions."""
    shutil.copy(REPO / "toolchains" / "probes.toml", forge.toolchains_dir / "probes.toml")
    recipe = forge.recipes_dir / "cpu.toml"
    recipe.write_text(recipe.read_text() + '[requires]\ntools = ["cmake", "ninja", "gcc"]\n')
    keys.generate(tmp_path / "ci.pem")
    signer = keys.load_signer(tmp_path / "ci.pem")
    toolchain_report = reports.write_report(forge, lane_build(forge), signer, Reporter())
    keys.generate(tmp_path / "release.pem")
    trust(forge, tmp_path / "release.pem")
    evidence = tmp_path / "run.log"
    evidence.write_text("passed\n")
    r = run_certify(forge, toolchain_report, evidence, tmp_path / "release.pem", "--hardware", "x")
    assert r.code == 0, r
    bound = r.json["inputs"]["tools"]
    assert bound["cmake"] and bound["ninja"] and bound["gcc"], bound

    def lane_status(env: dict[str, str] | None = None) -> dict[str, object]:
        res = run_forge("--root", str(forge.root), "--json", "lanes", env=env)
        assert res.code == 0, res
        return next(ln for ln in res.json["lanes"] if ln["lane"] == "cpu")  # type: ignore[no-any-return]

    assert lane_status()["certification"]["reason"] == ATTESTED  # valid, never advertised
    other = tmp_path / "other-gcc"
    other.mkdir()
    fake = other / "gcc"
    fake.write_text("#!/bin/sh\necho 99.1.0\n")
    fake.chmod(0o755)
    import os

    shown = lane_status({"PATH": f"{other}{os.pathsep}{os.environ['PATH']}"})
    assert shown["certified"] is False, shown
    assert f"gcc {bound['gcc']} -> 99.1.0" in str(shown["certification"]), shown
    assert lane_status()["certification"]["reason"] == ATTESTED  # the certified gcc: valid again
