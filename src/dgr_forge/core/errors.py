"""Exit codes and the one exception type every command raises (docs/design.md, "Commands"), and
`env_number`: a number read from an environment variable, finite, in range, or exit 2 naming
the variable (a plain ``float()`` turns ``DGR_LOCK_TIMEOUT=nan`` into "wait forever": NaN
compares false with everything)."""

# No `from __future__ import annotations` here: as strings, Details' hundred annotations
# would each be compiled into a typing.ForwardRef when the class is made (~1.7 ms of every
# start, --version too); evaluated at once, they cost less.
import math
import os
from enum import IntEnum
from typing import Annotated, Any, TypedDict, overload


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # the operation failed: build failed, verification failed
    BAD_INPUT = 2  # bad manifest, bad flag, missing file, lane not buildable here
    NEEDS_HUMAN = 3  # patch/rebase conflict, dirty workspace


class Details(TypedDict, total=False):
    """An error's machine-readable fields for `--json` (the failure envelope's keys), each
    with its type and the meaning docs/json.md shows. Declared once (one meaning wherever it
    is raised): mypy refuses an undeclared key or a value of another type, and `cli.schemas`
    generates the failure schema from it. Only `expected`, `value` and `drift` are untyped."""

    actual_tree: Annotated[str | None, "the tree found"]
    argument: Annotated[str | None, "the argument at fault"]
    artifacts: Annotated[list[Any], "the artifacts involved"]
    base: Annotated[str | None, "the base commit"]
    cache: Annotated[str | None, "the `--cache` choice"]
    cache_mode: Annotated[str | None, "the `--cache-mode` choice"]
    actual_sha256: Annotated[str | None, "the sha256 found on disk"]
    cause: Annotated[
        str,
        "`fetch`, `rebase`, `bump`: why a transfer failed: `policy` (the forge's transport "
        "policy stopped git, e.g. an insteadOf rule onto a local path), `unreachable`, "
        "`server-abort` (the server died reading its own objects), `refused`, `other`",
    ]
    expected_sha256: Annotated[str | None, "the sha256 the manifest names"]
    changed: Annotated[list[Any], "`build`: input files or programs changed during the build"]
    changes: Annotated[list[Any], "the local changes (e.g. in the upstream or git-worker tree)"]
    chosen: Annotated[str | None, "`build`: the compiler launcher the forge chose"]
    backend: Annotated[
        str | None, "`certify`: the lane's backend whose hardware is not on this host"
    ]
    bad: Annotated[list[Any], "`certify`: the model files that do not verify"]
    code_check: Annotated[list[Any], "`build`: the launchers found in the code-check rules"]
    compile: Annotated[list[Any], "`build`: the launchers found in the compile rules"]
    commit: Annotated[str | None, "the commit at fault, e.g. the one a replay stopped on"]
    conflicts: Annotated[list[Any], "the conflicts"]
    current: Annotated[bool, "`ci render --check`: false"]
    dest: Annotated[str | None, "the `--dest` directory"]
    device: Annotated[str | None, "`certify`: the `--device` at fault"]
    diff: Annotated[str | None, "a unified diff"]
    dir: Annotated[str | None, "the directory at fault"]
    dirty: Annotated[list[Any], "a worker checkout's own edits"]
    drift: Annotated[
        Any,
        "a stale export: `added`, `changed`, `removed` (patches changed on disk since this "
        "workspace was patched), `pin_moved`",
    ]
    edited: Annotated[list[Any], "the edited files"]
    errno: Annotated[int, "the OS error number of a failed file operation"]
    expected: Annotated[Any, "what was expected"]
    expected_tree: Annotated[str | None, "the tree expected"]
    failed_steps: Annotated[list[Any], "`certify`: the steps that failed (nothing was written)"]
    failures: Annotated[list[Any], "what failed"]
    file: Annotated[str | None, "the file at fault (a manifest, recipe, model manifest)"]
    files: Annotated[list[Any], "the files involved (e.g. conflicted)"]
    free_bytes: Annotated[int, "free space at the destination"]
    git_args: Annotated[list[Any], "the git command that failed"]
    git_stderr: Annotated[str | None, "what git said"]
    header: Annotated[str | None, "the GGUF header at fault"]
    holder: Annotated[str | None, "who holds a busy lock"]
    journals: Annotated[list[Any], "a killed export's or rebase's pending writes (exit 3)"]
    key: Annotated[str | None, "the key at fault (manifest key, or signing key)"]
    lane: Annotated[str | None, "the lane at fault"]
    lanes: Annotated[
        list[Any],
        "the lanes at fault: a list of `doctor` lane rows (`ci render --check`: the lanes "
        "rendered)",
    ]
    link: Annotated[list[Any], "`build`: the launchers found in the link rules"]
    line: Annotated[int | str, "the line at fault (e.g. a malformed patch header)"]
    local_changes: Annotated[list[Any], "local changes a command would lose"]
    local_commits: Annotated[list[Any], "your commits a command would lose"]
    lock: Annotated[str | None, "a busy lock's path"]
    log: Annotated[str | None, "the log to read"]
    manifest_error: Annotated[str, "an interrupted write's refusal: why the manifest did not read"]
    manifest: Annotated[str | None, "the manifest at fault"]
    mirror: Annotated[str | None, "the mirror at fault (masked)"]
    mode: Annotated[str, "a signing key's mode when readable by others"]
    model: Annotated[str | None, "`certify`: the model manifest at fault"]
    needed_bytes: Annotated[int, "space needed"]
    next_commands: Annotated[list[Any], "the commands that continue"]
    operation: Annotated[str | None, "the operation in progress"]
    option: Annotated[str | None, "the option at fault (e.g. `--key`)"]
    patch: Annotated[str | None, "the patch at fault"]
    patches_dir: Annotated[str | None, "a patches directory that does not match the series"]
    path: Annotated[
        str | None, "the path at fault (also an unusable path or a failed file operation)"
    ]
    phase: Annotated[str | None, "the phase an operation stopped in"]
    pin: Annotated[str | None, "the pin"]
    probe: Annotated[str | None, "the probe at fault"]
    provider: Annotated[str | None, "the CI provider"]
    report: Annotated[str | None, "the report at fault"]
    install: Annotated[str | None, "`ci render`: how the jobs install dgr-forge"]
    install_args: Annotated[str | None, "`ci render`: pip install's arguments"]
    constraints: Annotated[str | None, "`ci render`: the constraints file"]
    requirements: Annotated[str | None, "`ci render`: the requirements file"]
    requirements_exist: Annotated[bool, "`ci render`: the forge root has it"]
    tool_source: Annotated[str | None, "`ci render`: the `--tool-source` requirement"]
    ref: Annotated[str | None, "a git ref that holds commits (e.g. your commits before a replay)"]
    resolved: Annotated[str | None, "what a path resolved to"]
    rollback_error: Annotated[str | None, "what failed while rolling back"]
    server_said: Annotated[str, "`fetch`: the server's own error lines (masked)"]
    scheduler: Annotated[str | None, "the sccache-dist scheduler (masked)"]
    setting: Annotated[str | None, "the setting at fault"]
    sha256: Annotated[str | None, "`ci render`: of the rendering"]
    split_problems: Annotated[dict[str, list[str]], "GGUF split problems, per file"]
    src_dir: Annotated[str | None, "the workspace's checkout"]
    stale: Annotated[list[Any], "what is stale"]
    state: Annotated[str | None, "the state found"]
    status: Annotated[str | None, "the status found"]
    step: Annotated[
        str, "`demo`: the step that did not end as expected; `certify`: the certification step"
    ]
    steps: Annotated[
        list[Any],
        "`certify`: every step as run (the shape of a certification's `steps`), when one failed",
    ]
    step_exit_code: Annotated[int | None, "`demo`: its exit code"]
    subject: Annotated[str | None, "the commit's subject"]
    symlink: Annotated[str | None, "a symbolic link in the way"]
    target: Annotated[str | None, "the target"]
    text: Annotated[str | None, "the text at fault (e.g. a message line `git am` would cut)"]
    tree: Annotated[str | None, "the tree"]
    undeclared: Annotated[list[Any], "CMake options upstream no longer declares"]
    unmerged: Annotated[list[Any], "unmerged files"]
    unstaged: Annotated[list[Any], "unstaged files"]
    unused: Annotated[list[Any], "unused entries"]
    upstream_commits: Annotated[
        list[Any] | dict[str, list[Any]],
        "upstream commits that touched a conflicted patch's files (a rebase's conflict: by file)",
    ]
    url: Annotated[str | None, "the URL at fault (masked)"]
    value: Annotated[Any, "the bad value"]
    variable: Annotated[
        str,
        "the bad environment variable (with `expected` for a key variable that is neither PEM"
        " nor a key file, whose value is never shown)",
    ]
    worker: Annotated[str | None, "the worker checkout at fault"]
    workspace: Annotated[str | None, "the workspace"]


