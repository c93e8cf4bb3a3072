"""`toolchain install` (the pinned toolkit of the root) and `demo DIR` (the tour without
network): thin, parse, call, describe."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dgr_forge.cli.app import Env, app, command, group
from dgr_forge.cli.options import Offline
from dgr_forge.core.errors import BadInput

if TYPE_CHECKING:
    from dgr_forge.demo import Demo
    from dgr_forge.host.toolkit import InstallResult

toolchain_app = group("toolchain", "Install the toolkits the root pins.")


@command(toolchain_app, "install")
def install(
    env: Env,
    toolkit: Annotated[str, typer.Argument(help="The toolkit: cuda (toolchains/cuda.lock).")],
    offline: Offline = False,
    wheelhouse: Annotated[
        Path | None,
        typer.Option(
            "--wheelhouse", metavar="DIR", help="Install the lock's wheels from this directory."
        ),
    ] = None,
) -> InstallResult:
    """Install the CUDA toolkit the root pins, by sha256, into a prefix outside the root.

    toolchains/cuda.lock names every wheel by name, version and sha256; pip installs them
    with --require-hashes. A no-op when it is installed; a wheel whose hash does not match
    installs nothing (exit 1). The prefix is under $DGR_TOOLCHAINS_DIR (default
    ~/.local/share/dgr-forge/toolchains); `doctor` and `build` find it there."""
    from dgr_forge.host import toolkit as toolkit_mod

    if toolkit != "cuda":
        raise BadInput(
            f"unknown toolkit {toolkit[:40]!r}",
            hint="the forge installs: cuda",
            details={"argument": "toolkit"},
        )
    forge = env.forge  # reads no input of the root but the lock: no session to take
    path = forge.toolchains_dir / toolkit_mod.LOCK_NAME
    shown = forge.rel(path)
    lock = toolkit_mod.load_lock(path, shown, forge.root)
    fenced = (forge.root, forge.workspace)
    env.out.step(f"cuda {lock.version}: {len(lock.wheels)} wheels ({shown})")
    done = toolkit_mod.install(lock, shown, fenced, offline=offline, wheelhouse=wheelhouse)
    verb = "installed" if done.installed else "already installed"
    env.out.answer(f"cuda {done.version} {verb} in {done.prefix} (lock sha256 {lock.sha256})")
    return done


@command(app)
def demo(
    env: Env,
    directory: Annotated[
        str, typer.Argument(metavar="DIR", help="A new or empty directory for the demo root.")
    ],
) -> Demo:
    """A tour without network: fetch, patch, build, verify, rebase --dry-run in a new DIR.

    DIR gets a generated upstream, series and worker, and is then an ordinary forge root."""
    from dgr_forge import demo as demo_mod

    result = demo_mod.run(directory, env.out)
    env.out.answer(
        f"done: {result.root} is a forge root; try `cd {result.root} && dgr-forge status`"
    )
    return result
