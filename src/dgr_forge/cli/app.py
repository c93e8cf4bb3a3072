"""The Typer application, its global options, and the one way a command runs and ends: `run`
prints the one JSON object `--json` promises, and every error leaves through `fail`, the one
error boundary `cli.main` calls.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import inspect
import io
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Annotated, Any, TextIO, get_type_hints

import typer

from dgr_forge import __version__
from dgr_forge.core.errors import BadInput, Details, ExitCode, ForgeError, OperationFailed
from dgr_forge.core.forge import Forge
from dgr_forge.core.output import Reporter
from dgr_forge.core.urls import mask_text, shown

if TYPE_CHECKING:
    from msgspec import Struct

    from dgr_forge.host.doctor import Doctor
    from dgr_forge.host.recipes import Recipe
    from dgr_forge.host.worker import WorkerSpec
    from dgr_forge.upstream.manifest import UpstreamManifest

# The command context: what a command body gets (`Env`), and `Env.session`, which takes what
# the command declares it needs, in this order:
#
# 1. the workspace lock (`lock`) and the root lock (`root_lock`), before any input is read,
#    so a waiting run sees what the run it waited for wrote;
# 2. for commands that write (`recover`), finishing or undoing what a killed export or
#    rebase left half-written (`series_journal.recover`): the only place recovery runs,
#    since loaders are pure;
# 3. the refusal during a rebase (`refuse_rebase`);
# 4. each input loaded once: the upstream manifest, recipes, host probes (as a `Doctor`),
#    the worker (with the command's override).
#
# Library functions take these loaded values; none loads or locks on its own.


@dataclass
class GlobalOptions:
    root: Path | None = None
    workspace: Path | None = None
    json: bool = False
    quiet: bool = False
    verbose: bool = False


@dataclass(frozen=True)
class Session:
    """What a command works on once its boundary is passed: inputs loaded under the lock."""

    forge: Forge
    _manifest: UpstreamManifest | None = None
    _recipes: dict[str, Recipe] | None = None
    _doctor: Doctor | None = None
    worker: WorkerSpec | None = None
    # the manifest's bytes before the root lock was waited for (None: not asked, or no
    # file): a writer compares them with what it loaded, to see another run's write
    manifest_before: bytes | None = None

    @property
    def manifest(self) -> UpstreamManifest:
        assert self._manifest is not None, "declare session(manifest=True)"
        return self._manifest

    @property
    def manifest_or_none(self) -> UpstreamManifest | None:
        return self._manifest

    @property
    def recipes(self) -> dict[str, Recipe]:
        assert self._recipes is not None, "declare session(recipes=True)"
        return self._recipes

    @property
    def doctor(self) -> Doctor:
        assert self._doctor is not None, "declare session(probes=True)"
        return self._doctor


@dataclass
class Env:
    options: GlobalOptions
    out: Reporter
    _forge: Forge | None = field(default=None, repr=False)

    @property
    def forge(self) -> Forge:
        if self._forge is None:
            self._forge = Forge.locate(self.options.root, self.options.workspace)
        return self._forge

    @contextlib.contextmanager
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
    ) -> Iterator[Session]:
        """The command boundary (the comment above `GlobalOptions`); without `lock` nothing
        waits behind a build. `manifest_may_fail`: a manifest that does not load is None, not
        an error (`rebase --continue` reports it as changed since the rebase started)."""
        from dgr_forge.core.lock import root_lock as take_root_lock
        from dgr_forge.core.lock import workspace_lock

        forge, out = self.forge, self.out
        with contextlib.ExitStack() as stack:
            if lock:
                stack.enter_context(workspace_lock(forge, out))
            before = None
            if root_lock:
                # another run holds the root lock: keep the manifest as it was before
                # waiting, so a writer can tell that run's write from its own view
                seen: list[bytes] = []

                def waiting() -> None:
                    from dgr_forge.upstream.manifest import read_raw

                    # bounded, a FIFO never waited on: the loader refuses such a file after
                    with contextlib.suppress(OSError, BadInput):
                        seen.append(read_raw(forge.upstream_manifest))

                stack.enter_context(take_root_lock(forge.root, out, on_wait=waiting))
                before = seen[0] if seen else None
            if recover:
                from dgr_forge.upstream import series_journal

                series_journal.recover(forge.root, out)
            if refuse_rebase:
                from dgr_forge.upstream.workspace import refuse_during_rebase

                refuse_during_rebase(forge)
            try:
                m = _load_manifest(forge, out, recover, manifest_may_fail) if manifest else None
                loaded = None
                if recipes:
                    from dgr_forge.certify import suite
                    from dgr_forge.host.recipes import load_all

                    loaded = load_all(forge.recipes_dir, forge.root)
                    for recipe in loaded.values():  # a hostile [certify] is exit 2 everywhere
                        suite.load(recipe)
                doctor = load_doctor(forge) if probes else None
                spec = None
                if worker:
                    from dgr_forge.host import worker as worker_mod

                    spec = worker_mod.resolve(forge, worker_override)
            except BadInput as err:  # read from a root the search upwards picked: named
                raise forge.picked(err) from err
            yield Session(forge, m, loaded, doctor, spec, before)


def load_doctor(forge: Forge) -> Doctor:
    """Host probes from toolchains/probes.toml: the one place they are read."""
    from dgr_forge.host.doctor import Doctor
    from dgr_forge.host.probes import PROBES, load_probes
    from dgr_forge.host.toolkit import LOCK_NAME, installed_site

    probes = load_probes(forge.root / PROBES, PROBES, root=forge.root)
    lock = forge.toolchains_dir / LOCK_NAME
    site = installed_site(lock)  # the pinned toolkit, first
    fenced = (forge.root, forge.workspace)
    return Doctor(probes, fenced=fenced, sites=(site,) if site else (), pinned=lock.is_file())


def _load_manifest(
    forge: Forge, out: Reporter, recover: bool, may_fail: bool
) -> UpstreamManifest | None:
    """The manifest, once. For a writer, after recovery: a series kept outside `patches/` has its
    journal next to its own directory, known only once the manifest names it (then it is finished
    and the manifest read again). A reader refuses a half-written series instead."""
    from dgr_forge.upstream import manifest, series_journal

    try:
        try:
            m = manifest.load(forge.upstream_manifest, forge.root)
            pdir = m.patches_dir
        except BadInput as err:  # perhaps the half-written series: the error says where
            where = err.details.get("patches_dir")
            if not (recover and where and series_journal.pending(Path(str(where)))):
                raise
            pdir = Path(str(where))
        if recover and series_journal.pending(pdir):
            series_journal.recover(forge.root, out, pdir=pdir)
            m = manifest.load(forge.upstream_manifest, forge.root)
    except BadInput as err:
        if not recover:
            where = err.details.get("patches_dir")
            _refuse_interrupted(forge, Path(str(where)) if where else None, err)
        if not may_fail:
            raise
        return None
    if not recover:
        _refuse_interrupted(forge, m.patches_dir, None)
    return m


def _refuse_interrupted(forge: Forge, pdir: Path | None, err: Exception | None) -> None:
    """A command that does not write never finishes a killed export's or rebase's write of patches/
    and the manifest: it says so (exit 3) rather than read a half-written series."""
    from dgr_forge.core.errors import NeedsHuman
    from dgr_forge.upstream import series_journal

    if not (journals := series_journal.interrupted(forge.root, pdir)):
        return
    raise NeedsHuman(
        "an export or rebase was interrupted while writing patches/ and the manifest "
        f"({', '.join(forge.rel(j) for j in journals)})",
        hint="run it again (`dgr-forge export`, or `dgr-forge rebase --continue` during a "
        "rebase); any command that writes, e.g. `dgr-forge patch`, finishes the write first",
        details={
            "journals": [str(j) for j in journals],
            **({"manifest_error": str(err)} if err else {}),
        },
    ) from err


app = typer.Typer(
    name="dgr-forge",
    help="Pinned, patched llama.cpp and signed backend-lane builds.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)


def group(name: str, help: str) -> typer.Typer:
    sub = typer.Typer(name=name, help=help, no_args_is_help=True)
    app.add_typer(sub, name=name)
    return sub


@dataclass(frozen=True)
class Outcome:
    """A command's result and its exit status, kept apart: the status is never a result key."""

    fields: Struct
    exit_code: int = ExitCode.OK

    @staticmethod
    def of(fields: Struct, ok: bool) -> Outcome:
        return Outcome(fields, ExitCode.OK if ok else ExitCode.FAILED)


