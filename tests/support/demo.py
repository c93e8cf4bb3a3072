"""The demo forge root (`dgr-forge demo DIR`), made once per test session.

`make_demo(base)` runs the real command offline with a fresh, empty XDG_CONFIG_HOME and
HOME (no key anywhere but the demo's own) and keeps a pristine copy of the toured root;
`DemoTour.fresh()` puts that copy back at the same path (absolute paths in the build
directory and the manifest's file:// URL stay true, so nothing rebuilds from scratch).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from .cli import Result, run_forge
from .snapshot import put_back


@dataclass(frozen=True)
class DemoTour:
    root: Path  # where the demo lives (restored by fresh())
    pristine: Path  # the root right after the tour
    config: Path  # the XDG_CONFIG_HOME and HOME the tour ran with (left empty)
    result: Result

    def env(self) -> dict[str, str]:
        return {"XDG_CONFIG_HOME": str(self.config), "HOME": str(self.config)}

    def fresh(self) -> Path:
        """The root as the tour left it, at the same path; what an earlier user of the
        root wrote beside it (another workspace, `../nocache`) is removed too."""
        return put_back(self.pristine, self.root, keep=(self.config,))


def make_demo(base: Path) -> DemoTour:
    config = base / "config"
    config.mkdir()
    # a space and a colon, as a user's "My Projects" or a dated folder has: the compiler
    # flags and git's object-directory lists must carry them whole
    root = base / "my demo:1"
    env = {"XDG_CONFIG_HOME": str(config), "HOME": str(config), "CI": ""}
    result = run_forge("--json", "demo", str(root), cwd=base, env=env)
    pristine = base / "pristine"
    if result.code == 0:
        shutil.copytree(root, pristine, symlinks=True)
    return DemoTour(root, pristine, config, result)
