"""Every shell example in README.md and docs/ runs, offline, against a demo forge root.

A fenced block whose info string starts with `bash`, `sh`, `shell` or `console` is an
example. It runs unless marked `no-test=<reason>` in the info string (```` ```bash
no-test=network ````), the reason one of `REASONS`. Blocks of one file run in order in
one forge root: the session's demo root, put back as the tour left it before each file.

Each command line runs on its own, in the directory the block has `cd`'d to (no shell
variables carry over): a plain `dgr-forge ...` line in-process (support.cli's runner),
anything else (pipes, `$(...)`, globs, git) through bash. In `console` blocks only the
`$ ` lines are commands; the rest is output, not compared. A command must exit 0 unless
its comment says `# exit N`. `$EDITOR` is a non-interactive editor: it resolves conflict
markers by keeping the patch's side, or else appends a line. `DOCS_TIMING=1` prints each
command's time to stderr (with `-s`), to find an example that got slow.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.cli import forge_env, run_forge
from support.demo import DemoTour

REPO = Path(__file__).resolve().parent.parent
SHELLS = ("bash", "sh", "shell", "console")
REASONS = {
    "network": "needs the network (the real upstream, a package index)",
    "hardware": "needs a GPU lane, its toolkit or a distributed-compilation scheduler",
    "files": "needs files a test machine lacks (model files, a mirror under /srv)",
    "shell": "changes the user's own shell set-up",
    "demo": "is the demo itself (tests/test_demo.py runs it)",
    "illustration": "shows the output of a situation the demo root does not have",
}
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<info>.*)$")
EXPECT = re.compile(r"\s#\s*exit (\d+)\b")
SHELL_SYNTAX = set("|&;<>$*?(){}[]~`\\")
CD_CHAIN = re.compile(r"^cd (?P<dir>[^\s;&|$`]+) && (?P<rest>.+)$")

EDITOR = """\
import sys
path = sys.argv[-1]
text = open(path).read()
if "<<<<<<<" in text:
    out, side = [], None
    for line in text.splitlines(keepends=True):
        if line.startswith("<<<<<<<"):
            side = "ours"
        elif line.startswith("|||||||") and side:
            side = "base"
        elif line.startswith("=======") and side:
            side = "theirs"
        elif line.startswith(">>>>>>>") and side:
            side = None
        elif side in (None, "theirs"):
            out.append(line)
    text = "".join(out)
else:
    text += "// edited\\n"
