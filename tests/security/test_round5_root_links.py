"""Hostile inputs, fifth round (issue 45, cause 7): a pull request's committed link out of
the root (`recipes/leak.toml -> /etc/shadow`, `/proc/self/environ`, a secret TOML of the
runner's) was parsed, and the error printed key names, values of known keys and positions
into the public CI log. Every file the root supplies is now opened with no link followed
below the root: a link is exit 2 naming it, and nothing of its target is read or shown."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from support.cli import Result, run_forge
from support.roots import REPO, pin_ci
from test_recipes import forge, recipe_text

SECRET = "hunter2-S3CRET-value"
# a TOML file of the runner's: every key the recipe decoder knows, and some it does not
SECRET_TOML = f"""\
schema = 1
[lane]
backend = "{SECRET}"
[cmake]
options = {{ GGML_NATIVE = "{SECRET}" }}
[deploy]
token = "{SECRET}"
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return pin_ci(forge(tmp_path, recipe_text()))  # ci render has an install source


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "runner" / "secrets.toml"
    path.parent.mkdir()
    path.write_text(SECRET_TOML)
    return path


def refused(res: Result, shown: str) -> None:
    assert res.code == 2, res
    assert f"{shown}: " in res.stderr and "symbolic link" in res.stderr, res
    for leak in (SECRET, "deploy", "token", "line 1", "root:"):
        assert leak not in res.stdout + res.stderr, (leak, res)
    assert "Traceback" not in res.stderr


def test_a_recipe_linked_out_of_the_root_is_never_read(root: Path, secret: Path) -> None:
    leak = root / "recipes" / "leak.toml"
    leak.symlink_to(secret)
    refused(run_forge("--root", str(root), "ci", "matrix", "--json"), "recipes/leak.toml")
    if os.access("/etc/shadow", os.R_OK):  # the attack as it was made
        leak.unlink()
        leak.symlink_to("/etc/shadow")
        refused(run_forge("--root", str(root), "ci", "matrix", "--json"), "recipes/leak.toml")
    leak.unlink()
    leak.symlink_to("/proc/self/environ")
    refused(run_forge("--root", str(root), "ci", "matrix", "--json"), "recipes/leak.toml")


def test_a_linked_directory_on_the_way_is_a_link_too(root: Path, secret: Path) -> None:
    """The variant: the file is regular, a directory above it (inside the root) is the link."""
    (secret.parent / "cpu.toml").write_text(SECRET_TOML)
    (root / "recipes" / "cpu.toml").unlink()
    (root / "recipes").rmdir()
    (root / "recipes").symlink_to(secret.parent, target_is_directory=True)
    res = run_forge("--root", str(root), "ci", "matrix", "--json")
    refused(res, "recipes/cpu.toml")
    assert "lies under recipes" in res.stderr


@pytest.mark.parametrize(
    ("rel", "args"),
    [
        ("toolchains/probes.toml", ["doctor"]),
        ("manifests/llama.cpp.toml", ["status"]),
        ("manifests/shard-worker.toml", ["lanes"]),
        ("ci/bump.toml", ["ci", "render"]),
        ("manifests/models/tiny.toml", ["artifacts", "verify", "tiny", "--dest", "models"]),
    ],
)
def test_every_toml_file_the_root_supplies_is_refused_as_a_link(
    root: Path, secret: Path, rel: str, args: list[str]
) -> None:
    """The variants: another root file, another command that reads it."""
    shutil.copy(REPO / "toolchains" / "probes.toml", root / "toolchains" / "probes.toml")
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    path.symlink_to(secret)
    (root / "models").mkdir()
    res = run_forge("--root", str(root), *args, "--json", cwd=root)
    refused(res, rel)


def test_a_root_reached_through_a_link_is_still_read(root: Path, tmp_path: Path) -> None:
    """The root itself may be a link (a checkout under /work -> /mnt/work): only links
    below it are refused."""
    link = tmp_path / "checkout"
    link.symlink_to(root, target_is_directory=True)
    res = run_forge("--root", str(link), "ci", "matrix", "--json")
    assert res.code == 0, res
