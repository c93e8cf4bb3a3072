"""Hints that are true (issue 43 #4): every `--option` a hint names exists on the command
that prints it. Read from the source with `ast` (each `hint=` of a `ForgeError`, f-strings'
constant parts included) and checked against the Click commands themselves:

* a hint that names its command (`dgr-forge artifacts provision NAME --dest DIR`) is
  checked against that command;
* a hint of `certify/`, `models/` or the report check, in a module `certify` reaches, is
  one `certify` may print (its model provisioning and verification, its report check):
  each option it names without a command must be one of certify's own (`pass --mirror
  URL` once was, and certify had none). The report key's hint names the option of the
  command that asked (`--report-key` for certify: test_certify_run).
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from support.server import write_split_gguf
from test_imports import SRC, graph, parsed

from dgr_forge.cli import commands
from dgr_forge.cli.app import app

OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# a command named in a hint, then what follows it up to the end of its backticked span
NAMED = re.compile(r"`dgr-forge ([a-z][a-z-]*(?: [a-z][a-z-]*)?)([^`;]*)")
GIT = re.compile(r"\bgit [a-z-]+[^`;]*")  # `git reset --hard`: git's options, not ours


def hints() -> Iterator[tuple[str, int, str]]:
    """(module, line, text) of every `hint=` whose text names an option."""
    for path in sorted(SRC.rglob("*.py")):
        module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.keyword) and node.arg == "hint":
                text = "".join(
                    n.value
                    for n in ast.walk(node.value)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)
                )
                if "--" in text:
                    yield module, node.value.lineno, text


@functools.cache
def _tree() -> Any:
    """The Click group (typer's own copy of Click: read by its attributes)."""
    commands.register_all()
    return typer.main.get_command(app)


@functools.cache
def options_of(words: str) -> set[str] | None:
    """The long options of `dgr-forge WORDS` (None: no such command), global ones included."""
    group = _tree()
    ctx = type(group).context_class(group)
    node = group
    for word in words.split():
        if not hasattr(node, "get_command"):
            break
        node = node.get_command(ctx, word)
        if node is None:
            return None
    own = {o for p in node.params for o in p.opts if o.startswith("--")}
    return own | {o for p in group.params for o in p.opts if o.startswith("--")}


def reaching(target: str) -> set[str]:
    """`target` and every forge module it imports, transitively."""
    edges, seen, todo = graph(), set(), [target]
    while todo:
        mod = todo.pop()
        if mod not in seen:
            seen.add(mod)
            todo += sorted(edges.get(mod, ()))
    return seen


def wrong_named() -> list[str]:
    bad = []
    for module, line, text in hints():
        for words, rest in NAMED.findall(text):
            opts = options_of(words.strip()) or options_of(words.split()[0])
            if opts is None:
                bad.append(f"{module}:{line}: `dgr-forge {words}` is no command")
                continue
            bad += [
                f"{module}:{line}: dgr-forge {words.strip()} has no {o}"
                for o in OPTION.findall(GIT.sub("", rest))
                if o not in opts
            ]
    return bad


def wrong_for(command: str, entry: str, packages: tuple[str, ...]) -> list[str]:
    """Hints of `packages`' modules that `entry` reaches (imports, transitively): a module
    reached is not a function called, so the walk keeps to the packages whose every
    refusal the command can meet (its own, and the model and report paths it runs)."""
    opts = options_of(command)
    assert opts is not None
    mods = reaching(entry)
    bad = []
    for module, line, text in hints():
        if module not in mods or not module.startswith(packages):
            continue
        bare = GIT.sub("", NAMED.sub("", text))
        bad += [f"{module}:{line}: {command} has no {o}" for o in OPTION.findall(bare)
                if o not in opts]  # fmt: skip
    return bad


def test_a_hint_naming_a_command_names_its_options() -> None:
    assert wrong_named() == []


def test_every_hint_certify_can_print_names_an_option_of_certify() -> None:
    packages = ("dgr_forge.certify.", "dgr_forge.models.", "dgr_forge.attest.reports")
    assert wrong_for("certify", "dgr_forge.certify.sequence", packages) == []


def test_the_walk_sees_a_wrong_hint(tmp_path: Path) -> None:
    """The walk itself can fail: certify's model download hint before certify had --mirror."""
    assert "--mirror" in (options_of("certify") or set())
    assert "--mirror" not in (options_of("lanes") or set())
    assert options_of("no-such-command") is None


def test_certify_help_says_a_failing_step_is_exit_1() -> None:
    from support.cli import run_forge

    r = run_forge("certify", "--help")
    assert r.code == 0, r
    text = " ".join(r.stdout.split())
    assert "1 a step failed, or the report does not verify" in text, r.stdout
    assert "a failing step is exit 1" in text


def test_a_file_url_manifest_says_reading_it_needs_the_file_roots(tmp_path: Path) -> None:
    """`artifacts manifest --url-base file://...` says so when it writes the manifest, not
    the first `provision` or `certify` (exit 2 there)."""
    from support.cli import run_forge

    served = tmp_path / "served"
    write_split_gguf(served, "m", 2)
    out = tmp_path / "m.toml"
    r = run_forge(
        "artifacts", "manifest", str(served), "--name", "m", "--url-base", served.as_uri(),
        "--out", str(out),
    )  # fmt: skip
    assert r.code == 0, r
    assert "DGR_ARTIFACTS_FILE_ROOTS" in r.stderr and str(served) in r.stderr
    r = run_forge(
        "artifacts", "manifest", str(served), "--name", "m", "--url-base", "https://h.example/m",
        "--out", str(out),
    )  # fmt: skip
    assert r.code == 0 and "DGR_ARTIFACTS_FILE_ROOTS" not in r.stderr, r
