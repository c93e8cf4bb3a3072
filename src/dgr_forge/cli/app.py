"""The Typer application, its global options, and the one way a command runs.

Every command body is a plain library call wrapped by `run`, which turns a `ForgeError`
into its exit code and message, and prints the single JSON object that `--json` promises:
``{"ok": bool, "exit_code": int, "command": str, ...the command's own fields}``.
"""

from __future__ import annotations

import contextlib
import json
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer

from dgr_forge import __version__
from dgr_forge.cli.context import Needs, Session, open_session
from dgr_forge.cli.failures import as_forge_error, debug_enabled
from dgr_forge.core.errors import ExitCode, ForgeError, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.output import Reporter
from dgr_forge.core.urls import mask_text

app = typer.Typer(
    name="dgr-forge",
    help="Pinned, patched llama.cpp and signed backend-lane builds.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)


@dataclass
class GlobalOptions:
    root: Path | None = None
    workspace: Path | None = None
    json: bool = False


@dataclass
class Env:
    """What a command body gets: the output channel and (lazily) the forge it works on."""

    options: GlobalOptions
    out: Reporter
    _forge: Forge | None = field(default=None, repr=False)

    @property
    def forge(self) -> Forge:
        if self._forge is None:
            self._forge = Forge.locate(self.options.root, self.options.workspace)
        return self._forge

    def session(
        self,
        *,
        lock: bool = False,
        root_lock: bool = False,
        recover: bool = False,
        refuse_rebase: bool = False,
        manifest: bool = True,
        manifest_may_fail: bool = False,
        recipes: bool = False,
        probes: bool = False,
        worker: bool = False,
        worker_override: Path | None = None,
    ) -> contextlib.AbstractContextManager[Session]:
        """The command boundary (`cli/context`): locks first, recovery for commands that
        write, the rebase refusal, then each declared input loaded once and handed down.
        Without `lock` (read-only commands such as `status`) nothing waits behind a build."""
        needs = Needs(
            lock=lock,
            root_lock=root_lock,
            recover=recover,
            refuse_rebase=refuse_rebase,
            manifest=manifest,
            manifest_may_fail=manifest_may_fail,
            recipes=recipes,
            probes=probes,
            worker=worker,
            worker_override=worker_override,
        )
        return open_session(self.forge, self.out, needs)


def _version(value: bool) -> None:
    if value:
        print(f"dgr-forge {__version__}")
        raise typer.Exit(0)


@app.callback()
def _global(
    ctx: typer.Context,
    root: Annotated[
        Path | None, typer.Option("--root", help="Forge root (default: nearest manifests/).")
    ] = None,
    workspace: Annotated[
        Path | None, typer.Option("--workspace", help="Workspace (default: ROOT/.dgr).")
    ] = None,
    json_: Annotated[
        bool, typer.Option("--json", help="One JSON object on stdout; human text on stderr.")
    ] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print version.")
    ] = False,
) -> None:
    ctx.obj = GlobalOptions(root=root, workspace=workspace, json=json_)


def options(ctx: typer.Context) -> GlobalOptions:
    obj = ctx.find_root().obj
    return obj if isinstance(obj, GlobalOptions) else GlobalOptions()


@dataclass
class JsonChannel:
    """Where the one --json object goes. `cli.main` points `stream` at the real stdout and
    sends everything else written to stdout (help, child processes) to stderr."""

    stream: TextIO | None = None
    emitted: bool = False


JSON_CHANNEL = JsonChannel()


def _masked(value: Any) -> Any:
    """Every string in a --json payload through `mask_text` (keys and values)."""
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, dict):
        return {_masked(k): _masked(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_masked(v) for v in value]
    return value


def emit_json(command: str, code: int, fields: dict[str, Any]) -> None:
    """Print the --json object; under `cli.main` only the first call prints (one object)."""
    if JSON_CHANNEL.stream is not None and JSON_CHANNEL.emitted:
        return
    JSON_CHANNEL.emitted = True
    payload = {**fields, "ok": code == 0, "exit_code": code, "command": command}
    payload = {key: payload[key] for key in ("ok", "exit_code", "command")} | payload
    payload = _masked(payload)  # a child's words in a field (git_stderr, ...) hold no secret
    stream = JSON_CHANNEL.stream or sys.stdout
    stream.write(json.dumps(payload, indent=2, sort_keys=False, default=str) + "\n")
    stream.flush()


def run(ctx: typer.Context, command: str, body: Callable[[Env], dict[str, Any] | None]) -> None:
    """Run a command body; map errors to exit codes; emit JSON when asked. Never returns."""
    opts = options(ctx)
    env = Env(options=opts, out=Reporter(json_mode=opts.json))
    code: int = ExitCode.OK
    fields: dict[str, Any] = {}
    try:
        fields = body(env) or {}
        code = int(fields.pop("exit_code", ExitCode.OK))
    except ForgeError as err:
        code = int(err.exit_code)
        env.out.error(str(err))
        fields = {"error": err.message, "hint": err.hint, **err.details}
    except KeyboardInterrupt:
        code = 130
        env.out.error("interrupted")
        fields = {"error": "interrupted"}
    except OSError as err:
        # a full disk, a vanished or unreadable path: one line naming it, not a traceback
        failure = as_forge_error(err) or OperationFailed(str(err))
        code = int(failure.exit_code)
        if debug_enabled():
            traceback.print_exc()
        env.out.error(str(failure))
        fields = {"error": failure.message, "hint": failure.hint, "errno": err.errno}
        fields |= failure.details
    if opts.json:
        emit_json(command, code, fields)
    raise typer.Exit(code)
