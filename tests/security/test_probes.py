"""Probes are data (issue 21 #4): `toolchains/probes.toml` comes with the checkout, and
`lanes`, `doctor`, `presets --print` and `status` run its probes, so a probe may only
name a program (found by name in known places, asked its version with fixed arguments)
and `find_command` is one of a few known lookups. Anything else is exit 2 naming the file
and key, before any probe runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import run_forge
from support.roots import copy_product

from dgr_forge.host.probes import load_probes

READ_ONLY = [["lanes"], ["doctor"], ["presets", "--print"], ["status"], ["build", "--lane", "cpu"]]


def hostile(marker: Path) -> dict[str, str]:
    sh = f'"sh", "-c", "touch {marker}; echo /usr/bin/gcc"'
    return {
        "find_command": f"find_command = [{sh}]",
        "executables": 'executables = ["/bin/sh"]\nversion_args = ["--version"]',
        "version_args": f'executables = ["sh"]\nversion_args = ["-c", "touch {marker}"]',
        "hints": f'executables = ["gcc"]\nhints = ["{marker.parent}"]',
        "python_dirs": 'executables = ["gcc"]\npython_dirs = ["antigravity:x"]',
    }


@pytest.mark.parametrize("key", list(hostile(Path("/m"))))
def test_a_probe_that_names_a_command_is_refused_by_every_command(
    tmp_path: Path, forge_root: Path, key: str
) -> None:
    copy_product(forge_root)
    marker = tmp_path / "pwned"
    probes = forge_root / "toolchains" / "probes.toml"
    probes.write_text(
        probes.read_text() + f'\n[tools.evil]\ndescription = "x"\n{hostile(marker)[key]}\n'
    )
    for args in READ_ONLY:
        res = run_forge(*args, cwd=forge_root, env={"DGR_SIGNING_KEY": ""})
        assert not marker.exists(), f"{args} ran the probe's command"
        if args[0] == "status":
            continue  # status reads no probes: nothing runs, nothing to refuse
        assert res.code == 2, (args, res)
        assert "toolchains/probes.toml" in res.stderr and f"tools.evil.{key}" in res.stderr, res
        assert "Traceback" not in res.stderr


def test_the_shipped_probes_are_all_data() -> None:
    probes = load_probes(Path(__file__).resolve().parents[2] / "toolchains" / "probes.toml")
    assert probes.tools["metal"].find_command == ("xcrun", "--find", "metal")


# ----------------------------------------------------------------------------- issue 33 #2
# hints expand only toolchain-installation variables, and never lead into the checkout


def _evil_gcc(where: Path, marker: Path) -> None:
    where.mkdir(parents=True, exist_ok=True)
    gcc = where / "gcc"
    gcc.write_text(f"#!/bin/sh\ntouch {marker}\necho 13.2.0\n")
    gcc.chmod(0o755)


@pytest.mark.parametrize("var", ["PWD", "GITHUB_WORKSPACE", "CI_PROJECT_DIR", "HOME"])
def test_a_hint_through_a_variable_that_names_no_toolchain_is_refused(
    tmp_path: Path, forge_root: Path, var: str
) -> None:
    copy_product(forge_root)
    marker = tmp_path / "pwned"
    _evil_gcc(forge_root / "evilbin", marker)
    probes = forge_root / "toolchains" / "probes.toml"
    probes.write_text(
        probes.read_text().replace(
            'hints = ["$DGR_GCC_PREFIX/bin"]', f'hints = ["${var}/evilbin"]', 1
        )
    )
    env = {"PWD": str(forge_root), var: str(forge_root), "DGR_SIGNING_KEY": ""}
    for args in (["doctor"], ["presets", "--print"]):
        res = run_forge(*args, cwd=forge_root, env=env, subprocess=True)
        assert not marker.exists(), f"{args} ran the checkout's gcc"
        assert res.code == 2, res
        assert "tools.gcc.hints" in res.stderr and f"${var}" in res.stderr, res


@pytest.mark.parametrize("how", ["variable", "relative", "symlink"])
def test_a_toolchain_variable_that_leads_into_the_checkout_is_not_searched(
    tmp_path: Path, forge_root: Path, how: str
) -> None:
    """CUDA_PATH/DGR_GCC_PREFIX are allowed, but one pointing into the forge root (directly,
    relatively, or through a link outside it) is skipped: compared by device and inode."""
    copy_product(forge_root)
    marker = tmp_path / "pwned"
    _evil_gcc(forge_root / "evil" / "bin", marker)
    value = {
        "variable": str(forge_root / "evil"),
        "relative": "evil",
        "symlink": str(tmp_path / "looks-outside"),
    }[how]
    (tmp_path / "looks-outside").symlink_to(forge_root / "evil")
    env = {"DGR_GCC_PREFIX": value, "DGR_SIGNING_KEY": ""}
    res = run_forge("doctor", "--json", cwd=forge_root, env=env, subprocess=True)
    assert not marker.exists(), "doctor ran the checkout's gcc"
    assert "Traceback" not in res.stderr, res
