"""The forge's own `recipes/`, `toolchains/`, `cmake/`: package data in the wheel
(`dgr_forge/product/`, mapped in by pyproject.toml); in an editable install, the checkout's
root (the copy hatchling puts beside the link is never imported).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from dgr_forge.core.errors import OperationFailed

PACKAGE_DIR = "product"  # under dgr_forge/ in the wheel
DIRS = ("recipes", "toolchains", "cmake")


def source() -> Traversable | None:
    """The package data, else the checkout this package runs from, else None."""
    if (shipped := resources.files("dgr_forge").joinpath(PACKAGE_DIR)).is_dir():
        return shipped
    checkout = Path(__file__).resolve().parents[3]  # src/dgr_forge/core/ -> the checkout
    if (checkout / "pyproject.toml").is_file() and all((checkout / d).is_dir() for d in DIRS):
        return checkout
    return None


def require(what: str) -> Traversable:
    """`source()`, or exit 1 saying what needed it."""
    if (found := source()) is None:
        raise OperationFailed(
            f"{what} needs the forge's {', '.join(DIRS)}; this installation of dgr-forge has "
            f"none (no dgr_forge/{PACKAGE_DIR}/ package data, and not a checkout)",
            hint="install dgr-forge from its wheel or sdist (`pip install dgr-forge`), or a "
            "checkout with `pip install -c constraints.txt -e .`",
        )
    return found


def _copy(source: Traversable, target: Path) -> None:
    if source.is_dir():
        target.mkdir(parents=True, exist_ok=True)
        for child in sorted(source.iterdir(), key=lambda c: c.name):
            if child.name != "__pycache__":
                _copy(child, target / child.name)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        # exclusive: a new forge root gets them, nothing of someone's is overwritten
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW)
        with os.fdopen(fd, "wb") as f:
            f.write(source.read_bytes())


def copy_into(root: Path, rels: Iterable[str], what: str) -> None:
    """Copy the forge's files `rels` ("cmake", "recipes/cpu.toml") into `root`."""
    src = require(what)
    for rel in rels:
        _copy(src.joinpath(*rel.split("/")), root / rel)
