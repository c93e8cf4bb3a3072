"""Start-up stays cheap: registering every command must not import the heavy libraries.

Every CLI run (even `--version` or a no-op `patch`) imports the command modules, so they
import their library modules inside the command functions. A structural guard, not a
timing test: a top-level `import requests` slipping back into a command module (or into
what it imports) fails here, whatever the machine's speed.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.cli import SRC, forge_env, run_python

# Each costs tens of milliseconds to import; only the commands that use them may.
HEAVY = (
    "requests",
    "urllib3",
    "cryptography",
    "jinja2",
    "gguf",
    "numpy",
    "tomlkit",
    "msgspec",
    "securesystemslib",
)

_PROBE = """
import json, sys
import typer
import dgr_forge.cli.main
import dgr_forge.cli.commands
dgr_forge.cli.commands.register_all()
typer.main.get_command(dgr_forge.cli.main.app)  # what every start builds to parse argv
{extra}
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}} & {heavy!r})))
"""


def _heavy_modules_after(extra: str = "") -> list[str]:
    code = _PROBE.format(extra=extra, heavy=set(HEAVY))
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    loaded: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return loaded


def test_registering_all_commands_imports_no_heavy_library() -> None:
    loaded = _heavy_modules_after()
    assert loaded == [], f"imported at start-up (make these imports lazy): {loaded}"


@pytest.mark.parametrize("argv", [["--version"], ["--json", "--version"], ["fetch", "--help"]])
def test_cli_start_without_a_command_body_imports_no_heavy_library(argv: list[str]) -> None:
    run_main = f"""
try:
    dgr_forge.cli.main.main({argv!r})
except SystemExit as exit:
    assert exit.code == 0, exit.code
"""
    loaded = _heavy_modules_after(run_main)
    assert loaded == [], f"imported by `dgr-forge {' '.join(argv)}`: {loaded}"


def test_the_guard_sees_a_heavy_import() -> None:
    # the probe itself works: importing a library the commands defer is reported
    assert "tomlkit" in _heavy_modules_after("import dgr_forge.upstream.manifest_edit")


_MAP_PROBE = """
import json, typer
from dgr_forge.cli import commands
from dgr_forge.cli.app import app
out = {}
for name in commands.MODULES:  # each module alone, in a clean registry
    before = {c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands}
    before |= {g.name for g in app.registered_groups}
    commands._import(name)
    now = {c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands}
    now |= {g.name for g in app.registered_groups}
    out.update({command: name for command in now - before})
commands.register_all()
order = list(typer.main.get_command(app).commands)
print(json.dumps({"map": out, "order": order}))
"""


def test_the_command_map_names_the_module_of_every_command() -> None:
    # a run that names one command imports only its module: the map must be the truth
    from dgr_forge.cli.commands import COMMAND_MODULES

    proc = run_python(_MAP_PROBE)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["map"] == COMMAND_MODULES


@pytest.mark.parametrize(
    ("argv", "module"),
    [
        (["status"], "fetch"),
        (["--root", "status", "build"], "build"),  # a --root named "status"
        (["--root=x", "--json", "patch", "--help"], "patch"),
        (["--workspace", "w", "report", "show", "x"], "report"),
        (["--version"], ""),
        (["--json", "--version", "status"], ""),
        ([], None),
        (["--help"], None),
        (["--json"], None),
        (["nosuch"], None),  # Click names the known commands: all of them
        (["--", "status"], None),
        (["-x", "status"], None),
    ],
)
def test_a_run_imports_only_the_module_of_the_command_it_names(
    argv: list[str], module: str | None
) -> None:
    from dgr_forge.cli.commands import command_module, read

    assert command_module(read(argv)) == module


def _help_listing(*argvs: list[str]) -> list[str]:
    """The commands `--help` lists after the runs `argvs` in one process."""
    probe = f"""
import dgr_forge.cli.main as m
for argv in {[*argvs, ["--help"]]!r}:
    try:
        m.main(argv)
    except SystemExit:
        pass
"""
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        env=forge_env({"PYTHONPATH": str(SRC), "COLUMNS": "200"}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return [
        line.split()[0]
        for line in proc.stdout.split("Commands:")[-1].splitlines()
        if line.startswith("  ") and line[2:3].isalpha()  # not a wrapped help line
    ]


def test_help_lists_every_command_in_order_after_a_run_of_one() -> None:
    from dgr_forge.cli.commands import COMMAND_MODULES

    fresh = _help_listing()
    assert set(fresh) == set(COMMAND_MODULES), fresh
    assert fresh.index("fetch") < fresh.index("patch") < fresh.index("build")
    # an in-process run of one command first (the test runner's way) changes nothing
    assert _help_listing(["demo", "--help"], ["ci", "--help"], ["status", "--help"]) == fresh
