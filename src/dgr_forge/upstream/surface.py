"""The worker's surface of upstream: the declarations of its public headers, and how the
surface a build recorded moves between two pins.

A small tokenizer, not a C parser: pycparser needs a real preprocessor run, and llama.cpp's
headers hold C++ (`llama-cpp.h`, the `extern "C"` guards) (docs/build-and-reports.md,
'The worker boundary').
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Annotated

from msgspec import UNSET, Struct, UnsetType, field

from dgr_forge.core import gitutil
from dgr_forge.core.structs import d

MAX_HEADER_BYTES = 4 * 1024 * 1024


@functools.cache
def _token() -> re.Pattern[str]:
    """Compiled at its first use (never on a no-op build)."""
    return re.compile(
        r"""
    (?P<ws>\s+)
  | (?P<comment>//[^\n]*|/\*.*?(?:\*/|\Z))
  | (?P<str>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<num>\.?[0-9](?:[eEpP][+-]|[A-Za-z0-9_.'])*)
  | (?P<punct>::|->|\.\.\.|<<=|>>=|[<>=!&|+\-*/%^]=|&&|\|\||\+\+|--|<<|\[\[|\]\]|.)
    """,
        re.VERBOSE | re.DOTALL,
    )


_API_MACRO = re.compile(r"[A-Z][A-Z0-9_]*_API")
_MACRO_CALL = re.compile(r"[A-Z_][A-Z0-9_]*[A-Z0-9]")
_WRAPPER = re.compile(r"(?:[A-Z0-9_]*_)?DEPRECATED")
_DROP_CALLS = frozenset({"__attribute__", "__declspec", "alignas", "__asm__", "asm", "decltype"})
_KEYWORDS = frozenset(
    re.findall(
        r"\w+",
        "void int char short long float double signed unsigned bool const volatile struct "
        "class union enum static inline extern typedef using template typename return sizeof "
        "operator virtual explicit friend constexpr noexcept auto register restrict",
    )
)
_SCOPE_KINDS = ("namespace", "struct", "class", "union")


class SurfaceSymbol(Struct, frozen=True):
    """an upstream symbol the worker imports"""

    name: Annotated[str, d("the symbol (C++: the qualified name)")]
    header: Annotated[str, d("its declaring header, in the upstream tree")]
    symbol: Annotated[str, d("the linker's name")] = ""
    library: Annotated[str, d("the upstream library that defines it")] = ""


class Surface(Struct, frozen=True):
    """What the worker used of upstream, as a build found it and its report records it
    (`attest.provenance.surface_byproduct`)."""

    headers: Annotated[tuple[str, ...], d("the boundary headers its objects read")]
    symbols: Annotated[tuple[SurfaceSymbol, ...], d("the upstream symbols it imports")]
    symbols_checked: Annotated[
        bool | UnsetType, d("false: not ELF objects, only the headers were read")
    ] = field(default=UNSET, name="symbolsChecked")


class SurfaceChange(Struct, frozen=True):
    """a recorded symbol whose declaration differs at the new pin"""

    name: Annotated[str, d("the symbol (C name, or C++ qualified name)")]
    header: Annotated[str, d("its declaring header at the old pin, in the upstream tree")]
    change: Annotated[str, d("`declaration changed` or `removed`")]
    old: Annotated[str, d("its declaration at the old pin (normalized)")]
    new: Annotated[str | None, d("at the new pin; null when removed")]

    def line(self) -> str:
        if self.change == "removed":
            return f"{self.name}: removed (was in {self.header})"
        return f"{self.name}: declaration changed ({self.header})"


def _tokens(text: str) -> list[str]:
    # preprocessor directives, with their continuation lines, go first
    lines: list[str] = []
    skipping = False
    for line in text.splitlines():
        if skipping or line.lstrip().startswith("#"):
            skipping = line.rstrip().endswith("\\")
            line = ""
        lines.append(line)
    found = [m for m in _token().finditer("\n".join(lines)) if m.lastgroup not in ("ws", "comment")]
    return ['"..."' if m.lastgroup == "str" else m.group() for m in found]


def _balanced(toks: list[str], i: int) -> int:
    close, depth = {"(": ")", "[[": "]]", "[": "]", "{": "}", "<": ">"}[toks[i]], 0
    for j in range(i, len(toks)):
        if toks[j] == toks[i]:
            depth += 1
        elif toks[j] == close:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(toks)


def _args(toks: list[str], i: int, end: int) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    depth = 0
    for t in toks[i + 1 : end - 1]:
        if t in "([{":
            depth += 1
        elif t in ")]}":
            depth -= 1
        if t == "," and depth == 0:
            parts.append([])
        else:
            parts[-1].append(t)
    return parts


def _define_away(toks: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(toks):
        t = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else ""
        if _API_MACRO.fullmatch(t):
            i += 1
        elif t == "[[":
            i = _balanced(toks, i)
        elif nxt == "(" and (t in _DROP_CALLS or _WRAPPER.fullmatch(t) or _MACRO_CALL.fullmatch(t)):
            end = _balanced(toks, i + 1)
            if _WRAPPER.fullmatch(t):
                out += _define_away(_args(toks, i + 1, end)[0])
            i = end
        else:
            out.append(t)
            i += 1
    return out


def _unnamed(toks: list[str]) -> list[str]:
    """A function declaration without its parameters' names (they change no caller)."""
    if "(" not in toks:
        return toks
    i = toks.index("(")
    if toks[i - 1 : i] == ["operator"]:
        i = toks.index("(", i + 2) if "(" in toks[i + 2 :] else i
    end = _balanced(toks, i)
    kept: list[str] = []
    for n, p in enumerate(_args(toks, i, end)):
        named = len(p) >= 2 and p[-2] != "::" and ")" not in p
        if named and re.fullmatch(r"[A-Za-z_]\w*", p[-1]) and p[-1] not in _KEYWORDS:
            p = p[:-1]
        kept += ([","] if n else []) + p
    return [*toks[: i + 1], *kept, ")", *toks[end:]]


def _declared_name(stmt: list[str]) -> str | None:
    """The (qualified) name a declaration declares; None for a type, typedef, `using`."""
    while stmt[:2] == ["template", "<"]:  # a template's declaration names the template
        stmt = stmt[_balanced(stmt, 1) :]
    if not stmt or stmt[0] in ("typedef", "using", "friend", "template", "static_assert"):
        return None
    if "(" in stmt:
        i = stmt.index("(")
        if i == 0:
            return None
        if stmt[i - 1] == "operator" and stmt[i + 1 : i + 2] == [")"]:
            name, i = "operator()", i - 1
        elif "operator" in stmt[:i]:
            j = stmt.index("operator")
            name, i = "operator" + "".join(stmt[j + 1 : i]), j
        else:
            name = stmt[i - 1]
            if not re.fullmatch(r"[A-Za-z_]\w*", name) or name in _KEYWORDS:
                return None
            i -= 1
        if i >= 1 and stmt[i - 1] == "~":
            name, i = "~" + name, i - 1
        while i >= 2 and stmt[i - 1] == "::" and re.fullmatch(r"[A-Za-z_]\w*", stmt[i - 2]):
            name, i = f"{stmt[i - 2]}::{name}", i - 2
        return name
    # a variable: the last name before `=`, `[` or the end; an `extern` or a class member
    body = stmt[: stmt.index("=")] if "=" in stmt else stmt
    if "[" in body:
        body = body[: body.index("[")]
    if not body or (body[0] in (*_SCOPE_KINDS, "enum") and len(body) <= 2):
        return None  # a forward declaration of a type
    last = body[-1]
    if not re.fullmatch(r"[A-Za-z_]\w*", last) or last in _KEYWORDS or len(body) < 2:
        return None
    return last


def declarations(text: str) -> dict[str, str]:
    """Qualified name -> the normalized text of its declaration(s) in a header."""
    toks = _define_away(_tokens(text))
    found: dict[str, set[str]] = {}
    scopes: list[str | None] = []  # a name (namespace/class), "" (extern "C"), None: skipped
    stmt: list[str] = []
    i = 0

    def record(s: list[str]) -> None:
        if (name := _declared_name(s)) is None:
            return
        text = " ".join(_unnamed(s))
        for a, b in ((" ,", ","), ("( ", "("), (" )", ")"), (" ::", "::"), (":: ", "::")):
            text = text.replace(a, b)
        found.setdefault("::".join(n for n in (*scopes, name) if n), set()).add(text)

    while i < len(toks):
        t = toks[i]
        if t == "{":
            head = [x for x in stmt if x not in ("export", "inline")]
            end = _balanced(toks, i)
            if head[:1] == ["namespace"]:
                scopes.append("::".join(x for x in head[1:] if x != "::") or "")
            elif head[:1] == ["extern"] and head[1:2] == ['"..."']:
                scopes.append("")
            elif any(k in head for k in _SCOPE_KINDS) and "(" not in head and "=" not in head:
                kw = next(j for j, x in enumerate(head) if x in _SCOPE_KINDS)
                names = [x for x in head[kw + 1 :] if re.fullmatch(r"[A-Za-z_]\w*", x)]
                scopes.append(names[0] if names else None)
                if names:
                    found.setdefault("::".join(n for n in scopes if n), set())
            else:
                if "(" in head and "=" not in head:
                    record(head)  # an inline function's definition declares it
                i, stmt = end, []
                if i < len(toks) and toks[i] == ";":
                    i += 1
                continue
            stmt = []
            i += 1
            if scopes[-1] is None:  # an anonymous struct or union: its members are not names
                scopes.pop()
                i = end
            continue
        if t == "}":
            if scopes:
                scopes.pop()
            stmt = []
        elif t == ";":
            record(stmt)
            stmt = []
        elif t in ("public", "private", "protected") and i + 1 < len(toks) and toks[i + 1] == ":":
            i += 2
            continue
        else:
            stmt.append(t)
        i += 1
    return {name: "\n".join(sorted(texts)) for name, texts in found.items()}


def qualified_name(demangled: str) -> str:
    """`ns::Cls::f(int) const` -> `ns::Cls::f`; `vtable for ns::Cls` -> `ns::Cls`; template
    arguments and a template function's return type dropped."""
    name = demangled
    for prefix in (
        "vtable for ", "VTT for ", "typeinfo for ", "typeinfo name for ",
        "non-virtual thunk to ", "virtual thunk to ", "guard variable for "
    ):  # fmt: skip
        name = name.removeprefix(prefix)
    # template arguments out (they may hold parentheses and spaces)
    plain, depth = [], 0
    for i, c in enumerate(name):
        if c == "<" and not name[:i].endswith("operator") and not name[:i].endswith("operator<"):
            depth += 1
        elif c == ">" and depth:
            depth -= 1
        elif depth == 0:
            plain.append(c)
    name = re.sub(r"\[abi:[^\]]*\]", "", "".join(plain))  # GCC's ABI tags: not in a header
    cut = name.find("(", name.find("operator()") + len("operator()") if "operator()" in name else 0)
    if cut > 0:
        name = name[:cut]
    return name.rsplit(" ", 1)[-1] if " " in name and "operator" not in name else name.strip()


class SurfaceReport(Struct, frozen=True):
    """the worker surface across the pins: each recorded symbol whose declaration changed
    or vanished between the old and the new pin"""

    known: Annotated[bool, d("a worker build recorded a surface (false: unknown)")]
    symbols: Annotated[int, d("the recorded symbols compared")]
    changes: Annotated[list[SurfaceChange], d("per changed or removed symbol")]

    def lines(self) -> list[str]:
        if not self.known:
            return ["worker surface: unknown (no build of the worker has recorded one)"]
        if not self.changes:
            return [f"worker surface: no declaration of its {self.symbols} symbol(s) changed"]
        return [f"worker surface: {c.line()}" for c in self.changes]

    def markdown(self) -> str:
        if not self.known or not self.changes:
            return f"- {self.lines()[0]}\n"
        shown = [f"  - `{c.name}`: {c.change} (`{c.header}`)" for c in self.changes]
        return "- worker surface: declarations changed or removed\n" + "\n".join(shown) + "\n"


class Recorded(Struct, frozen=True):
    """The lanes' last worker builds' surface (`symbols` None: no build recorded one)."""

    symbols: tuple[SurfaceSymbol, ...] | None


def across(src: Path, old: str, new: str, recorded: Recorded) -> SurfaceReport:
    """Each recorded symbol whose declaration at `new` differs from `old`'s or is gone; one
    its header at `old` does not declare (the series adds it) is not compared."""
    if recorded.symbols is None:
        return SurfaceReport(False, 0, [])

    @functools.cache
    def decls(commit: str, header: str) -> dict[str, str]:
        blob = f"{commit}:{header}"
        proc = gitutil.git(src, "cat-file", "-s", blob, check=False)
        if proc.returncode != 0 or int(proc.stdout.strip() or 0) > MAX_HEADER_BYTES:
            return {}
        shown = gitutil.git(src, "cat-file", "blob", blob, check=False, text=False)
        data = shown.stdout if isinstance(shown.stdout, bytes) else b""
        return declarations(data.decode("utf-8", "replace")) if shown.returncode == 0 else {}

    found: list[SurfaceChange] = []
    for name, header in sorted({(s.name, s.header) for s in recorded.symbols}):
        if (before := decls(old, header).get(name)) is None:
            continue
        if (after := decls(new, header).get(name)) is None:
            found.append(SurfaceChange(name, header, "removed", before, None))
        elif after != before:
            found.append(SurfaceChange(name, header, "declaration changed", before, after))
    return SurfaceReport(True, len(recorded.symbols), found)
