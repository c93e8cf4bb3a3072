"""Hostile inputs, fifth round (issue 45, cause 8): `--json` with stdout on a full device
(`> /dev/full`) was a Python traceback (`OSError: [Errno 28]` from `cli/main`) for 16 of 19
commands. Every write to stdout and stderr now goes through one guarded path: a full or
closed stream is exit 1 (or the command's own failure code) with one `error:` line on
stderr where stderr is writable, never a traceback. Real child processes, real devices
and pipes, every command."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import IO, Any

import pytest
from support.cli import forge_env, forge_popen
from support.roots import copy_product, pin_ci

LINE = "error: cannot write to stdout: "

# every command and subcommand, with arguments that finish quickly in a fresh test root;
# True where the command itself succeeds there (so only the stream can fail it)
COMMANDS: list[tuple[list[str], bool]] = [
    (["--version"], True),
    (["status"], True),
    (["fetch"], True),
    (["patch"], True),
    (["export"], False),
    (["rebase", "--abort"], False),
    (["check"], True),
    (["bump", "--dry-run", "--to", "HEAD"], True),
    (["build", "--lane", "nosuch"], False),
    (["doctor"], True),
    (["lanes"], True),
    (["presets", "--print"], True),
    (["keygen", "--out", "{tmp}/key.pem"], True),
    (["certify", "--lane", "cpu"], False),
    (["demo", "{root}"], False),
    (["report", "show", "{tmp}/none.json"], False),
    (["report", "verify", "{tmp}/none.json"], False),
    (["report", "compare", "{tmp}/a.json", "{tmp}/b.json"], False),
    (["artifacts", "verify", "nosuch", "--dest", "{tmp}/models"], False),
    (["artifacts", "provision", "nosuch", "--dest", "{tmp}/models"], False),
    (["artifacts", "map", "nosuch"], False),
    (["artifacts", "manifest", "{tmp}/models", "--name", "m"], False),
    (["ci", "matrix"], True),
    (["ci", "render"], True),
    (["toolchain", "install", "cuda", "--offline", "--wheelhouse", "{tmp}/none"], False),
]


def _run(root: Path, args: list[str], stdout: IO[Any] | int, *, as_json: bool = True) -> Any:
    words = [a.format(tmp=root.parent, root=root) for a in args]
    flags = ["--json"] if as_json else []
    proc = forge_popen(
        *flags, *words, cwd=root, env=forge_env({"DGR_SIGNING_KEY": ""}),
        stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def _held(code: int, err: str, succeeds: bool) -> None:
    assert "Traceback" not in err and 'File "' not in err, err
    assert err.count(LINE) == 1, err
    assert code != 0, err
    if succeeds:
        assert code == 1, (code, err)


@pytest.fixture
def root(forge_root: Path) -> Path:
    copy_product(forge_root)  # recipes and probes: doctor, lanes, ci have their answer
    pin_ci(forge_root)  # and ci render an install source
    (forge_root.parent / "models").mkdir()
    return forge_root


@pytest.mark.parametrize(("args", "succeeds"), COMMANDS, ids=[" ".join(a) for a, _ in COMMANDS])
def test_json_with_stdout_on_a_full_device_is_one_line_never_a_traceback(
    root: Path, args: list[str], succeeds: bool
) -> None:
    with open("/dev/full", "w") as full:
        code, err = _run(root, args, full)
    _held(code, err, succeeds)
    assert LINE + "No space left on device" in err


def test_a_closed_pipe_and_plain_output_are_held_alike(root: Path) -> None:
    """The variants: stdout a pipe nobody reads any more (EPIPE), and the plain answer
    (no --json) on /dev/full; stderr on /dev/full with stdout fine."""
    for args, as_json in ((["status"], True), (["lanes"], False), (["ci", "matrix"], True)):
        read, write = os.pipe()
        os.close(read)  # `dgr-forge ... | head -0`: the reader is gone before a byte
        try:
            code, err = _run(root, args, write, as_json=as_json)
        finally:
            os.close(write)
        _held(code, err, succeeds=True)
        assert LINE + "Broken pipe" in err, err
    for args in (["status"], ["ci", "render"], ["doctor"]):
        with open("/dev/full", "w") as full:
            code, err = _run(root, args, full, as_json=False)
        _held(code, err, succeeds=True)
    with open(root.parent / "out.json", "w") as out, open("/dev/full", "w") as full:
        proc = forge_popen(
            "--json", "status", cwd=root, env=forge_env(), stdin=subprocess.DEVNULL,
            stdout=out, stderr=full,
        )  # fmt: skip
        assert proc.wait(timeout=120) == 1  # nothing can be said, and nothing raised
    assert '"command": "status"' in (root.parent / "out.json").read_text()


def test_every_command_is_tried_on_a_full_stdout() -> None:
    from dgr_forge.cli.commands import COMMAND_MODULES

    assert {args[0] for args, _ in COMMANDS if not args[0].startswith("-")} == set(COMMAND_MODULES)
