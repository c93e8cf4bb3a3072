"""Reading a patch file (mbox from `git format-patch`, or a plain unified diff) without git:
a path outside the tree is refused before git writes anything, and a conflict can be
narrowed to single hunks.
"""

from __future__ import annotations

import re

from msgspec import Struct

# far above any real patch; a FIFO or /dev/zero is refused by it
MAX_PATCH_BYTES = 64 << 20

_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_ESCAPES = dict(zip(b'abtnvfr"\\', b'\a\b\t\n\v\f\r"\\', strict=True))


class Hunk(Struct):
    header: str  # the "@@ -a,b +c,d @@" line (without any trailing function context)
    lines: list[bytes]  # the hunk's lines, header included, each with its newline


class FileDiff(Struct):
    old_path: str | None  # None for a new file (/dev/null)
    new_path: str | None  # None for a deleted file
    new_mode: str | None  # "120000" when the patch creates a symlink, ...
    header: list[bytes] = []  # "diff --git" .. "+++" lines
    hunks: list[Hunk] = []

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or "?"

    @property
    def paths(self) -> list[str]:
        return [p for p in dict.fromkeys((self.old_path, self.new_path)) if p is not None]


class ParsedPatch(Struct):
    headers: dict[str, str]  # From, Date, Subject of the mail part (first occurrence)
    files: list[FileDiff]
    # (line number, path) of each ---/+++ header naming an absolute path: refused, since
    # stripping the prefix would silently turn "/etc/x" into "etc/x"
    absolute: list[tuple[int, str]] = []

    @property
    def paths(self) -> list[str]:
        return [p for f in self.files for p in f.paths]


class PatchSyntaxError(ValueError):
    """A diff header git would not write; `line` is 1-based."""

    def __init__(self, problem: str, line: int = 0) -> None:
        super().__init__(problem)
        self.problem = problem
        self.line = line


def unquote(raw: bytes) -> bytes:
    """Undo git's C-style quoting of a path."""
    if not raw.startswith(b'"'):
        return raw
    if len(raw) < 2 or not raw.rstrip(b"\r\n").endswith(b'"'):
        raise PatchSyntaxError("a quoted path without its closing quote")
    out = bytearray()
    i = 1
    while i < len(raw) and raw[i] != ord('"'):
        c = raw[i]
        if c == ord("\\") and i + 1 < len(raw):
            nxt = raw[i + 1]
            if 48 <= nxt <= 55:
                digits = raw[i + 1 : i + 4]
                if len(digits) != 3 or any(not 48 <= d <= 55 for d in digits):
                    raise PatchSyntaxError(
                        f"bad octal escape \\{digits.decode('ascii', 'replace')!s} in a quoted "
                        "path (git writes three octal digits)"
                    )
                out.append(int(digits, 8) & 0xFF)
                i += 4
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return bytes(out)


def _value(raw: bytes) -> bytes:
    raw = raw.rstrip(b"\n").rstrip(b"\r")
    if not raw.startswith(b'"') and b"\t" in raw:
        raw = raw.split(b"\t", 1)[0]  # traditional diffs append a timestamp after a tab
    return unquote(raw)


def _path(raw: bytes, strip_prefix: bool = True) -> str | None:
    value = _value(raw)
    if value == b"/dev/null":
        return None
    if strip_prefix:
        value = value.split(b"/", 1)[1] if b"/" in value else value
    return value.decode("utf-8", "surrogateescape")


def _git_line_paths(rest: bytes) -> tuple[str | None, str | None]:
    rest = rest.rstrip(b"\n")
    if rest.startswith(b'"'):
        end = rest.find(b'"', 1)
        while end > 0 and rest[end - 1] == ord("\\"):
            end = rest.find(b'"', end + 1)
        if end < 0:
            raise PatchSyntaxError("a quoted path without its closing quote")
        return _path(rest[: end + 1]), _path(rest[end + 2 :])
    half, odd = divmod(len(rest) - 5, 2)  # "a/" name " b/" name
    if not odd and rest.startswith(b"a/"):
        name = rest[2 : 2 + half]
        if rest[2 + half :] == b" b/" + name:
            return _path(b"a/" + name), _path(b"b/" + name)
    left, _, right = rest.partition(b" b/")
    return _path(left), _path(b"b/" + right)


def parse(data: bytes) -> ParsedPatch:
    at = [0]  # the line being read, for a PatchSyntaxError
    try:
        return _parse(data.splitlines(keepends=True), at)
    except PatchSyntaxError as err:
        raise PatchSyntaxError(err.problem, at[0] + 1) from None


