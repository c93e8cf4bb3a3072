"""Exit codes and the one exception type every command raises (DESIGN.md, "Commands")."""

# No `from __future__ import annotations` here: as strings, Details' hundred annotations
# would each be compiled into a typing.ForwardRef when the class is made (~1.7 ms of every
# start, --version too); evaluated at once, they cost less.
from enum import IntEnum
from typing import Annotated, TypedDict


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # the operation failed: build failed, verification failed
    BAD_INPUT = 2  # bad manifest, bad flag, missing file, lane not buildable here
    NEEDS_HUMAN = 3  # patch/rebase conflict, dirty workspace


class Details(TypedDict, total=False):
    """An error's machine-readable fields for `--json` (the failure envelope's keys), each
    with the meaning docs/json.md shows. Declared here, once: mypy refuses a `details`
    key that is not, and `cli.results` generates the failure schema from this class."""

    actual_tree: Annotated[object, "the tree found"]
    argument: Annotated[object, "the argument at fault"]
    artifacts: Annotated[object, "the artifacts involved"]
    base: Annotated[object, "the base commit"]
    cache: Annotated[object, "the `--cache` choice"]
    cache_mode: Annotated[object, "the `--cache-mode` choice"]
    actual_sha256: Annotated[object, "the sha256 found on disk"]
    cause: Annotated[
        object,
        "`fetch`, `rebase`, `bump`: why a transfer failed: `policy` (the forge's transport "
        "policy stopped git, e.g. an insteadOf rule onto a local path), `unreachable`, "
        "`server-abort` (the server died reading its own objects), `refused`, `other`",
    ]
    expected_sha256: Annotated[object, "the sha256 the manifest names"]
    changed: Annotated[object, "`build`: input files or programs changed during the build"]
    changes: Annotated[object, "the local changes (e.g. in the upstream or git-worker tree)"]
    chosen: Annotated[object, "`build`: the compiler launcher the forge chose"]
    backend: Annotated[object, "`certify`: the lane's backend whose hardware is not on this host"]
    bad: Annotated[object, "`certify`: the model files that do not verify"]
    code_check: Annotated[object, "`build`: the launchers found in the code-check rules"]
    compile: Annotated[object, "`build`: the launchers found in the compile rules"]
    commit: Annotated[object, "the commit at fault, e.g. the one a replay stopped on"]
    conflicts: Annotated[object, "the conflicts"]
    current: Annotated[object, "`ci render --check`: false"]
    dest: Annotated[object, "the `--dest` directory"]
    device: Annotated[object, "`certify`: the `--device` at fault"]
    diff: Annotated[object, "a unified diff"]
    dir: Annotated[object, "the directory at fault"]
    dirty: Annotated[object, "a worker checkout's own edits"]
    drift: Annotated[
        object,
        "a stale export: `added`, `changed`, `removed` (patches changed on disk since this "
        "workspace was patched), `pin_moved`",
    ]
    edited: Annotated[object, "the edited files"]
    errno: Annotated[object, "the OS error number of a failed file operation"]
    expected: Annotated[object, "what was expected"]
    expected_tree: Annotated[object, "the tree expected"]
    failed_steps: Annotated[object, "`certify`: the steps that failed (nothing was written)"]
    failures: Annotated[object, "what failed"]
    file: Annotated[object, "the file at fault (a manifest, recipe, model manifest)"]
    files: Annotated[object, "the files involved (e.g. conflicted)"]
    free_bytes: Annotated[object, "free space at the destination"]
    git_args: Annotated[object, "the git command that failed"]
    git_stderr: Annotated[object, "what git said"]
    header: Annotated[object, "the GGUF header at fault"]
    holder: Annotated[object, "who holds a busy lock"]
    journals: Annotated[object, "a killed export's or rebase's pending writes (exit 3)"]
    key: Annotated[object, "the key at fault (manifest key, or signing key)"]
    lane: Annotated[object, "the lane at fault"]
    lanes: Annotated[
        object,
        "the lanes at fault: a list of `doctor` lane rows (`ci render --check`: the lanes "
        "rendered)",
    ]
    link: Annotated[object, "`build`: the launchers found in the link rules"]
    line: Annotated[object, "the line at fault (e.g. a malformed patch header)"]
    local_changes: Annotated[object, "local changes a command would lose"]
    local_commits: Annotated[object, "your commits a command would lose"]
    lock: Annotated[object, "a busy lock's path"]
    log: Annotated[object, "the log to read"]
    manifest_error: Annotated[
        object, "an interrupted write's refusal: why the manifest did not read"
    ]
    manifest: Annotated[object, "the manifest at fault"]
    mirror: Annotated[object, "the mirror at fault (masked)"]
    mode: Annotated[object, "a signing key's mode when readable by others"]
    model: Annotated[object, "`certify`: the model manifest at fault"]
    needed_bytes: Annotated[object, "space needed"]
    next_commands: Annotated[object, "the commands that continue"]
    operation: Annotated[object, "the operation in progress"]
    option: Annotated[object, "the option at fault (e.g. `--key`)"]
    patch: Annotated[object, "the patch at fault"]
    patches_dir: Annotated[object, "a patches directory that does not match the series"]
    path: Annotated[object, "the path at fault (also an unusable path or a failed file operation)"]
    phase: Annotated[object, "the phase an operation stopped in"]
    pin: Annotated[object, "the pin"]
    probe: Annotated[object, "the probe at fault"]
    provider: Annotated[object, "the CI provider"]
    report: Annotated[object, "the report at fault"]
    install: Annotated[object, "`ci render`: how the jobs install dgr-forge"]
    install_args: Annotated[object, "`ci render`: pip install's arguments"]
    constraints: Annotated[object, "`ci render`: the constraints file"]
    requirements: Annotated[object, "`ci render`: the requirements file"]
    requirements_exist: Annotated[object, "`ci render`: the forge root has it"]
    tool_source: Annotated[object, "`ci render`: the `--tool-source` requirement"]
    ref: Annotated[object, "a git ref that holds commits (e.g. your commits before a replay)"]
    resolved: Annotated[object, "what a path resolved to"]
    rollback_error: Annotated[object, "what failed while rolling back"]
    server_said: Annotated[object, "`fetch`: the server's own error lines (masked)"]
    scheduler: Annotated[object, "the sccache-dist scheduler (masked)"]
    setting: Annotated[object, "the setting at fault"]
    sha256: Annotated[object, "`ci render`: of the rendering"]
    split_problems: Annotated[object, "GGUF split problems, per file"]
    src_dir: Annotated[object, "the workspace's checkout"]
    stale: Annotated[object, "what is stale"]
    state: Annotated[object, "the state found"]
    status: Annotated[object, "the status found"]
    step: Annotated[
        object, "`demo`: the step that did not end as expected; `certify`: the certification step"
    ]
    steps: Annotated[
        object,
        "`certify`: every step as run (the shape of a certification's `steps`), when one failed",
    ]
    step_exit_code: Annotated[object, "`demo`: its exit code"]
    subject: Annotated[object, "the commit's subject"]
    symlink: Annotated[object, "a symbolic link in the way"]
    target: Annotated[object, "the target"]
    text: Annotated[object, "the text at fault (e.g. a message line `git am` would cut)"]
    tree: Annotated[object, "the tree"]
    undeclared: Annotated[object, "CMake options upstream no longer declares"]
    unmerged: Annotated[object, "unmerged files"]
    unstaged: Annotated[object, "unstaged files"]
    unused: Annotated[object, "unused entries"]
    upstream_commits: Annotated[object, "upstream commits that touched a conflicted patch's files"]
    url: Annotated[object, "the URL at fault (masked)"]
    value: Annotated[object, "the bad value"]
    variable: Annotated[
        object,
        "the bad environment variable (with `expected` for a key variable that is neither PEM"
        " nor a key file, whose value is never shown)",
    ]
    worker: Annotated[object, "the worker checkout at fault"]
    workspace: Annotated[object, "the workspace"]


class ForgeError(Exception):
    """A refusal or failure the user should read: what, where, and how to fix it."""

    exit_code: ExitCode = ExitCode.FAILED

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        exit_code: ExitCode | None = None,
        details: "Details | None" = None,  # a string, as PEP 563 makes it elsewhere
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code
        # machine-readable extras for --json (files, patch names, ...)
        self.details: Details = details or {}

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  fix: {self.hint}"


class OperationFailed(ForgeError):
    exit_code = ExitCode.FAILED


class BadInput(ForgeError):
    exit_code = ExitCode.BAD_INPUT


class NeedsHuman(ForgeError):
    exit_code = ExitCode.NEEDS_HUMAN