open(path, "w").write(text)
"""


@dataclass(frozen=True)
class Block:
    file: str
    line: int  # of the opening fence
    lang: str
    skip: str | None  # the no-test reason
    text: str


@dataclass(frozen=True)
class Command:
    file: str
    line: int
    text: str
    expect: int


def blocks(path: Path) -> list[Block]:
    found: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        words = m["info"].split()
        if words and words[0] in SHELLS:
            skip = next((w.partition("=")[2] for w in words if w.startswith("no-test")), None)
            body = textwrap.dedent("\n".join(lines[i + 1 : end]))
            found.append(Block(path.name, i + 1, words[0], skip, body))
        i = end + 1
    return found


def commands(block: Block) -> list[Command]:
    out: list[Command] = []
    pending, start = "", 0
    for n, raw in enumerate(block.text.splitlines(), start=block.line + 1):
        if not pending:
            if block.lang == "console":
                if not raw.startswith("$ "):
                    continue
                raw = raw[2:]
            start = n
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        text, pending = pending + raw, ""
        if not shlex.split(text, comments=True):
            continue  # a comment line
        m = EXPECT.search(text)
        out.append(Command(block.file, start, text, int(m[1]) if m else 0))
    return out


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def run_commands(cmds: list[Command], root: Path, env: dict[str, str]) -> None:
    """Run each command in turn; fail naming the file, line and command that broke."""
    cwd, previous = root, root
    for c in cmds:
        text = c.text
        chained = CD_CHAIN.match(text)  # `cd DIR && rest`: the cd lasts, as in a shell
        if chained:
            text = chained["rest"]
        command_part = EXPECT.split(text)[0].split(" #")[0]
        tokens = shlex.split(text, comments=True)
        if chained or (
            tokens[0] == "cd" and len(tokens) == 2 and not SHELL_SYNTAX & set(command_part)
        ):
            where = chained["dir"] if chained else tokens[1]
            target = previous if where == "-" else (cwd / where)
            cwd, previous = target.resolve(), cwd
            assert cwd.is_dir(), f"{c.file}:{c.line}: `{c.text}`: no directory {cwd}"
            assert cwd.is_relative_to(root.parent), f"{c.file}:{c.line}: leaves the test root"
            if not chained:
                continue
        t0 = time.monotonic()
        if tokens[0] == "dgr-forge" and not SHELL_SYNTAX & set(command_part):
            r = run_forge(*tokens[1:], cwd=cwd, env=env)
            code, output = r.code, r.stdout + r.stderr
        else:
            proc = subprocess.run(
                ["bash", "-c", text],
                cwd=cwd,
                env=forge_env({**env, "PWD": str(cwd), "OLDPWD": str(previous)}),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=300,
            )
            code, output = proc.returncode, proc.stdout + proc.stderr
        if os.environ.get("DOCS_TIMING"):
            print(f"{time.monotonic() - t0:6.2f}s {c.file}:{c.line} {text[:70]}", file=sys.stderr)
        assert code == c.expect, (
            f"{c.file}:{c.line}: `{c.text.strip()}` exited {code}, the docs say "
            f"{c.expect} (cwd {cwd})\n{output[-3000:]}"
        )


def _env(tmp_path: Path) -> dict[str, str]:
    editor = tmp_path / "editor"
    editor.write_text(f"#!{sys.executable}\n{EDITOR}")
    editor.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "EDITOR": str(editor),
        "VISUAL": str(editor),
        "GIT_EDITOR": str(editor),
        "CI": "",
        "DGR_CACHE": "off",  # as the demo built: a plain `build` is Ninja's no-op there
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    }


RUNNABLE = [p.name for p in doc_files() if any(b.skip is None and commands(b) for b in blocks(p))]


@pytest.mark.slow  # the demo's real CMake build (shared, once per session)
@pytest.mark.parametrize("name", RUNNABLE)
def test_the_examples_of_each_page_run(name: str, demo_tour: DemoTour, tmp_path: Path) -> None:
    assert demo_tour.result.code == 0, demo_tour.result
    path = REPO / name if name == "README.md" else REPO / "docs" / name
    cmds = [c for b in blocks(path) if b.skip is None for c in commands(b)]
    env = _env(tmp_path)
    if name != "README.md":
        # a page is read after others: its examples must not depend on the state an earlier
        # page's left (the default signing key made by another page's `keygen`); the README
        # is the first run on a fresh machine
        run_commands([Command(name, 0, "dgr-forge keygen", 0)], demo_tour.fresh(), env)
    run_commands(cmds, demo_tour.fresh(), env)


def test_every_example_is_run_or_says_why_not() -> None:
    examples = [b for p in doc_files() for b in blocks(p)]
    assert len(examples) > 20
    for b in examples:
        assert b.skip is None or b.skip in REASONS, f"{b.file}:{b.line}: no-test={b.skip!r}"
    # the tour's own pages are tested, not waved through
    assert {"README.md", "patches-and-rebase.md", "build-and-reports.md"} <= set(RUNNABLE)
    ran = sum(len(commands(b)) for b in examples if b.skip is None)
    assert ran >= 30, ran


@pytest.mark.slow  # the demo's real CMake build (shared, once per session)
def test_a_broken_example_fails_the_test(demo_tour: DemoTour, tmp_path: Path) -> None:
    """The runner can fail: a wrong option, a wrong exit code, a failing shell line."""
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\ndgr-forge status\n```\n\n```console\n$ dgr-forge patch --no-such-flag\n```\n"
    )
    cmds = [c for b in blocks(page) for c in commands(b)]
    assert [c.text for c in cmds] == ["dgr-forge status", "dgr-forge patch --no-such-flag"]
    root = demo_tour.fresh()
    with pytest.raises(AssertionError, match=r"page.md:6: `dgr-forge patch --no-such-flag`"):
        run_commands(cmds, root, _env(tmp_path))
    wrong = Command("page.md", 1, "dgr-forge status   # exit 3", 3)
    with pytest.raises(AssertionError, match="exited 0, the docs say 3"):
        run_commands([wrong], root, {})
    with pytest.raises(AssertionError, match="exited 1"):
        run_commands([Command("page.md", 1, "ls no-such-file | grep x", 0)], root, {})


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_relative_link_and_anchor_resolves() -> None:
    """The README is mostly links now: each must lead to a file (and heading) that exists."""
    link = re.compile(r"\]\((?!https?:|mailto:)([^)\s]+)\)")
    for page in [*doc_files(), REPO / "SECURITY.md"]:
        text = page.read_text()
        for target in link.findall(text):
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            assert dest.exists(), f"{page.name}: link to {target}: no {dest}"
            if anchor and dest.suffix == ".md":
                headings = re.findall(r"(?m)^#+ (.+)$", dest.read_text())
                slugs = {_slug(h) for h in headings}
                assert anchor in slugs, f"{page.name}: link to {target}: no such heading"


def test_every_environment_variable_the_code_reads_is_in_the_one_table() -> None:
    """docs/environment.md lists every `DGR_*` variable src/ reads (each is read by its
    name as a string literal: `environ.get("DGR_X")`, `env_number("DGR_X", ...)`, a
    `..._ENV = "DGR_X"` constant), and names none that is gone. (The DGR_* names of the
    rendered CI and the worker's CMake definitions are never quoted in src/.)"""
    used = {
        name
        for path in (REPO / "src").rglob("*.py")
        for name in re.findall(r"[\"'](DGR_[A-Z][A-Z0-9_]*[A-Z0-9])[\"']", path.read_text())
    }
    table = (REPO / "docs" / "environment.md").read_text()
    listed = set(re.findall(r"^\| `(DGR_[A-Z0-9_]+)`", table, re.MULTILINE))
    assert used <= listed, sorted(used - listed)
    assert listed <= used, sorted(listed - used)
    assert "(docs/environment.md)" in (REPO / "README.md").read_text()