def _parse(lines: list[bytes], at: list[int]) -> ParsedPatch:
    headers: dict[str, str] = {}
    files: list[FileDiff] = []
    absolute: list[tuple[int, str]] = []

    def header_path(n: int) -> str | None:  # a ---/+++ header's; an absolute one noted
        value = _value(lines[n][4:])
        if value.startswith(b"/") and value != b"/dev/null":
            absolute.append((n + 1, value.decode("utf-8", "surrogateescape")))
        return _path(lines[n][4:])

    i = 0
    in_mail_header = True
    while i < len(lines):
        line = lines[i]
        at[0] = i
        if in_mail_header:
            if line.strip() == b"":
                in_mail_header = False
            elif m := re.match(rb"^(From|Date|Subject): ?(.*)", line):
                headers.setdefault(m.group(1).decode(), m.group(2).decode("utf-8", "replace"))
        starts_git = line.startswith(b"diff --git ")
        starts_trad = (
            line.startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ ")
        )
        if not (starts_git or starts_trad):
            i += 1
            continue
        in_mail_header = False
        fd = FileDiff(old_path=None, new_path=None, new_mode=None)
        if starts_git:
            fd.old_path, fd.new_path = _git_line_paths(line[len(b"diff --git ") :])
            fd.header.append(line)
            i += 1
            while i < len(lines) and not lines[i].startswith((b"diff --git ", b"@@ ")):
                h = lines[i]
                at[0] = i
                if h.startswith(b"--- "):
                    fd.old_path = header_path(i)
                elif h.startswith(b"+++ "):
                    fd.new_path = header_path(i)
                elif h.startswith((b"rename from ", b"copy from ")):
                    fd.old_path = _path(h.split(b" ", 2)[2], strip_prefix=False)
                elif h.startswith((b"rename to ", b"copy to ")):
                    fd.new_path = _path(h.split(b" ", 2)[2], strip_prefix=False)
                elif h.startswith(b"new file mode "):
                    fd.old_path = None
                    fd.new_mode = h.split()[-1].decode()
                elif h.startswith(b"deleted file mode "):
                    fd.new_path = None
                elif h.startswith(b"new mode "):
                    fd.new_mode = h.split()[-1].decode()
                elif not h.startswith(
                    (b"old mode", b"index ", b"similarity", b"dissimilarity", b"Binary", b"GIT ")
                ):
                    break  # end of this file's header (e.g. an mbox signature)
                fd.header.append(h)
                if h.startswith(b"GIT binary patch"):
                    i += 1
                    while i < len(lines) and not lines[i].startswith(b"diff --git "):
                        fd.header.append(lines[i])
                        i += 1
                    break
                i += 1
        else:
            fd.old_path = header_path(i)
            at[0] = i + 1
            fd.new_path = header_path(i + 1)
            fd.header += [line, lines[i + 1]]
            i += 2
        while i < len(lines) and (m := _HUNK.match(lines[i])):
            old_len, new_len = int(m.group(2) or 1), int(m.group(4) or 1)  # no count: 1
            header = lines[i].split(b" @@", 2)
            hunk = Hunk(header=(header[0] + b" @@").decode("utf-8", "replace"), lines=[lines[i]])
            i += 1
            while i < len(lines) and (old_len > 0 or new_len > 0):
                tag = lines[i][:1]
                if tag not in (b" ", b"\n", b"\r", b"-", b"+", b"\\"):
                    break  # a truncated hunk; git apply will refuse it
                old_len -= tag in (b" ", b"\n", b"\r", b"-")
                new_len -= tag in (b" ", b"\n", b"\r", b"+")
                hunk.lines.append(lines[i])
                i += 1
            while i < len(lines) and lines[i].startswith(b"\\"):
                hunk.lines.append(lines[i])  # "\ No newline at end of file"
                i += 1
            fd.hunks.append(hunk)
        files.append(fd)
    return ParsedPatch(headers=headers, files=files, absolute=absolute)


def unsafe_reason(path: str) -> str | None:
    if not path:
        return "empty path"
    if path.startswith("/"):
        return "absolute path"
    parts = path.split("/")
    if any(p == ".." for p in parts):
        return "'..' leaves the tree"
    if any(p.lower().rstrip(". ") == ".git" for p in parts):
        return "writes into git's own .git directory"
    if any(p in ("", ".") for p in parts):
        return "not a normalized path"
    return None


# --- git's mail rules (what `git am` keeps of a message) ---------------------------------


def is_mbox_from(line: str) -> bool:
    """git mailsplit's `is_from_line`: "From " ... "dd:dd:dd" and a year > 90 after it."""
    if len(line) + 1 < 20 or not line.startswith("From "):  # (git counts the newline)
        return False
    colon = line.rfind(":", 4, len(line) - 1)
    if colon < 4 or colon + 2 >= len(line):
        return False
    digits = (line[colon - 4], line[colon - 2], line[colon - 1], line[colon + 1], line[colon + 2])
    if not all(c.isdigit() for c in digits):
        return False
    year = re.match(r"\s*[+-]?\d+", line[colon + 3 :])
    return year is not None and int(year.group()) > 90


def message_break(line: str) -> str | None:
    """Why `git am` would not keep this message line as text (mailinfo's `patchbreak`,
    mailsplit's `is_from_line`); None when it round-trips."""
    if line.startswith("diff -"):
        return "it starts a diff (`diff -`)"
    if line.startswith("Index: "):
        return "it starts a CVS-style diff (`Index: `)"
    if line.startswith("---") and len(line) >= 3:
        rest = line[3:]
        if rest.startswith(" ") and rest[1:2] and not rest[1].isspace():
            return "it starts a diff header (`--- <file>`)"
        if not rest.strip():
            return "it is the `---` separator that ends the message"
    if is_mbox_from(line):
        return "it looks like an mbox `From ` line, which starts a new mail"
    return None


def stripspace(text: str) -> str:
    """git's `stripspace` (what am does to a message)."""
    out: list[str] = []
    for line in (line.rstrip() for line in text.split("\n")):
        if line or (out and out[-1]):
            out.append(line)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out) + "\n" if out else ""