class ForgeError(Exception):
    """A refusal or failure the user should read: what, where, and how to fix it."""

    exit_code: ExitCode = ExitCode.FAILED

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        details: "Details | None" = None,  # a string, as PEP 563 makes it elsewhere
    ) -> None:
        super().__init__(message)
        self.message, self.hint = message, hint
        self.details: Details = details or {}

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  fix: {self.hint}"


class OperationFailed(ForgeError):
    exit_code = ExitCode.FAILED


class BadInput(ForgeError):
    exit_code = ExitCode.BAD_INPUT


class NeedsHuman(ForgeError):
    exit_code = ExitCode.NEEDS_HUMAN


MAX_TEXT = 64  # a number is short; anything longer is not one (and is not echoed whole)


@overload
def env_number(name: str, default: int, minimum: int, maximum: int) -> int: ...
@overload
def env_number(name: str, default: float, minimum: float, maximum: float) -> float: ...


def env_number(name: str, default: float, minimum: float, maximum: float) -> float:
    """`$name` in [minimum, maximum]; `default` when unset (an int `default`: a whole number)."""
    if not (raw := os.environ.get(name, "").strip()):
        return default
    whole = isinstance(default, int)
    kind = "a whole number" if whole else "a number"
    shown = raw if len(raw) <= MAX_TEXT else raw[:MAX_TEXT] + "..."
    hint = f"set {name} to {kind} from {minimum} to {maximum}, or unset it (default {default})"
    try:
        value: float = int(raw) if whole else float(raw)
    except ValueError:
        value = math.nan
    finite = isinstance(value, int) or math.isfinite(value)  # (a huge int is no float)
    if not finite or not minimum <= value <= maximum:
        raise BadInput(
            f"{name}={shown!r} is not {kind} from {minimum} to {maximum}",
            hint=hint,
            details={"variable": name, "value": shown},
        )
    return value