def _version(value: bool) -> None:
    if value:
        print(f"dgr-forge {__version__}")
        raise typer.Exit(0)


@app.callback()
def _global(
    ctx: typer.Context,
    root: Annotated[
        Path | None,
        typer.Option(
            "--root",
            "-C",
            help="Forge root, -C as git, make and ninja take it (default: nearest manifests/).",
        ),
    ] = None,
    workspace: Annotated[
        Path | None, typer.Option("--workspace", help="Workspace (default: ROOT/.dgr).")
    ] = None,
    json_: Annotated[
        bool, typer.Option("--json", help="One JSON object on stdout; human text on stderr.")
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Errors only: no answer, progress or warnings.")
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Log each child command the forge runs (on stderr)."),
    ] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print version.")
    ] = False,
) -> None:
    ctx.obj = GlobalOptions(root, workspace, json_, quiet, verbose)


@dataclass
class JsonChannel:
    """Where the one --json object goes. `cli.main` points `stream` at the real stdout and
    sends everything else written to stdout (help, child processes) to stderr."""

    stream: TextIO | None = None
    emitted: bool = False


JSON_CHANNEL = JsonChannel()


def _builtin(value: Any) -> Any:  # beyond msgspec's own types: a path is its string
    if isinstance(value, PurePath):
        return str(value)
    raise TypeError(f"not encodable in --json: {type(value).__name__}")


