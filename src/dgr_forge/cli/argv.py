"""The command line, read once: the global options hoisted to the front, the words that
may name a command, whether `--json` was asked, and a NUL byte refused up front.

`cli.main` reads the line with `read`; `cli.commands` picks the module to import from
the same reading; nothing else walks argv.
"""

from __future__ import annotations

from dataclasses import dataclass

# Options that belong to the whole tool; accepted anywhere on the command line
# (`dgr-forge build --lane cuda --json` as CI writes it) and moved to the front.
GLOBAL_FLAGS = frozenset({"--json", "--quiet", "-q", "--verbose", "-v"})
GLOBAL_VALUED = frozenset({"--root", "-C", "--workspace"})
ATTACHED = "-C"  # `-CDIR`, the short option's value attached as make takes it


@dataclass(frozen=True)
class Argv:
    """The command line as `read` found it."""

    args: list[str]  # what Click parses: the global options first, then the rest as given
    words: list[str]  # the words before `--` that are not options: the command path's start
    first: str | None  # the first token after the global options (`--version`, a command)
    head: list[str]  # the tokens before `--`
    nul: str | None  # where a NUL byte is (the option, or `argument N`), None when none

    @property
    def as_json(self) -> bool:
        return "--json" in self.head


def read(argv: list[str]) -> Argv:
    front: list[str] = []
    rest: list[str] = []
    words: list[str] = []
    head: list[str] = []
    nul: str | None = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest.extend(argv[i:])
            break
        if nul is None and "\x00" in arg:
            before = argv[i - 1] if i > 0 else ""
            name = arg.split("=", 1)[0] if arg.startswith("-") else None
            nul = name or (before if before.startswith("-") else f"argument {i + 1}")
        name = arg.split("=", 1)[0]
        attached = arg.startswith(ATTACHED) and len(arg) > len(ATTACHED)
        if arg in GLOBAL_FLAGS or attached or (name in GLOBAL_VALUED and "=" in arg):
            front.append(arg)
        elif arg in GLOBAL_VALUED and i + 1 < len(argv):
            front.extend(argv[i : i + 2])
            head.extend(argv[i : i + 2])
            if nul is None and "\x00" in argv[i + 1]:
                nul = arg
            i += 2
            continue
        else:
            rest.append(arg)
            if not arg.startswith("-"):
                words.append(arg)
        head.append(arg)
        i += 1
    first = rest[0] if rest and rest[0] != "--" else None
    return Argv(front + rest, words, first, head, nul)
