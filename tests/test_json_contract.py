"""The --json contract, for every command the CLI registers (discovered, not listed).

Every invocation with --json prints exactly one JSON object on stdout whose `ok`,
`exit_code` and `command` agree with the process; human text goes to stderr. Commands
added later are covered as soon as they are registered. A command that needs more than
`--root <empty dir>` to fail, or that can succeed cheaply, gets a row in the tables below.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import typer
from support.cli import Result, run_forge
from support.roots import manifest_text

from dgr_forge.cli import main as cli
from dgr_forge.cli.app import JSON_CHANNEL, app, run
from dgr_forge.cli.commands import register_all
from dgr_forge.core.errors import BadInput

Path_ = tuple[str, ...]


def _tree() -> tuple[list[Path_], list[Path_], dict[Path_, Any]]:
    """(leaf commands, groups, click command by path) as the CLI registers them."""
    register_all()
    leaves: list[Path_] = []
    groups: list[Path_] = []
    nodes: dict[Path_, Any] = {}

    def visit(node: Any, path: Path_) -> None:
        nodes[path] = node
        subs = getattr(node, "commands", None)
        if isinstance(subs, Mapping):
            groups.append(path)
            for name in sorted(subs):
                visit(subs[name], (*path, name))
        else:
            leaves.append(path)

    visit(typer.main.get_command(app), ())
    return leaves, groups, nodes


LEAVES, GROUPS, NODES = _tree()


def required_params(path: Path_) -> list[str]:
    return [p.name for p in NODES[path].params if getattr(p, "required", False)]


REPO = Path(__file__).resolve().parent.parent


def _existing_key(tmp: Path) -> tuple[list[str], int]:
    (tmp / "key").write_text("not mine to overwrite\n")
    return ["--out", str(tmp / "key")], 2


# Commands that do not fail with the default `--root <empty dir> COMMAND` (exit 2), e.g.
# because they need no root: a function of a temp dir giving the arguments after the
# command and the expected exit code.
FAILING: dict[Path_, Callable[[Path], tuple[list[str], int]]] = {
    ("keygen",): _existing_key,
}


def _ci_root(tmp: Path) -> Path:
    root = tmp / "forge"
    (root / "manifests").mkdir(parents=True)
    (root / "recipes").mkdir()
    (root / "manifests" / "llama.cpp.toml").write_text(
        manifest_text("https://example.invalid/llama.cpp.git", "ab" * 20)
    )
    (root / "recipes" / "cpu.toml").write_text('schema = 1\n[lane]\nbackend = "CPU"\n')
    (root / "ci").mkdir()  # what its jobs install: dgr-forge at a commit, the toolchain
    (root / "ci" / "requirements.txt").write_text(
        "dgr-forge @ git+https://example.invalid/dgr-forge.git@" + "c" * 40 + "\n"
    )
    (root / "ci" / "constraints.txt").write_text("cmake==4.4.5\nninja==1.13.2\n")
    return root


# Cheap succeeding invocations: a function of a temp dir giving the whole argument list.
SUCCEEDING: dict[Path_, Callable[[Path], list[str]]] = {
    ("ci", "matrix"): lambda tmp: ["--root", str(_ci_root(tmp)), "ci", "matrix"],
    ("ci", "render"): lambda tmp: ["--root", str(_ci_root(tmp)), "ci", "render"],
    ("keygen",): lambda tmp: ["keygen", "--out", str(tmp / "new-key")],
    ("doctor",): lambda tmp: ["--root", str(REPO), "--workspace", str(tmp / "ws"), "doctor"],
    ("lanes",): lambda tmp: ["--root", str(REPO), "--workspace", str(tmp / "ws"), "lanes"],
}


def name(path: Path_) -> str:
    return " ".join(path) or "dgr-forge"


@pytest.fixture
def sandbox(tmp_path: Path) -> dict[str, Any]:
    """An empty directory to run in, with HOME and XDG dirs inside the test's tmp dir."""
    home = tmp_path / "home"
    empty = tmp_path / "empty"
    home.mkdir()
    empty.mkdir()
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    return {"cwd": empty, "env": env, "tmp": tmp_path}


def forge(sandbox: dict[str, Any], *args: str, env: dict[str, str] | None = None) -> Result:
    return run_forge(*args, cwd=sandbox["cwd"], env={**sandbox["env"], **(env or {})}, timeout=120)


def assert_one_object(result: Result, command: str | None = None) -> dict[str, Any]:
    try:
        payload = json.loads(result.stdout)  # fails on text or on a second object
    except json.JSONDecodeError as err:
        raise AssertionError(f"stdout is not exactly one JSON object ({err}):\n{result!r}") from err
    assert isinstance(payload, dict), result
    assert list(payload)[:3] == ["ok", "exit_code", "command"], payload
    assert payload["exit_code"] == result.code, result
    assert payload["ok"] is (result.code == 0), result
    if command is not None:
        assert payload["command"] == command, result
    assert "\x1b[" not in result.stdout + result.stderr, "no colour off a terminal"
    if result.code != 0:
        assert result.stderr.strip(), f"a failure explains itself on stderr: {result!r}"
    return payload