def _plain(value: Any) -> Any:
    """`value` in JSON's types, every string through `mask_text` (keys and values: a
    child's words in a field, git_stderr, ..., hold no secret). A Struct (a result, or one
    in a failure's details) is msgspec's to turn: its declared keys, in their order;
    msgspec is imported only then (`--version --json` goes without it)."""
    if hasattr(type(value), "__struct_fields__"):
        import msgspec

        value = msgspec.to_builtins(value, enc_hook=_builtin, str_keys=True)
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value) if isinstance(value, PurePath) else value


def emit_json(command: str, code: int, fields: dict[str, Any] | Struct) -> None:
    """Print the --json object, the one place a result is serialized: the envelope, then
    the result's keys. Under `cli.main` only the first call prints (one object)."""
    if JSON_CHANNEL.stream is not None and JSON_CHANNEL.emitted:
        return
    JSON_CHANNEL.emitted = True
    envelope = {"ok": code == 0, "exit_code": code, "command": command}
    payload = {**envelope, **_plain(fields), **envelope}  # first, and never a result's
    stream = JSON_CHANNEL.stream or sys.stdout
    stream.write(json.dumps(payload, indent=2) + "\n")
    stream.flush()


Body = Callable[[Env], "Struct | Outcome"]
CommandBody = Callable[..., "Struct | Outcome"]


def run(ctx: typer.Context, command: str, body: Body) -> None:
    """Run a command body and emit its JSON when asked; never returns (errors: `fail`)."""
    from dgr_forge.core import proc

    obj = ctx.find_root().obj
    opts = obj if isinstance(obj, GlobalOptions) else GlobalOptions()
    env = Env(opts, Reporter(json_mode=opts.json, quiet=opts.quiet))
    before = proc.observe(env.out.child if opts.verbose else None)
    try:
        result = body(env)
    except KeyboardInterrupt as err:
        # Typer turns Ctrl-C into a bare exit 130 before `cli.main` could see it
        raise typer.Exit(fail(err, command, opts.json) or 130) from err
    finally:
        proc.observe(before)
    outcome = result if isinstance(result, Outcome) else Outcome(result)
    if opts.json:
        emit_json(command, outcome.exit_code, outcome.fields)
    raise typer.Exit(int(outcome.exit_code))


def command(group: typer.Typer, name: str | None = None) -> Callable[[CommandBody], CommandBody]:
    """Register `fn(env, **options)` as a command of `group`: Typer reads its options from
    its signature (less `env`), and `run` runs it."""

    def register(fn: CommandBody) -> CommandBody:
        words = name or fn.__name__.replace("_", "-")
        if group is not app:
            words = f"{group.info.name} {words}"

        def cli(ctx: typer.Context, **options: Any) -> None:
            run(ctx, words, lambda env: fn(env, **options))

        functools.update_wrapper(cli, fn)  # its name, help, module; its globals for Typer
        cli.__annotations__ = {
            k: v for k, v in fn.__annotations__.items() if k not in ("env", "return")
        }
        hints = cli.__annotations__ = get_type_hints(cli, include_extras=True)  # once, here
        params = list(inspect.signature(fn).parameters.values())[1:]
        cli.__dict__["__signature__"] = inspect.Signature(
            [
                inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                  annotation=typer.Context),
                *(p.replace(annotation=hints[p.name]) for p in params),
            ]
        )  # fmt: skip
        group.command(name)(cli)
        return fn

    return register


# --- exceptions that are not bugs: the one-line message and exit code a person reads ----
# An `OSError` names the path, with a hint (exit 2 when the path is unusable as given:
# missing, not a directory, permissions, read-only; exit 1 when the operation failed: disk
# full, I/O error); a NUL byte, another `ValueError` or a too-deep input (`RecursionError`)
# is exit 2; a network error is exit 1 (an invalid URL exit 2). DGR_DEBUG=1 (any value but
# empty or 0) adds the traceback.

