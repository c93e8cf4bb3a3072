"""The lane matrix: every recipe, whether this host can build it, and its last build."""

from __future__ import annotations

from typing import Any

from dgr_forge.build import load_state
from dgr_forge.doctor import Doctor, load_probes
from dgr_forge.forge import Forge
from dgr_forge.recipes import load_all


def matrix(forge: Forge) -> list[dict[str, Any]]:
    recipes = load_all(forge.recipes_dir, forge.root)
    doctor = Doctor(load_probes(forge.toolchains_dir / "probes.toml", "toolchains/probes.toml"))
    state = load_state(forge)["lanes"]
    rows: list[dict[str, Any]] = []
    for name, recipe in recipes.items():
        check = doctor.check_lane(recipe)
        last = state.get(name, {}).get("last_build")
        rows.append(
            {
                "lane": name,
                "backend": recipe.backend,
                "host_os": list(recipe.host_os),
                "buildable": check.buildable,
                "missing": check.summary() if not check.buildable else None,
                "last_build": (
                    {
                        "time": last.get("time"),
                        "result": last.get("result"),
                        "report": last.get("report"),
                        "log": last.get("log"),
                    }
                    if last
                    else None
                ),
                # reports helper: add "certified" here (dgr_forge.certify.advertised_lanes)
            }
        )
    return rows
