"""Running the real CLI: in this process by default, in a child process where it must be.

`run_forge` calls `dgr_forge.cli.main.main` in-process: no interpreter start per call (the
suite's main cost), and a test can be stepped through into the command. What a user sees
is kept exact: file descriptors 0, 1 and 2 are pointed at /dev/null and two temporary
files for the call (so output of child processes and the `--json` fd-1 redirection of
`cli.main` land where they would), `os.environ` is exactly `forge_env(env)` and the cwd is
`cwd` for its duration, and the module-level caches a fresh process would not have (the
fault hook's parsed spec, functools caches) are cleared around it. Python-level writes of
the test's own other threads (a test server's handlers) do not go into the result.

A child process is used (`subprocess=True`, or chosen automatically) where in-process
cannot be the same thing: `DGR_FAULT` with a `kill` or `pause` action (it would kill or
stall the test run itself), the rebase pause hook, and while this process holds a
workspace lock (the lock is re-entrant in one process, so an in-process run would not
wait for it). Such a child is forked from a zygote that imported the forge once
(support.zygote), not a fresh interpreter, unless FORGETEST_EXEC=1. Tests that send
signals or read a live process use `forge_cmd`/`forge_env` with `subprocess.Popen`.
"""

from __future__ import annotations

import io
import json
import os
import subprocess as _sp
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TextIO
from weakref import WeakSet

from .git import GIT_ENV

CACHE_DIR_ENV = "FORGETEST_CACHE_DIR"
TOOLCHAINS_ENV = "FORGETEST_TOOLCHAINS_DIR"  # the run's empty toolkit home (conftest)
SRC = Path(__file__).resolve().parent.parent.parent / "src"


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)

    def __repr__(self) -> str:  # shown by pytest on failure
        return f"Result(code={self.code})\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def forge_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a CLI run: this one without DGR_*, plus git identity, NO_COLOR."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DGR_")}
    # pytest's marker of the running test and phase: no forge child reads it, and without
    # it a worker's CLI runs share one environment (host.doctor keeps a tool's version
    # read per program and environment, so an unchanged cmake is asked once a worker)
    env.pop("PYTEST_CURRENT_TEST", None)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    env["NO_COLOR"] = "1"
    env.update(GIT_ENV)
    if os.environ.get(CACHE_DIR_ENV):
        # one forge cache directory for the whole run, as on a build machine: the compilers'
        # stamps are hashed once, not once per test workspace (a test names its own, or
        # "" for the workspace's)
        env["DGR_CACHE_DIR"] = os.environ[CACHE_DIR_ENV]
    if os.environ.get(TOOLCHAINS_ENV):  # never the user's `toolchain install` prefix
        env["DGR_TOOLCHAINS_DIR"] = os.environ[TOOLCHAINS_ENV]
    env.update(extra or {})
    return env


def forge_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "dgr_forge", *args]


# what a fork of the zygote can do as Popen does (preexec_fn, pass_fds, rlimits: exec)
_FORKABLE = {"cwd", "env", "stdin", "stdout", "stderr", "text", "start_new_session", "umask"}


def forge_popen(*args: str, **popen: Any) -> _sp.Popen[Any]:
    """`subprocess.Popen(forge_cmd(*args), **popen)`: a fork of this process's zygote
    (support.zygote) where it is the same child, else a fresh interpreter."""
    from . import zygote

    env = popen.get("env")
    forks = zygote.get() if set(popen) <= _FORKABLE else None
    if forks is not None and forks.serves(
        dict(os.environ if env is None else env), popen.get("cwd")
    ):
        return zygote.ForkedPopen(forks, list(args), **popen)
    return _sp.Popen(forge_cmd(*args), **popen)


