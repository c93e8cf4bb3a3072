"""The build step that puts the forge's recipes/, toolchains/ and cmake/ into the wheel.

The repository keeps one copy of each at its root (a forge root's layout); building the
wheel copies them to `dgr_forge/product/` as package data (`dgr_forge.core.product` finds
them there). Everything else is declared in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
PRODUCT = ("recipes", "toolchains", "cmake")  # = dgr_forge.core.product.DIRS


class BuildPyWithProduct(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads them from the checkout itself
        dest = Path(self.build_lib) / "dgr_forge" / "product"
        for name in PRODUCT:
            if not (HERE / name).is_dir():
                raise SystemExit(f"{HERE / name}: missing; the wheel cannot be built without it")
            shutil.rmtree(dest / name, ignore_errors=True)
            shutil.copytree(
                HERE / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )


setup(cmdclass={"build_py": BuildPyWithProduct})