def test_discovery_sees_the_registered_commands() -> None:
    assert ("ci", "matrix") in LEAVES and ("ci", "render") in LEAVES
    assert () in GROUPS and ("ci",) in GROUPS
    assert set(SUCCEEDING) <= set(LEAVES) and set(FAILING) <= set(LEAVES)


@pytest.mark.parametrize("path", LEAVES, ids=name)
def test_failing_invocation_is_one_json_object(path: Path_, sandbox: dict[str, Any]) -> None:
    args, expected = FAILING[path](sandbox["tmp"]) if path in FAILING else ([], 2)
    empty_root = sandbox["tmp"] / "not-a-root"
    empty_root.mkdir()
    result = forge(sandbox, "--root", str(empty_root), *path, *args, "--json")
    assert result.code != 0, (
        f"{name(path)} succeeded with an empty --root: add a FAILING row for it\n{result!r}"
    )
    assert result.code == expected, result
    payload = assert_one_object(result, name(path))
    if not args and required_params(path):
        assert "Missing" in payload["error"], result  # usage error before anything runs
    assert sorted(p.name for p in empty_root.iterdir()) == [], "a refusal creates nothing"


@pytest.mark.parametrize("path", LEAVES, ids=name)
def test_usage_error_is_one_json_object(path: Path_, sandbox: dict[str, Any]) -> None:
    result = forge(sandbox, *path, "--no-such-flag", "--json")  # --json hoisted from the end
    assert result.code == 2, result
    payload = assert_one_object(result, name(path))
    assert "--no-such-flag" in payload["error"] and "--no-such-flag" in result.stderr


@pytest.mark.parametrize("path", LEAVES, ids=name)
def test_help_is_one_json_object(path: Path_, sandbox: dict[str, Any]) -> None:
    result = forge(sandbox, "--json", *path, "--help")
    assert result.code == 0, result
    assert_one_object(result, name(path))
    assert "Usage" in result.stderr


@pytest.mark.parametrize("path", sorted(SUCCEEDING), ids=name)
def test_succeeding_invocation_is_one_json_object(path: Path_, sandbox: dict[str, Any]) -> None:
    result = forge(sandbox, *SUCCEEDING[path](sandbox["tmp"]), "--json")
    assert result.code == 0, result
    assert_one_object(result, name(path))


@pytest.mark.parametrize("path", GROUPS, ids=name)
def test_group_without_a_command_is_a_usage_error(path: Path_, sandbox: dict[str, Any]) -> None:
    result = forge(sandbox, *path, "--json")
    assert result.code == 2, result
    payload = assert_one_object(result, name(path))
    assert payload["error"]
    assert "Usage" in result.stderr


def test_unknown_command_and_bad_global_option(sandbox: dict[str, Any]) -> None:
    unknown = forge(sandbox, "--json", "no-such-command")
    assert unknown.code == 2
    assert "no-such-command" in assert_one_object(unknown, "dgr-forge")["error"]

    sub = forge(sandbox, "--root", "x", "ci", "no-such-command", "--json")
    assert sub.code == 2
    assert "no-such-command" in assert_one_object(sub, "ci")["error"]

    missing_value = forge(sandbox, "--json", "--root")
    assert missing_value.code == 2
    assert "--root" in assert_one_object(missing_value)["error"]


def test_version_is_one_json_object(sandbox: dict[str, Any]) -> None:
    result = forge(sandbox, "--version", "--json")
    assert result.code == 0
    assert assert_one_object(result, "dgr-forge")["version"]
    assert "dgr-forge" in result.stderr


def test_without_json_errors_stay_off_stdout_and_uncoloured(sandbox: dict[str, Any]) -> None:
    # NO_COLOR unset: colour is still off because neither stream is a terminal
    result = forge(sandbox, "--root", str(sandbox["cwd"]), "ci", "matrix", env={"NO_COLOR": ""})
    assert result.code == 2 and result.stdout == ""
    assert "not a forge root" in result.stderr and "\x1b[" not in result.stderr
    assert "fix: pass --root" in result.stderr


# ----------------------------------------------------------------------------- in process


