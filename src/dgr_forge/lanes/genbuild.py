"""What CMake generated, read back: which launchers the Ninja rules really run (issue 20).

The report names the launcher found here, never the one asked for: an upstream can set
`RULE_LAUNCH_COMPILE` itself (ggml does, to ccache), a toolchain file a compiler launcher.
"""

from __future__ import annotations

import re
from pathlib import Path

from msgspec import Struct, field

from dgr_forge.core.errors import OperationFailed

# patterns as strings: compiled (and cached by `re`) at first use, never on a no-op's start
_RULE = r"(?m)^rule (\S+)\n((?:[ \t]+.*\n?)*)"
_COMMAND = r"(?m)^\s+command = (.*)$"
_VAR = r"(?m)^\s+(LAUNCHER|CODE_CHECK) = (.*)$"
# CMakeCache.txt entries that name a program CMake resolved for the rules
_PROGRAM = (
    r"(?m)^(CMAKE_(?:\w+_)?(?:COMPILER|AR|RANLIB|LINKER|COMMAND|NM|OBJCOPY|OBJDUMP|STRIP|MT"
    r"|ADDR2LINE|DLLTOOL|READELF)):[A-Z]+=(.+)$"
)
_SKIP = ("$PRE_LINK", "$POST_BUILD", ":", "")


class Launchers(Struct):
    compile: set[str] = field(default_factory=set)  # around compiles
    link: set[str] = field(default_factory=set)  # around link / archive steps
    code_check: set[str] = field(default_factory=set)

    def problems(self, chosen: str | None) -> list[str]:
        """How this differs from the forge's choice (`chosen`, or None for no launcher)."""
        out = []
        want = {chosen} if chosen else set()
        if self.compile != want:
            found = ", ".join(sorted(self.compile)) or "none"
            out.append(f"compiles run through {found}, the forge chose {chosen or 'none'}")
        if self.link:
            out.append(f"link steps run through {', '.join(sorted(self.link))}")
        if self.code_check:
            out.append(f"compiles run a code check: {', '.join(sorted(self.code_check))}")
        return out


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise OperationFailed(
            f"{path}: unreadable after configure ({err.strerror})",
            hint="delete the lane's build directory and build again",
        ) from None


def programs(build_dir: Path) -> dict[str, str]:
    """CMakeCache.txt's program entries (CMAKE_C_COMPILER, CMAKE_AR, ...): name -> path."""
    text = _read(build_dir / "CMakeCache.txt")
    return {
        m.group(1): m.group(2).strip() for m in re.finditer(_PROGRAM, text) if m.group(2).strip()
    }


def read_launchers(build_dir: Path) -> Launchers:
    found = Launchers()
    rules = _read(build_dir / "CMakeFiles" / "rules.ninja")
    known = {p for p in programs(build_dir).values() if p.startswith("/")}
    for match in re.finditer(_RULE, rules):
        name, body = match.group(1), match.group(2)
        command = re.search(_COMMAND, body)
        if command is None:
            continue
        text = command.group(1)
        if "_COMPILER__" in name:
            head = text.split("${LAUNCHER}", 1)[0].strip() if "${LAUNCHER}" in text else ""
            if head:
                found.compile.add(head)
        elif "_LINKER__" in name:
            for step in text.split(" && "):
                step = step.replace("${LAUNCHER}", "").strip()
                if step in _SKIP:
                    continue
                at = [step.find(p) for p in known if step.find(p) >= 0]
                head = step[: min(at)].strip() if at else step.split(" ", 1)[0]
                if head:
                    found.link.add(head)
    build = _read(build_dir / "build.ninja")
    for match in re.finditer(_VAR, build):
        value = match.group(2).strip()
        if value:
            (found.compile if match.group(1) == "LAUNCHER" else found.code_check).add(value)
    return found
