"""The demo forge root (`dgr-forge demo DIR`), made once per test session.

`make_demo(base)` runs the real command offline with a fresh, empty XDG_CONFIG_HOME and
HOME (no key anywhere but the demo's own) and keeps a pristine copy of the toured root;
`DemoTour.fresh()` puts that copy back at the same path (absolute paths in the build
directory and the manifest's file:// URL stay true, so nothing rebuilds from scratch).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dgr_forge.core import proc
from dgr_forge.demo import tour

from . import zygote
from .cli import Result, run_forge
from .snapshot import copy_tree, put_back


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


class _ForkedSteps:
    """`tour.proc` while the session's tour runs: a step's `python -P -m dgr_forge ...`
    child is a fork of the zygote (support.zygote: the same child, without the ~0.2 CPU-s
    of a fresh interpreter importing the forge, seven times a tour), where the zygote
    serves that environment; anything else (the built worker it runs) is `proc`'s own."""

    def __getattr__(self, name: str) -> Any:
        return getattr(proc, name)

    def capture(self, cmd: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        forks = zygote.get()
        cwd, env = kwargs.get("cwd"), dict(kwargs.get("env") or os.environ)
        if (
            list(cmd[:4]) != [sys.executable, "-P", "-m", "dgr_forge"]
            or set(kwargs) - {"cwd", "env"}
            or forks is None
            or not forks.serves(env, cwd)
        ):
            return proc.capture(cmd, **kwargs)
        proc.starting(cmd, cwd)
        child = zygote.ForkedPopen(
            forks, list(cmd[4:]), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        with child:
            out, err = child.communicate()
        return subprocess.CompletedProcess(list(cmd), child.returncode, out, err)


@contextlib.contextmanager
def _steps_forked() -> Iterator[None]:
    saved = tour.proc
    tour.proc = _ForkedSteps()  # type: ignore[assignment]
    try:
        yield
    finally:
        tour.proc = saved


def make_demo(base: Path) -> DemoTour:
    config = base / "config"
    config.mkdir()
    # a space and a colon, as a user's "My Projects" or a dated folder has: the compiler
    # flags and git's object-directory lists must carry them whole
    root = base / "my demo:1"
    env = {"XDG_CONFIG_HOME": str(config), "HOME": str(config), "CI": ""}
    zygote.get()  # started in this process's environment, as forge_popen's (not the run's)
    with _steps_forked():
        result = run_forge("--json", "demo", str(root), cwd=base, env=env)
    pristine = base / "pristine"
    if result.code == 0:
        copy_tree(root, pristine)
    return DemoTour(root, pristine, config, result)