def _main(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert JSON_CHANNEL.stream is None, "main restores stdout"
    return int(exit_info.value.code or 0)


def test_errors_raised_outside_run_keep_the_contract(capsys: pytest.CaptureFixture[str]) -> None:
    """A ForgeError before `run` and a crash inside a command both still give one object."""

    def refuses(ctx: typer.Context) -> None:
        raise BadInput("refused before run", hint="do it right")

    def crashes(ctx: typer.Context) -> None:
        run(ctx, "zz-crash", lambda env: {"n": 1 // 0})

    app.command("zz-refuse")(refuses)
    app.command("zz-crash")(crashes)
    try:
        assert _main(["zz-refuse", "--json"]) == 2
        captured = capsys.readouterr()
        payload = json.loads(captured.out)
        assert payload["ok"] is False and payload["exit_code"] == 2
        assert payload["command"] == "zz-refuse" and payload["hint"] == "do it right"
        assert "refused before run" in captured.err

        assert _main(["--json", "zz-crash"]) == 1
        captured = capsys.readouterr()
        payload = json.loads(captured.out)
        assert payload["exit_code"] == 1 and "ZeroDivisionError" in payload["error"]
        assert "Traceback" in captured.err
    finally:
        del app.registered_commands[-2:]


def test_child_process_output_never_reaches_json_stdout(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """With --json, file descriptor 1 is stderr for everything but the one object."""
    import subprocess

    def noisy(ctx: typer.Context) -> None:
        def body(env: Any) -> dict[str, Any]:
            subprocess.run(["sh", "-c", "echo from-a-child-process"], check=True)
            print("from-print")
            return {"done": True}

        run(ctx, "zz-noisy", body)

    app.command("zz-noisy")(noisy)
    try:
        assert _main(["zz-noisy", "--json"]) == 0
        captured = capfd.readouterr()
        assert json.loads(captured.out) == {
            "ok": True,
            "exit_code": 0,
            "command": "zz-noisy",
            "done": True,
        }
        assert "from-a-child-process" in captured.err and "from-print" in captured.err
        print("stdout is back")
        assert capfd.readouterr().out == "stdout is back\n"
    finally:
        del app.registered_commands[-1:]


def _on_a_terminal(args: list[str], env: dict[str, str]) -> str:
    """Run the CLI with stdout and stderr on a pseudo-terminal; everything it printed."""
    import os
    import pty
    import subprocess

    from support.cli import forge_cmd, forge_env

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        forge_cmd(*args),
        stdout=follower,
        stderr=follower,
        stdin=subprocess.DEVNULL,
        env=forge_env({"COLUMNS": "120", "TERM": "xterm-256color", **env}),
    )
    os.close(follower)
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=60) == 0
    return b"".join(chunks).decode("utf-8", "replace")


def test_colour_only_on_a_terminal_and_never_with_no_color(tmp_path: Path) -> None:
    args = ["--root", str(REPO), "--workspace", str(tmp_path / "ws"), "lanes"]
    coloured = _on_a_terminal(args, {"NO_COLOR": ""})
    assert "\x1b[" in coloured, "a terminal gets styling (table headers)"
    plain = _on_a_terminal(args, {"NO_COLOR": "1"})
    assert "\x1b[" not in plain and "cpu" in plain


def test_one_boundary_keeps_the_details_and_the_interrupt(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An error raised before `run` keeps its details (the second boundary dropped them);
    Ctrl-C inside a body is exit 130 `interrupted`, as from anywhere else."""

    def refuses(ctx: typer.Context) -> None:
        raise BadInput("no such lane: zz", hint="pick one", details={"lane": "zz"})

    def interrupted(ctx: typer.Context) -> None:
        def body(env: Any) -> dict[str, Any]:
            raise KeyboardInterrupt

        run(ctx, "zz-interrupted", body)

    app.command("zz-details")(refuses)
    app.command("zz-interrupted")(interrupted)
    try:
        assert _main(["zz-details", "--json"]) == 2
        payload = json.loads(capsys.readouterr().out)
        assert payload["lane"] == "zz" and payload["hint"] == "pick one", payload
        assert _main(["zz-interrupted", "--json"]) == 130
        captured = capsys.readouterr()
        assert json.loads(captured.out)["error"] == "interrupted"
        assert "interrupted" in captured.err
    finally:
        del app.registered_commands[-2:]


def test_a_typed_result_is_encoded_and_masked(capsys: pytest.CaptureFixture[str]) -> None:
    """A command's result Struct, alone or inside a plain dict: its keys in their declared
    order, every string through the same masking as a dict's."""
    from dgr_forge.attest import keys

    key = keys.Keygen(private_key="https://u:SECRET@h.invalid/k", public_key="p", keyid="i")

    def typed(ctx: typer.Context) -> None:
        run(ctx, "zz-typed", lambda env: key)

    def nested(ctx: typer.Context) -> None:
        run(ctx, "zz-nested", lambda env: {"inner": key})

    app.command("zz-typed")(typed)
    app.command("zz-nested")(nested)
    try:
        assert _main(["zz-typed", "--json"]) == 0
        out = capsys.readouterr().out
        payload = json.loads(out)
        assert list(payload) == ["ok", "exit_code", "command", "private_key", "public_key", "keyid"]
        assert _main(["zz-nested", "--json"]) == 0
        out += capsys.readouterr().out
        assert json.loads(out.split("\n}\n", 1)[1])["inner"]["keyid"] == "i"
        assert "SECRET" not in out
    finally:
        del app.registered_commands[-2:]
