"""Where output goes: the answer on stdout (with --json the JSON object is all of it);
progress, warnings and errors on stderr. Nothing is ever cut: a pipe or file gets plain
text (tables as aligned columns, progress as whole lines). `NO_COLOR` removes colour
only; `CI` means a log: no bars.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from dgr_forge.core.urls import shown

# Rich is imported where used (about 20 ms): most plain lines never need it.
if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

# What Rich would change in a plain line (control codes it strips, tabs it expands, an
# emoji code it replaces): such a line goes through Rich, every other one straight out.
_CONTROL = re.compile(r"[\x07\x08\x0b\x0c\r\t]")
_EMOJI_CODE = re.compile(r"(:(\S*?)(?:(?:\-)(emoji|text))?:)")  # rich._emoji_replace's own
# A code is replaced only when Rich knows its name, and all of Rich's names but these have
# a letter (tests/test_terminal.py checks): a time of day's ":13:" needs no Rich (~35 ms).
LETTERLESS_EMOJI = frozenset({"+1", "-1", "100", "1234", "__1"})


def _needs_rich(text: str) -> bool:
    if _CONTROL.search(text):
        return True
    names = (code.group(2) for code in _EMOJI_CODE.finditer(text))
    return any(n in LETTERLESS_EMOJI or any(c.isalpha() for c in n) for n in names)


def _terminal() -> bool:
    """Both streams on a terminal: piping or redirecting either one means a log, not a user."""
    return sys.stdout.isatty() and sys.stderr.isatty()


def is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, OSError, ValueError):  # closed or not a real file
        return False


def _bar_text(text: str) -> str:
    from rich.markup import escape

    return escape(shown(text))


class ProgressSink:
    """A Rich bar on a terminal, a few plain lines elsewhere."""

    def __init__(self, reporter: Reporter, progress: Progress | None) -> None:
        self._reporter, self._progress = reporter, progress
        self._last_pct: dict[str, int] = {}

    def add(self, description: str, total: float | None = None) -> TaskID | str:
        if self._progress is not None:
            return self._progress.add_task(_bar_text(description), total=total)
        self._reporter.info(f"{description} ...")
        return description

    def update(
        self,
        task: TaskID | str,
        completed: float,
        total: float | None = None,
        description: str | None = None,
    ) -> None:
        if self._progress is not None:
            assert not isinstance(task, str)
            text = None if description is None else _bar_text(description)
            self._progress.update(task, completed=completed, total=total, description=text)
            return
        # plain mode: a line at every 25 % so logs stay short
        if total:
            pct = int(100 * completed / total) // 25 * 25
            key = str(task)
            if pct > self._last_pct.get(key, -1):
                self._last_pct[key] = pct
                self._reporter.info(f"{description or task}: {pct}%")


def _cell(value: Any) -> str:
    return "" if value is None else shown(" ".join(str(value).splitlines()))


class Reporter:
    """`json_mode`: the answer goes to stderr too (stdout holds the JSON object only).
    `quiet`: errors only (no answer, no progress, no warnings)."""

    def __init__(self, json_mode: bool = False, quiet: bool = False) -> None:
        self.json_mode, self.quiet = json_mode, quiet
        self._consoles: dict[bool, Console] = {}

    def _stream(self, answer: bool) -> TextIO:
        # looked up at each write: `cli.main` points sys.stdout elsewhere under --json
        return sys.stdout if answer and not self.json_mode else sys.stderr

    def _plain_for(self, answer: bool) -> bool:
        # both streams on a terminal, or plain text on both (docs/json.md): `status | less`
        # and `build 2> log` are read as a log, not by a person at a terminal
        return (
            bool(os.environ.get("NO_COLOR")) or not _terminal() or not is_tty(self._stream(answer))
        )

    def _console_for(self, answer: bool) -> Console:
        to_stdout = answer and not self.json_mode
        console = self._consoles.get(to_stdout)
        if console is None or console.file is not self._stream(answer):
            from rich.console import Console

            plain = self._plain_for(answer)
            console = self._consoles[to_stdout] = Console(
                file=self._stream(answer),
                no_color=plain,
                # plain: no escape codes at all, not even bold
                color_system=None if plain else "auto",
                highlight=False,
            )
        return console

    @property
    def console(self) -> Console:  # stderr's: progress bars draw here
        return self._console_for(False)

    def _line(self, text: str, answer: bool = False) -> None:
        if self._plain_for(answer) and not _needs_rich(text):
            # exactly what Rich writes for this line in plain mode, without importing it
            stream = self._stream(answer)
            stream.write(text + "\n")
            stream.flush()
            return
        self._console_for(answer).print(text, markup=False, soft_wrap=True)

    # Every line goes through `urls.shown`: credentials masked (the forge's words and a
    # child's output alike) and control characters escaped, whatever the input held.
    def answer(self, message: str) -> None:
        if not self.quiet:
            self._line(shown(message), answer=True)

    def document(self, text: str) -> None:
        """A document the forge generated, as the answer byte for byte: nothing masked; none
        with --json (the JSON object holds it)."""
        if not self.quiet and not self.json_mode:
            stream = self._stream(True)
            stream.write(text)
            stream.flush()

    def info(self, message: str) -> None:
        if not self.quiet:
            self._line(shown(message))

    def step(self, message: str) -> None:
        if not self.quiet:
            self._line(f"==> {shown(message)}")

    def warn(self, message: str) -> None:
        if not self.quiet:
            self._line(f"warning: {shown(message)}")

    def error(self, message: str) -> None:
        self._line(f"error: {shown(message)}")

    def child(self, cmd: Sequence[str], cwd: Path | None) -> None:
        """A child process about to start, on stderr (`running: git -C DIR fetch ...`):
        `cli.app.run` has `proc` tell it of each one with --verbose."""
        import shlex

        words = list(cmd)
        if words and Path(words[0]).name == "git":
            from dgr_forge.core.gitutil import CONFIG

            # the settings every git call gets (gitutil.CONFIG) said once, not per line;
            # a call's own `-c` (its protocol policy) stays
            while len(words) > 2 and words[1] == "-c" and words[2] in CONFIG:
                del words[1:3]
            if cwd is not None:
                words[1:1] = ["-C", str(cwd)]  # `git -C DIR ...`, the form a user can paste
        elif cwd is not None:
            words = ["cd", str(cwd), "&&", *words]
        self._line(f"running: {shown(shlex.join(words))}")

    def table(
        self,
        title: str | None,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        empty: str | None = None,
    ) -> None:
        """Rows as part of the answer: a Rich table on a terminal, else aligned lines; no
        rows: one line saying so (`empty`, else "<title>: none")."""
        if self.quiet:
            return
        if not rows:
            self.answer(empty or f"{title or 'table'}: none")
            return
        cells = [[_cell(c) for c in row] for row in rows]
        names = [str(c) for c in columns]
        if not _terminal() or not is_tty(self._stream(True)):
            widths = [max(len(r[i]) for r in [names, *cells]) for i in range(len(names))]
            if title:
                self.answer(f"{title}:")
            for row in [names, *cells]:
                self.answer(
                    "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                )
            return
        from rich.measure import Measurement
        from rich.table import Table

        table = Table(title=title, show_lines=False)
        for col in names:
            table.add_column(col, no_wrap=True, overflow="ignore")
        for row in cells:
            table.add_row(*row)
        console = self._console_for(True)
        natural = Measurement.get(console, console.options.update_width(1 << 20), table)
        if natural.maximum <= console.width:
            console.print(table)
            return
        # too wide to box without cutting a cell: each row as `column  value` lines, the
        # names styled as a table's header, a blank line between rows
        from rich.text import Text

        width = max(len(c) for c in names)
        if title:
            self.answer(f"{title}:")
        for n, row in enumerate(cells):
            if n:
                self.answer("")
            for name, value in zip(names, row, strict=True):
                if value:
                    line = Text.assemble(((name or "-").ljust(width), "bold"), "  ", value)
                    console.print(line, soft_wrap=True)

    @contextmanager
    def progress(self, transfer: bool = False) -> Iterator[ProgressSink]:
        if self.quiet or self.json_mode or not _terminal() or os.environ.get("CI"):
            yield ProgressSink(self, None)
            return
        from rich import progress as bars
        from rich.table import Column

        columns: list[Any] = [bars.BarColumn()]
        if transfer:
            columns += [bars.DownloadColumn(), bars.TransferSpeedColumn()]
        columns.append(bars.TimeRemainingColumn())
        # the text last, folded onto the next line when long: a path in it is never cut
        text = bars.TextColumn("{task.description}", table_column=Column(overflow="fold"))
        with bars.Progress(*columns, text, console=self.console, transient=False) as progress:
            yield ProgressSink(self, progress)
