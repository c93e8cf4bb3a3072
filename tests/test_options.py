"""The options several commands share read the same everywhere: one declaration each
(`cli/options.py`), one help text, whichever command shows it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import typer

from dgr_forge.cli.app import app
from dgr_forge.cli.commands import register_all

SHARED = ("--mirror", "--offline", "--force", "--key", "--jobs", "--lane")


def _params() -> dict[str, list[tuple[str, Any]]]:
    register_all()
    found: dict[str, list[tuple[str, Any]]] = defaultdict(list)

    def visit(node: Any, path: tuple[str, ...]) -> None:
        subs = getattr(node, "commands", None)
        if isinstance(subs, Mapping):
            for name in subs:
                visit(subs[name], (*path, name))
            return
        for param in node.params:
            for opt in param.opts:
                found[opt].append((" ".join(path), param))

    visit(typer.main.get_command(app), ())
    return found


def test_each_shared_option_is_declared_once_and_speaks_of_its_own_command() -> None:
    """One declaration per option (`cli/options.py`): its names, placeholder and check are
    the same in every command; its help in a command says what it does there, never what
    it does in another (`build --help` once explained downloads under `--jobs`)."""
    params = _params()
    words = {cmd.split()[0] for uses in params.values() for cmd, _ in uses}
    for opt in SHARED:
        uses = params[opt]
        assert len(uses) >= 2, (opt, uses)
        shapes = {(tuple(p.opts), p.metavar) for _, p in uses}
        assert len(shapes) == 1, (opt, shapes)
        for cmd, p in uses:
            others = {w for w in words - {cmd.split()[0]} if f"`{w}`" in (p.help or "")}
            assert not others, (opt, cmd, p.help)
            assert (p.help or "").rstrip().endswith((".", ")")), (opt, cmd, p.help)
    (build_jobs,) = [p for cmd, p in params["--jobs"] if cmd == "build"]
    assert "download" not in build_jobs.help and "file" not in build_jobs.help


def test_each_option_name_means_one_thing() -> None:
    """`--out` is the file a command writes (a path), `--report` the Markdown report a
    rebase or bump writes; `certify`'s build report is `--build-report` (its old `--report`
    still read, hidden)."""
    params = _params()
    assert {cmd for cmd, p in params["--report"] if not p.hidden} == {"rebase", "bump"}
    assert {p.help for cmd, p in params["--report"] if not p.hidden} == {
        "Write the Markdown report here."
    }
    assert [cmd for cmd, _ in params["--build-report"]] == ["certify"]
    assert {p.metavar for _, p in params["--out"]} == {"PATH"}
    assert all((p.help or "").startswith("Write") for _, p in params["--out"])


def test_the_line_is_read_once() -> None:
    """`cli.commands.read`: the global options hoisted, the command's words, `--json`, a NUL
    byte found where it is; nothing after `--` is an option or a word."""
    from dgr_forge.cli.commands import read

    line = read(["build", "--lane", "cuda", "--json", "--root", "r", "--", "--json", "x"])
    assert line.args == ["--json", "--root", "r", "build", "--lane", "cuda", "--", "--json", "x"]
    assert line.words == ["build", "cuda"] and line.first == "build" and line.as_json
    assert line.nul is None
    assert not read(["status", "--", "--json"]).as_json
    assert read(["--root", "a\x00b", "status"]).nul == "--root"
    assert read(["fetch", "--mirror=u\x00"]).nul == "--mirror"
    assert read(["report", "show", "r\x00"]).nul == "argument 3"
    assert read(["--", "status"]).first is None and read(["-x", "status"]).first == "-x"


def test_jobs_is_checked_once_for_every_command(tmp_path: Any) -> None:
    """A hostile `--jobs` (0, negative, huge) is exit 2 naming it, in every command."""
    from support.cli import run_forge

    for args in (["build"], ["artifacts", "verify", "m.toml", "--dest", str(tmp_path)]):
        for value in ("0", "-1", "99999999"):
            res = run_forge("--json", *args, "--jobs", value, cwd=tmp_path)
            assert res.code == 2 and f"--jobs {value}: must be 1 to 4096" in res.stderr, res
            assert res.json["error"] == f"--jobs {value}: must be 1 to 4096"
