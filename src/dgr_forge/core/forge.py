"""The forge root (the in-repo inputs) and the workspace (ignored scratch space)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dgr_forge.core.errors import BadInput

UPSTREAM_MANIFEST = "manifests/llama.cpp.toml"


class _Under:
    """A fixed path under the forge root or the workspace (`Forge.recipes_dir`, ...)."""

    def __init__(self, base: str, rel: str) -> None:
        self.base, self.rel = base, rel

    def __get__(self, forge: Forge, owner: type[Forge] | None = None) -> Path:
        return Path(getattr(forge, self.base)) / self.rel


@dataclass(frozen=True)
class Forge:
    """The forge root a command works on and its workspace."""

    root: Path
    workspace: Path
    # where the search for a manifests/ directory started when neither --root nor
    # DGR_ROOT named the root (None: named): an error in its inputs says so
    found_from: Path | None = None

    @classmethod
    def locate(cls, root: Path | None = None, workspace: Path | None = None) -> Forge:
        """Resolve --root/DGR_ROOT (else search upwards) and --workspace/DGR_WORKSPACE."""
        cwd = Path.cwd()
        found_from: Path | None = None
        if root is None and os.environ.get("DGR_ROOT"):
            root = Path(os.environ["DGR_ROOT"])
        if root is not None:
            root = (cwd / root).resolve()
            if not (root / "manifests").is_dir():
                raise BadInput(
                    f"{root}: not a forge root (no manifests/ directory)",
                    hint="pass --root pointing at the checkout that holds manifests/, "
                    "patches/ and recipes/",
                )
        else:
            up = cwd.resolve()
            found = next((c for c in (up, *up.parents) if (c / "manifests").is_dir()), None)
            if found is None:
                raise BadInput(
                    f"no forge root found from {cwd} upwards (looked for a manifests/ directory)",
                    hint="run inside a dgr-forge checkout, or pass --root DIR / set DGR_ROOT",
                )
            root, found_from = found, cwd.resolve()
        if workspace is None and os.environ.get("DGR_WORKSPACE"):
            workspace = Path(os.environ["DGR_WORKSPACE"])
        workspace = (cwd / workspace).resolve() if workspace else root / ".dgr"
        return cls(root=root, workspace=workspace, found_from=found_from)

    def picked(self, err: BadInput) -> BadInput:
        """`err` naming the root when the search upwards picked it (visibly, if the wrong one)."""
        if self.found_from is None:
            return err
        how = (
            f"in the forge root {self.root}: the working directory, picked because it has "
            "a manifests/ directory"
            if self.found_from == self.root
            else f"in the forge root {self.root}: the nearest directory with a manifests/ "
            f"directory, found by walking up from {self.found_from}"
        )
        import copy

        named = copy.copy(err)  # the same class, exit code and details
        named.message = f"{err.message} ({how})"
        named.args = (named.message,)
        hint = err.hint.rstrip(".") + "; " if err.hint else ""
        named.hint = f"{hint}--root DIR or DGR_ROOT chooses another root"
        return named

    upstream_manifest = _Under("root", UPSTREAM_MANIFEST)
    recipes_dir = _Under("root", "recipes")
    toolchains_dir = _Under("root", "toolchains")
    cmake_dir = _Under("root", "cmake")
    reports_dir = _Under("workspace", "reports")
    logs_dir = _Under("workspace", "logs")
    state_file = _Under("workspace", "state.json")
    tmp_dir = _Under("workspace", "tmp")  # every command's scratch; the next run cleans it
    lock_file = _Under("workspace", "lock")
    rebase_state = _Under("workspace", "rebase.json")  # while a rebase is stopped or interrupted

    def src_dir(self, name: str) -> Path:
        return self.workspace / "src" / name

    def build_dir(self, lane: str) -> Path:
        return self.workspace / "build" / lane

    def rel(self, path: Path) -> str:
        try:
            return str(path.resolve().relative_to(self.root))
        except ValueError:
            return str(path)
