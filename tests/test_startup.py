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
from forgetest import SRC, forge_env

# Each costs tens of milliseconds to import; only the commands that use them may.
HEAVY = ("requests", "urllib3", "cryptography", "jinja2", "gguf", "numpy", "tomlkit")

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
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=forge_env({"PYTHONPATH": str(SRC)}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
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
