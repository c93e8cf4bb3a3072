"""CMakeUserPresets.json: one configure + build preset per lane, so IDEs build what the
forge builds (same source, build directory, toolchain file and cache variables)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dgr_forge.core.forge import Forge
from dgr_forge.core.fsutil import atomic_write_text
from dgr_forge.lanes import worker
from dgr_forge.lanes.build import COMPILER_VARS, LanePlan, configure_args, toolchain_file
from dgr_forge.lanes.doctor import Doctor, load_probes
from dgr_forge.lanes.recipes import load_all, select
from dgr_forge.upstream.manifest import load as load_manifest

FILE_NAME = "CMakeUserPresets.json"


def _cache_variables(args: list[str]) -> dict[str, str]:
    """-DNAME=VALUE arguments as presets' cacheVariables (the rest is preset fields)."""
    out: dict[str, str] = {}
    for arg in args:
        if arg.startswith("-D") and "=" in arg:
            name, value = arg[2:].split("=", 1)
            if name not in ("CMAKE_TOOLCHAIN_FILE", "CMAKE_MAKE_PROGRAM"):
                out[name] = value
    return out


def render(forge: Forge, lanes: list[str], worker_dir: Path | None) -> dict[str, Any]:
    m = load_manifest(forge.upstream_manifest, forge.root)
    recipes = select(load_all(forge.recipes_dir, forge.root), lanes)
    doctor = Doctor(load_probes(forge.toolchains_dir / "probes.toml", "toolchains/probes.toml"))
    spec = worker.resolve(forge, worker_dir)
    launcher = doctor.launcher()
    configure: list[dict[str, Any]] = []
    build: list[dict[str, Any]] = []
    for recipe in recipes:
        plan = LanePlan(
            recipe=recipe,
            toolchain_file=toolchain_file(forge, recipe),
            build_dir=forge.build_dir(recipe.name),
            log_file=forge.logs_dir / f"build-{recipe.name}.log",
            cmake=str(doctor.tool("cmake").path or "cmake"),
            ninja=str(doctor.tool("ninja").path or "ninja"),
            launcher=launcher.path if launcher else None,
            compiler_args=[
                f"-D{var}={doctor.tool(tool).path}"
                for tool, var in COMPILER_VARS.items()
                if tool in recipe.tools and doctor.tool(tool).found
            ],
        )
        args = configure_args(forge, m, plan, spec, forge.src_dir(m.name))
        preset: dict[str, Any] = {
            "name": f"dgr-{recipe.name}",
            "displayName": f"dgr-forge {recipe.name} ({recipe.backend})",
            "description": recipe.description or f"{recipe.backend} lane",
            "generator": "Ninja",
            "binaryDir": str(plan.build_dir),
            "cacheVariables": _cache_variables(args),
        }
        if plan.toolchain_file:
            preset["toolchainFile"] = str(plan.toolchain_file)
        if doctor.tool("ninja").found:
            preset["cacheVariables"]["CMAKE_MAKE_PROGRAM"] = str(doctor.tool("ninja").path)
        configure.append(preset)
        step: dict[str, Any] = {
            "name": f"dgr-{recipe.name}",
            "configurePreset": f"dgr-{recipe.name}",
        }
        if recipe.targets:
            step["targets"] = list(recipe.targets)
        build.append(step)
    return {
        "version": 3,
        "cmakeMinimumRequired": {"major": 3, "minor": 21, "patch": 0},
        "configurePresets": configure,
        "buildPresets": build,
    }


def write(forge: Forge, presets: dict[str, Any], dest: Path | None) -> Path:
    path = dest or forge.root / FILE_NAME
    if path.is_dir():
        path = path / FILE_NAME
    atomic_write_text(path, json.dumps(presets, indent=2) + "\n")
    return path