# errno values that mean "this path cannot be used as given" (exit 2): the user fixes the
# path or its permissions. Anything else (ENOSPC, EIO, ...) is an operation that failed.
_PATH_ERRNOS = {
    errno.ENOENT: "check that the path exists (a directory on the way may be missing)",
    errno.ENOTDIR: "a component of the path is a file, not a directory",
    errno.EISDIR: "a directory is where a file is expected: move it away",
    errno.EACCES: "check the path's permissions, or choose another --workspace / --root",
    errno.EPERM: "check the path's permissions, or choose another --workspace / --root",
    errno.EROFS: "the file system is read-only: make it writable or choose another "
    "--workspace / --root",
    errno.ELOOP: "too many symbolic links (a link loop?): fix the links on the path",
    errno.ENAMETOOLONG: "shorten the path",
    errno.EEXIST: "something is already there: move it away",
    errno.ENXIO: "the path names a device or socket, not a file",
}
_FAILED_HINTS = {
    errno.ENOSPC: "free disk space (or raise the quota), then re-run",
    errno.EDQUOT: "free disk space (or raise the quota), then re-run",
    errno.EMFILE: "raise the open-files limit (ulimit -n), then re-run",
}


_URL_ERRORS = ("InvalidURL", "MissingSchema", "InvalidSchema", "URLRequired", "LocationParseError")


def _shown_path(name: object) -> str:
    text = os.fsdecode(name) if isinstance(name, str | bytes) else str(name)
    return repr(text) if any(ord(c) < 32 for c in text) else text


def as_forge_error(err: BaseException) -> ForgeError | None:
    """The message and exit code for an exception that is not a bug, else None."""
    module = type(err).__module__ or ""
    if module.startswith(("requests", "urllib3")):  # requests' errors are OSErrors too
        name = type(err).__name__
        text = mask_text(str(err))
        if name in _URL_ERRORS:
            return BadInput(
                f"invalid URL: {text}", hint="check the URL (and any redirect it gives)"
            )
        return OperationFailed(
            f"network error ({name}): {text}",
            hint="check the network and the server, then re-run: partial downloads resume",
        )
    if isinstance(err, OSError):
        code = err.errno or 0
        path = err.filename
        where = f"{_shown_path(path)}: " if path is not None else ""
        also = f" -> {_shown_path(err.filename2)}" if err.filename2 is not None else ""
        what = err.strerror or str(err)
        message = mask_text(f"{where}{what}{also}")  # a path may be a URL with a password
        if code in _PATH_ERRNOS and path is not None:
            return BadInput(message, hint=_PATH_ERRNOS[code], details={"path": _shown_path(path)})
        hint = _FAILED_HINTS.get(
            code, "re-run; if it persists, re-run with DGR_DEBUG=1 and report the output"
        )
        details: Details = {"path": _shown_path(path)} if path is not None else {}
        return OperationFailed(message, hint=hint, details=details)
    if isinstance(err, RecursionError):
        return BadInput(
            "an input is nested too deeply to read",
            hint="check the files and values given: no real input nests this deep",
        )
    if isinstance(err, ValueError):
        if "null byte" in (text := mask_text(str(err))) or "NUL" in text:
            return BadInput(
                "a path or value contains a NUL byte", hint="remove the NUL byte from the argument"
            )
        return BadInput(f"invalid value: {text}", hint="check the arguments and input files")
    return None


def fail(err: BaseException, command: str, as_json: bool) -> int | None:
    """The one way an error leaves the CLI: a one-line message (and hint) on stderr, with
    `--json` the failure object (`error`, `hint`, every detail), and the exit code. None
    for a bug without `--json`: the caller re-raises it (its traceback is the report)."""
    fields: dict[str, Any]
    # Click turns Ctrl-C in a command into Abort
    interrupted = any(isinstance(e, KeyboardInterrupt) for e in (err, err.__cause__))
    known = err if isinstance(err, ForgeError) else as_forge_error(err)
    if interrupted:
        code = 130
        Reporter(json_mode=as_json).error("interrupted")
        fields = {"error": "interrupted"}
    elif known is not None:
        # a full disk, a vanished or unreadable path, a bad value: one line, not a traceback
        if known is not err and os.environ.get("DGR_DEBUG", "").strip() not in ("", "0"):
            traceback.print_exc()
        code = int(known.exit_code)
        Reporter(json_mode=as_json).error(str(known))
        fields = {"error": known.message, "hint": known.hint}
        if isinstance(err, OSError):
            fields["errno"] = err.errno
        fields |= known.details
    elif hasattr(err, "show") and hasattr(err, "format_message"):
        # a usage error (bad flag, missing argument) has this shape in every Typer/Click
        # version: matched rather than a private class
        text = io.StringIO()
        err.show(file=text)
        sys.stderr.write(shown(text.getvalue()))  # Click echoes the argument: escaped
        sys.stderr.flush()
        code = int(ExitCode.BAD_INPUT)
        fields = {"error": err.format_message() or "missing command (usage printed on stderr)"}
    elif type(err).__name__ == "Abort":
        code = 130
        fields = {"error": "aborted"}
    elif not as_json:
        return None
    else:
        traceback.print_exc()  # a bug: the trace goes to stderr, the contract still holds
        code = int(ExitCode.FAILED)
        fields = {"error": f"internal error: {err!r}"}
    if as_json:
        emit_json(command, code, fields)
    return code