def run_python(code: str) -> _sp.CompletedProcess[str]:
    """`python -c CODE` in a fresh interpreter with the CLI's environment and src/ first on
    the path: what a start imports, measured in a process of its own."""
    return _sp.run(
        [sys.executable, "-c", code],
        env=forge_env({"PYTHONPATH": str(SRC)}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def run_forge(
    *args: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    subprocess: bool | None = None,
) -> Result:
    """`dgr-forge ARGS` with stdin on /dev/null; its exit code, stdout and stderr.

    In-process unless `subprocess` is true, or None and `needs_subprocess(env)` says so
    (FORGETEST_SUBPROCESS=1 in the test run's environment: always a child process).
    `timeout` bounds a child process; in-process runs are bounded by pytest-timeout."""
    if subprocess is None:
        subprocess = needs_subprocess(env) or os.environ.get("FORGETEST_SUBPROCESS") == "1"
    if subprocess:
        return run_forge_subprocess(*args, cwd=cwd, env=env, timeout=timeout)
    return run_forge_in_process(*args, cwd=cwd, env=env)


def run_forge_subprocess(
    *args: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 300,
) -> Result:
    """`python -m dgr_forge ARGS` in a child process (signals, kills, exact process state),
    started by `forge_popen` and waited for as `subprocess.run` waits (killed at `timeout`)."""
    with forge_popen(
        *args, cwd=cwd, env=forge_env(env), stdin=_sp.DEVNULL, stdout=_sp.PIPE,
        stderr=_sp.PIPE, text=True,
    ) as proc:  # fmt: skip
        try:
            out, err = proc.communicate(timeout=timeout)
        except _sp.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    return Result(proc.returncode, out, err)


_CHILD_ONLY_ACTIONS = ("kill", "pause")
_ACTIONS = ("kill", "enospc", "fail", "pause")


def needs_subprocess(env: dict[str, str] | None) -> bool:
    """Whether a run with `env` must be a child process (see the module doc)."""
    extra = env or {}
    if extra.get("DGR_TEST_PAUSE_AT"):
        return True
    fault = extra.get("DGR_FAULT", "")
    for item in fault.split(","):
        item = item.strip().rpartition("@")[0] or item.strip()
        if not item:
            continue
        head, sep, action = item.rpartition(":")
        if not (sep and head and action in _ACTIONS):
            action = "kill"  # the hook's default
        if action in _CHILD_ONLY_ACTIONS:
            return True
    return bool(_held_locks())


def _held_locks() -> dict[Any, Any]:
    lock = sys.modules.get("dgr_forge.core.lock")
    held = getattr(lock, "_held", None)
    return held if isinstance(held, dict) else {}


def run_forge_in_process(
    *args: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> Result:
    """`dgr_forge.cli.main.main(ARGS)` in this process, isolated as a child would be."""
    from dgr_forge.cli import main as cli_main

    with (
        tempfile.TemporaryFile() as out_file,
        tempfile.TemporaryFile() as err_file,
        _process_state(forge_env(env), cwd),
        _built_commands_reused(),
    ):
        with _std_fds(out_file, err_file):
            code = _call(cli_main.main, list(args))
        return Result(code, _read(out_file), _read(err_file))


_BUILT: dict[int, tuple[Any, Any]] = {}


def _app_key(app: Any) -> Any:
    """What the Click command built from a Typer app depends on: its registrations."""
    return (
        id(getattr(app, "registered_callback", None)),
        tuple(id(c) for c in getattr(app, "registered_commands", ())),
        tuple((id(g), _app_key(g.typer_instance)) for g in getattr(app, "registered_groups", ())),
    )


@contextmanager
def _built_commands_reused() -> Iterator[None]:
    """`typer.main.get_command(app)` built once per set of registrations, not at every
    call: it is most of an in-process run's cost (~25 ms). A child process builds it at
    each start; the Click objects keep no state between invocations."""
    import typer.main

    build = typer.main.get_command

    def reused(app: Any) -> Any:
        key = _app_key(app)
        hit = _BUILT.get(id(app))
        if hit is None or hit[0] != key:
            hit = _BUILT[id(app)] = (key, build(app))
        return hit[1]

    typer.main.get_command = reused  # type: ignore[assignment]
    try:
        yield
    finally:
        typer.main.get_command = build


def _call(main: Any, argv: list[str]) -> int:
    """Run `main` the way the interpreter would run it as `__main__`: an exit code."""
    try:
        main(argv)
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        raise  # the person running the tests pressed Ctrl-C
    except BaseException:
        traceback.print_exc()  # what the interpreter prints for an uncaught exception
        return 1
    return 0


def _read(file: BinaryIO) -> str:
    file.seek(0)
    text = file.read().decode("utf-8", errors="replace")
    # what subprocess.run(text=True) hands back: universal newlines
    return text.replace("\r\n", "\n").replace("\r", "\n")


class _ByThread:
    """sys.stdout/sys.stderr during an in-process run: the run's threads (the caller and the
    threads it starts) write to the run's stream, the test's other threads (a test server's
    handlers) to where they wrote before, as they would with the CLI in a child process."""

    def __init__(self, mine: TextIO, others: TextIO, owners: WeakSet[threading.Thread]) -> None:
        self._mine = mine
        self._others = others
        self._owners = owners

    def _target(self) -> TextIO:
        return self._mine if threading.current_thread() in self._owners else self._others

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def fileno(self) -> int:
        return self._target().fileno()

    def isatty(self) -> bool:
        return self._target().isatty()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)


@contextmanager
def _std_fds(out_file: BinaryIO, err_file: BinaryIO) -> Iterator[None]:
    """fd 0 on /dev/null, fds 1 and 2 on the files, sys.std* as a fresh interpreter has them
    (for this thread and the threads it starts; see `_ByThread`)."""
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):
            stream.flush()
    saved_streams = (sys.stdin, sys.stdout, sys.stderr)
    saved_fds = [os.dup(fd) for fd in (0, 1, 2)]
    devnull = os.open(os.devnull, os.O_RDONLY)
    owners: WeakSet[threading.Thread] = WeakSet([threading.current_thread()])
    start = threading.Thread.start

    def start_owned(thread: threading.Thread) -> None:
        if threading.current_thread() in owners:
            owners.add(thread)
        start(thread)

    opened: list[TextIO] = []
    try:
        os.dup2(devnull, 0)
        os.dup2(out_file.fileno(), 1)
        os.dup2(err_file.fileno(), 2)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        # as Python sets them up when stdout/stderr are not a terminal
        out = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        err = io.TextIOWrapper(
            open(2, "wb", closefd=False),  # noqa: SIM115
            encoding="utf-8",
            errors="backslashreplace",
            line_buffering=True,
        )
        opened += [out, err]
        others = []
        for fd, saved in ((1, saved_streams[1]), (2, saved_streams[2])):
            if _fileno(saved) == fd:  # on the real fd (pytest -s): write to where it was
                saved = open(saved_fds[fd], "w", buffering=1, closefd=False)  # noqa: SIM115
                opened.append(saved)
            others.append(saved)
        sys.stdout = _ByThread(out, others[0], owners)
        sys.stderr = _ByThread(err, others[1], owners)
        threading.Thread.start = start_owned  # type: ignore[method-assign,assignment]
        yield
    finally:
        threading.Thread.start = start  # type: ignore[method-assign]
        for stream in opened:
            with suppress(OSError, ValueError):
                stream.flush()
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        for fd, saved_fd in zip((0, 1, 2), saved_fds, strict=True):
            os.dup2(saved_fd, fd)
            os.close(saved_fd)
        os.close(devnull)


def _fileno(stream: Any) -> int | None:
    try:
        return int(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return None


@contextmanager
def _process_state(environ: dict[str, str], cwd: Path | None) -> Iterator[None]:
    """os.environ and the cwd set for the block; module caches as a fresh process has them;
    locks the command left behind released, as a process exit would."""
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    held_before = set(_held_locks())
    _become(environ)
    try:
        if cwd is not None:
            os.chdir(cwd)
        _reset_module_state()
        yield
    finally:
        os.chdir(saved_cwd)
        _become(saved_env)
        _release_leaked_locks(held_before)
        _reset_module_state()


def _become(environ: dict[str, str]) -> None:
    """os.environ made exactly `environ`, touching only the variables that differ (a clear
    and a refill putenv/unsetenv every variable twice a run: ~1 s of CPU a suite)."""
    for name in [n for n in os.environ if n not in environ]:
        del os.environ[name]
    for name, value in environ.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


# each dgr_forge module's functools caches, found once per module object (a walk of every
# module's names on every run cost more than most commands; a re-import is walked again)
_CACHES: dict[str, tuple[Any, list[Any]]] = {}


_ALL_CLEARS: tuple[int, list[Any]] = (-1, [])  # (len(sys.modules) when listed, the clears)

# caches of what a process cannot change between runs, kept: the CI templates' jinja
# environment (package data, each template recompiled when its source reads otherwise)
_KEPT = {"dgr_forge.ci.render._environment"}


def _reset_module_state() -> None:
    global _ALL_CLEARS
    if _ALL_CLEARS[0] != len(sys.modules):  # a module came or went: list the caches again
        everything = []
        for name, module in list(sys.modules.items()):
            if name != "dgr_forge" and not name.startswith("dgr_forge."):
                continue
            seen, clears = _CACHES.get(name, (None, []))
            if seen is not module:
                clears = [
                    clear
                    for value in list(vars(module).values())
                    if callable(clear := getattr(value, "cache_clear", None))
                    and hasattr(value, "__wrapped__")
                    and f"{name}.{value.__qualname__}" not in _KEPT
                ]
                _CACHES[name] = (module, clears)
            everything += clears
        _ALL_CLEARS = (len(sys.modules), everything)
    for clear in _ALL_CLEARS[1]:
        clear()
    fault = sys.modules.get("dgr_forge.core.fault")
    if fault is not None:
        if hasattr(fault, "_parsed"):
            fault._parsed = None  # type: ignore[attr-defined]
        hits = getattr(fault, "_hits", None)
        if isinstance(hits, dict):
            hits.clear()
    urls = sys.modules.get("dgr_forge.core.urls")  # secrets a run saw in URLs
    known = getattr(urls, "_KNOWN_SECRETS", None)
    if isinstance(known, set):
        known.clear()


def _release_leaked_locks(held_before: set[Any]) -> None:
    held = _held_locks()
    for path in [p for p in held if p not in held_before]:
        entry = held.pop(path)
        fd = getattr(entry, "fd", None)
        if isinstance(fd, int):
            with suppress(OSError):
                os.close(fd)
