"""Nothing is cut (issue 44 point 1): every table and progress line the forge draws, read
through a pipe and at a real 80-column pseudo-terminal, holds each path and id whole;
`NO_COLOR` takes the colour away and nothing else; `--help` in a pipe is plain, unboxed,
unwrapped text.

The tables: `lanes`, `doctor`, `status`'s patches, `patch --check`, `artifacts provision
--dry-run`, and the reporter's own table and progress with a long path (what `rebase` and
the compile's progress draw through). Progress: a real download's bars and lines.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import termios
from pathlib import Path

import pytest
from support.build import BuiltLane, LaneSnapshot, built_snapshot
from support.cli import forge_env, forge_popen, run_forge
from support.git import Upstream
from support.server import manifest_of, split_names, write_split_gguf

pytestmark = pytest.mark.slow

BOX = set("─│┃━┏┓┗┛┡┩└┘┌┐╇╈┳┻┃")
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")


@pytest.fixture(scope="module")
def _lane(tmp_path_factory: pytest.TempPathFactory, _upstream_template: Upstream) -> LaneSnapshot:
    return built_snapshot(tmp_path_factory.mktemp("cut-lane"), _upstream_template, worker=None)


@pytest.fixture
def built(_lane: LaneSnapshot) -> BuiltLane:
    return _lane.restore()


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = forge_env({"TERM": "xterm-256color", **(extra or {})})
    for name in ("COLUMNS", "LINES", "CI"):
        env.pop(name, None)
    return env


def at_terminal(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """`dgr-forge ARGS` with stdin, stdout and stderr on one 80x24 pseudo-terminal."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = forge_popen(*args, cwd=cwd, env=_env(env), stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        assert ready, "the command hung at the terminal"
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every slave end closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=60), b"".join(chunks).decode("utf-8", "replace")


def in_a_pipe(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = forge_popen(
        *args, cwd=cwd, env=_env(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def squeezed(text: str) -> str:
    """What a reader copies, with the terminal's own drawing taken out: escapes, carriage
    returns, box lines and every blank. A wrapped value is contiguous here; a cut one is not."""
    text = ANSI.sub("", text)
    return "".join(ch for ch in text if not ch.isspace() and ch not in BOX)


def assert_whole(text: str, values: list[str], where: str) -> None:
    assert "…" not in text and "..." not in ANSI.sub("", text).replace("==> ", ""), (where, text)
    flat = squeezed(text)
    for value in values:
        assert "".join(value.split()) in flat, (where, value, text)


def check_both(args: tuple[str, ...], cwd: Path, values: list[str], code: int = 0) -> str:
    got, out, err = in_a_pipe(*args, cwd=cwd)
    assert got == code, (args, out, err)
    assert not BOX & set(out + err) and "\x1b" not in out + err, (args, out, err)
    for value in values:  # in a pipe: whole on one line, as grep and cut read it
        assert any(value in line for line in (out + err).splitlines()), (args, value, out, err)
    got, shown = at_terminal(*args, cwd=cwd)
    assert got == code, (args, shown)
    assert_whole(shown, values, " ".join(args))
    return shown


def test_every_table_holds_every_path_whole_in_a_pipe_and_at_80_columns(
    built: BuiltLane, tmp_path: Path
) -> None:
    root = built.root
    lanes = run_forge("-C", str(root), "lanes", "--json")
    report = next(r for r in lanes.json["lanes"] if r["lane"] == "cpu")["last_build"]["report"]
    shown = check_both(("-C", str(root), "lanes"), root, [os.path.relpath(report, root)])
    assert "\x1b[3" not in shown  # NO_COLOR: no colour, the rest as at any terminal

    doctor = run_forge("-C", str(root), "doctor", "--json").json
    paths = [t["path"] for t in doctor["tools"] if t["path"]]
    assert paths
    check_both(("-C", str(root), "doctor"), root, paths)

    series = run_forge("-C", str(root), "status", "--json").json["patches"]["series"]
    names = [p["file"] for p in series]
    assert names
    check_both(("-C", str(root), "status"), root, names)
    check_both(("-C", str(root), "patch", "--check"), root, names)

    # a model's files, named at a destination deep enough to overflow any 80-column row
    source = tmp_path / "source"
    write_split_gguf(source, "tiny", 2)
    manifest = manifest_of(source, "http://127.0.0.1:9/m", tmp_path / "tiny.toml", "tiny")
    dest = tmp_path / ("a-long-destination-directory-name-" * 3) / "tiny"
    check_both(
        ("artifacts", "provision", str(manifest), "--dest", str(dest), "--dry-run",
         "--mirror", str(source)),
        tmp_path, [str(dest), *split_names("tiny", 2)],
    )  # fmt: skip
    # a real download's progress (bars at the terminal, whole lines in the pipe)
    shown = check_both(
        ("artifacts", "provision", str(manifest), "--dest", str(dest), "--mirror", str(source)),
        tmp_path, [str(dest)],
    )  # fmt: skip
    assert "━" in shown  # a bar was drawn, NO_COLOR or not


LONG = (
    "/srv/"
    + "/".join(["a-directory-whose-name-is-long"] * 5)
    + "/cpu-20261201T190800Z.intoto.jsonl"
)

REPORTER = f"""
import sys
from dgr_forge.core.output import Reporter
out = Reporter()
out.table("rebase --dry-run", ["patch", "result", "report"],
          [("0001-add-layer-range-ownership.patch", "clean", {LONG!r}), ("0002-b", "empty", None)])
with out.progress() as sink:
    task = sink.add("cpu: compile", total=None)
    for done in (1, 2, 3, 4):
        sink.update(task, done, 4, "cpu: Building CXX object " + {LONG!r})
"""


def test_the_reporter_s_table_and_progress_with_a_long_path(tmp_path: Path) -> None:
    """What `rebase`'s tables and the compile's progress draw (the reporter, driven as they
    drive it): at 80 columns the row wraps and the bar's text folds, never an ellipsis."""
    import sys

    script = tmp_path / "draw.py"
    script.write_text(REPORTER)
    for draw in (in_a_pipe, at_terminal):
        proc_env = _env()
        master_args = ("-c", f"exec(open({str(script)!r}).read())")
        if draw is in_a_pipe:
            p = subprocess.run(
                [sys.executable, *master_args], env=proc_env, capture_output=True, text=True,
                timeout=60,
            )  # fmt: skip
            assert p.returncode == 0, p.stderr
            lines = (p.stdout + p.stderr).splitlines()
            assert any(LONG in line for line in lines), lines
            assert any(line.endswith(f"Building CXX object {LONG}: 100%") for line in lines)
            continue
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        child = subprocess.Popen(
            [sys.executable, *master_args], env=proc_env, stdin=slave, stdout=slave,
            stderr=slave,
        )  # fmt: skip
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        os.close(master)
        assert child.wait(timeout=60) == 0
        shown = b"".join(chunks).decode()
        assert_whole(shown, [LONG, "0001-add-layer-range-ownership.patch"], "reporter")
        assert "━" in shown


def test_help_in_a_pipe_is_plain_and_unwrapped(tmp_path: Path) -> None:
    code, out, _ = in_a_pipe("ci", "render", "--help", cwd=tmp_path)
    assert code == 0
    assert not BOX & set(out) and "\x1b" not in out, out
    # the option's text whole on its line: no URL broken at a hyphen to fit 80 columns
    assert "https://.../dgr_forge-X-py3-none-any.whl#sha256=HEX" in out, out
    assert any(line.startswith("  Example: dgr-forge ci render") and line.endswith(".yml")
               for line in out.splitlines()), out  # fmt: skip
