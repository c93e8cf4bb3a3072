"""What a person or a CI log reads: tables that are never cut, no empty tables, one
placeholder style, the global options in every help, and completion of option values."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from support.cli import run_forge, run_python
from support.roots import copy_product

from dgr_forge.cli.app import app
from dgr_forge.cli.commands import register_all
from dgr_forge.cli.options import apply
from dgr_forge.core.output import Reporter

REPO = Path(__file__).resolve().parent.parent


def test_a_table_in_a_log_is_never_cut(capsys: pytest.CaptureFixture[str]) -> None:
    """Not a terminal (a CI log, a pipe): plain aligned rows at full width, no box."""
    long_name = "0001-add-layer-range-ownership-for-the-distributed-runtime-" + "x" * 120
    report = ".dgr/reports/" + "cpu-" * 40 + "report.dsse.json"
    Reporter().table("rebase", ["patch", "report"], [(long_name, report), ("0002-b", None)])
    lines = capsys.readouterr().out.splitlines()  # a table is an answer: stdout
    assert lines[0] == "rebase:"
    assert re.fullmatch(r"patch +report", lines[1])
    assert lines[2].startswith(long_name) and lines[2].endswith(report)
    assert lines[3] == "0002-b"
    assert not any(ch in "".join(lines) for ch in "│┃━─…")


# a time of day holds ":NN:", read as an emoji code by Rich (":100:" is one); other texts
# whose plain output only Rich can say
LINES = [
    "lane cpu  last build 2026-12-01T12:13:39.566676+00:00: ok  report r.jsonl",
    "at 12:00:00 and :0: and ::",
    "thumbs :+1: :-1: :100: :1234: :__1: :+1-text:",
    "a :smile: and :SMILE: and :Smile-emoji: and :nosuchemoji:",
    "tab\there, a bell \x07",
]


def test_a_plain_line_is_exactly_what_rich_writes(capsys: pytest.CaptureFixture[str]) -> None:
    from rich.console import Console

    from dgr_forge.core.urls import shown

    for text in LINES:
        Reporter().info(text)
        theirs = io.StringIO()
        Console(file=theirs, no_color=True, color_system=None, highlight=False).print(
            shown(text), markup=False, soft_wrap=True
        )
        assert capsys.readouterr().err == theirs.getvalue(), text


def test_a_time_of_day_in_a_plain_line_does_not_import_rich() -> None:
    # `status` shows a last build's time: Rich (~35 ms to import) has nothing to do there
    code = (
        "import sys\n"
        "from dgr_forge.core.output import Reporter\n"
        f"Reporter().info({LINES[0]!r})\n"
        f"Reporter().answer({LINES[1]!r})\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'rich'))\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == LINES[0] + "\n"
    assert proc.stdout.splitlines() == [LINES[1], "[]"]


def test_the_emoji_names_without_a_letter_are_rich_s() -> None:
    from rich._emoji_codes import EMOJI

    from dgr_forge.core.output import LETTERLESS_EMOJI

    assert {n for n in EMOJI if not any(c.isalpha() for c in n)} == LETTERLESS_EMOJI


def test_no_rows_is_one_line_not_an_empty_table(capsys: pytest.CaptureFixture[str]) -> None:
    Reporter().table("patch --check", ["patch", "result"], [], empty="no patches")
    assert capsys.readouterr().out == "no patches\n"
    Reporter().table("lanes", ["lane"], [])
    assert capsys.readouterr().out == "lanes: none\n"


def test_a_row_of_another_width_than_the_columns_is_a_bug_not_a_cut_row() -> None:
    """Plain text: a row with a cell more (or fewer) than the columns raises; nothing is dropped."""
    with pytest.raises(ValueError):
        Reporter().table("lanes", ["lane"], [("cpu", "extra")])


def test_empty_series_and_nothing_certified_say_so(forge_root: Path) -> None:
    checked = run_forge("--root", str(forge_root), "patch", "--check")
    assert checked.code == 0, checked
    assert "no patches" in checked.stdout and "patch  result" not in checked.stdout

    copy_product(forge_root)  # the real recipes and probes: none certified in a test root
    advertised = run_forge("--root", str(forge_root), "lanes", "--advertised")
    assert advertised.code == 0, advertised
    assert "nothing certified" in advertised.stdout
    assert "backend" not in advertised.stdout  # no table header
    listed = run_forge("--root", str(forge_root), "lanes")
    assert re.search(r"^lane +backend", listed.stdout, re.MULTILINE), listed.stdout


def _commands() -> list[tuple[list[str], Any]]:
    register_all()
    root = typer.main.get_command(app)
    apply(root)
    found: list[tuple[list[str], Any]] = []
    stack: list[tuple[list[str], Any]] = [([], root)]
    while stack:
        path, command = stack.pop()
        found.append((path, command))
        for name, sub in (getattr(command, "commands", None) or {}).items():
            stack.append(([*path, name], sub))
    return found


ALLOWED = {"PATH", "URL", "LANE", "REV", "N", "CACHE", "MODE", "PROVIDER", "NAME", "TEXT",
           "DIR", "M", "SECONDS", "KEY", "RANGES"}  # fmt: skip


def test_one_placeholder_style_and_the_global_options_in_every_help() -> None:
    commands = _commands()
    assert len(commands) > 20
    for path, command in commands:
        for param in command.params:
            if param.param_type_name == "option" and not getattr(param, "is_flag", False):
                assert param.metavar in ALLOWED, (path, param.opts, param.metavar)
        # the one-line summary in `dgr-forge --help` is one sentence on one line
        first = (command.help or "").strip().split("\n\n")[0]
        assert "\n" not in first, (path, first)
        if not path:
            continue
        shown = run_forge(*path, "--help", env={"COLUMNS": "200"})
        assert shown.code == 0, (path, shown)
        text = shown.stdout + shown.stderr
        assert not re.search(r"<(str|path|int|text|float)>", text, re.IGNORECASE), (path, text)
        for option in ("--root PATH", "--workspace PATH", "--json"):
            assert option in text, (path, option)


def test_every_command_help_has_one_true_example_and_its_exit_codes() -> None:
    """One table (options.USAGE) for every command: its help ends with an example that
    runs that command with options it has, and the exit codes it can give."""
    from dgr_forge.cli.options import USAGE

    leaves = {" ".join(p): c for p, c in _commands() if p and not getattr(c, "commands", None)}
    assert set(USAGE) == set(leaves)
    for path, command in leaves.items():
        example, exits = USAGE[path]
        assert example.startswith(f"dgr-forge {path} ") or example == f"dgr-forge {path}"
        opts = {o for param in command.params for o in param.opts}
        for word in example.split()[1 + len(path.split()) :]:
            if word.startswith("-"):
                assert word.split("=")[0] in opts, (path, word)
        assert exits.startswith("0 ") and all(
            re.fullmatch(r"[0-3] .+", part) for part in exits.split(" · ")
        ), (path, exits)
        shown = run_forge(*path.split(), "--help", env={"COLUMNS": "400"})
        assert shown.code == 0, (path, shown)
        text = " ".join((shown.stdout + shown.stderr).split())
        assert f"Example: {example}" in text and f"Exit codes: {exits}" in text, (path, text)
    # a group's help names the global options, not one command's example
    group = " ".join(run_forge("report", "--help", env={"COLUMNS": "400"}).stdout.split())
    assert "Example:" not in group and "--root PATH" in group


def complete(*words: str, cwd: Path | None = None) -> list[str]:
    """What the shell's completion script receives (Click's own entry point)."""
    line = " ".join(["dgr-forge", *words])
    result = run_forge(
        cwd=cwd,
        env={
            "_DGR_FORGE_COMPLETE": "complete_bash",
            "COMP_WORDS": line,
            "COMP_CWORD": str(len(words)),
        },
    )
    assert result.code == 0, result
    return result.stdout.split()


def test_completion_offers_lanes_caches_modes_and_providers(tmp_path: Path) -> None:
    lanes = sorted(p.stem for p in (REPO / "recipes").glob("*.toml"))
    assert complete("--root", str(REPO), "build", "--lane", "") == lanes
    assert complete("--root", str(REPO), "doctor", "--lane", "c") == [
        lane for lane in lanes if lane.startswith("c")
    ]
    assert complete("presets", "--lane", "", cwd=REPO) == lanes  # the root found upwards
    assert complete("build", "--cache", "") == ["auto", "ccache", "sccache", "off"]
    assert complete("build", "--cache", "s") == ["sccache"]
    assert complete("build", "--cache-mode", "") == ["rw", "ro"]
    assert complete("ci", "render", "--provider", "") == ["github", "gitlab"]
    # no forge root: nothing offered, and no traceback in the shell
    assert complete("--root", str(tmp_path), "build", "--lane", "") == []
