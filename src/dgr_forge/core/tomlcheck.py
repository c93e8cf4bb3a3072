"""The one reader for every TOML input: manifest, model manifests, recipes, probes, worker
manifest, CI settings.

`Checker.load` reads and parses a file; each loader then decodes the document into its
typed shape (`core.tominput`). Every malformed input is a `BadInput` (exit 2) reading
``<file>: <key>: <problem>`` with a fix, and no input makes a loader raise anything else.
Parsing is bounded: a file over `MAX_BYTES` is refused by its size before a byte is parsed,
a number of thousands of digits by its line, and nesting deeper than `MAX_DEPTH` (tables or
arrays) is refused instead of exhausting the stack.

A document is parsed once per process for the same bytes: a caller that loads the same
inputs again (a long-lived Python caller, the doctor's probes on every command) gets a
`marshal` copy of the first parse, a new object each time (0.06 ms against 2.7 ms to
parse toolchains/probes.toml). The checks are a function of the bytes alone, so only a
document that passed them is kept.
"""

from __future__ import annotations

import marshal
import re
import reprlib
import tomllib
from pathlib import Path
from typing import Any

from dgr_forge.core.errors import BadInput
from dgr_forge.core.fsutil import read_regular

# The largest real input is a model manifest of a few hundred split parts (~300 bytes each)
# or a long patch series: far below 4 MiB. Anything bigger is not an input we wrote.
MAX_BYTES = 4 << 20
# Our schemas nest at most 4 levels (e.g. tools.X.packages.debian); 32 leaves room and
# keeps every later walk (repr, comparisons) far from Python's recursion limit.
MAX_DEPTH = 32

# parsed documents by their bytes, as marshal data (values TOML gives but marshal cannot
# hold, datetimes, are parsed every time); small inputs, a few dozen of them
_PARSED: dict[bytes, bytes] = {}
_PARSED_MAX = 64
_PARSED_MAX_BYTES = 256 << 10

_repr = reprlib.Repr()
_repr.maxstring = 80
_repr.maxother = 80
_repr.maxlevel = 2


def shown_value(value: Any) -> str:
    """A bounded repr for messages: never megabytes of a hostile value, never recursion."""
    return _repr.repr(value)


def type_name(value: Any) -> str:
    """The TOML name of a parsed value's type, as messages show it."""
    names = {bool: "boolean", int: "integer", float: "float", str: "string"}
    names |= {list: "array", dict: "table"}
    return names.get(type(value), type(value).__name__)


def read_bytes(
    path: Path,
    *,
    what: str,
    hint: str,
    shown: str | None = None,
    limit: int = MAX_BYTES,
    root: Path | None = None,
) -> bytes:
    """The bytes of an input file, refused by its size before reading when over `limit`.

    Missing, unreadable, not a regular file, a NUL in the path, or too big: exit 2 naming
    the file (`core.fsutil.read_regular`, the one bounded reader). Under `root` (the
    forge root), a link at any component below it is exit 2 too, nothing of it read."""
    return read_regular(path, what=what, hint=hint, limit=limit, shown=shown, root=root)


_LONG_NUMBER = re.compile(r"[0-9_]{1000,}")


def _long_number_line(text: str) -> int | None:
    """The 1-based line of the first run of a thousand digits or more, if any."""
    m = _LONG_NUMBER.search(text)
    return text.count("\n", 0, m.start()) + 1 if m else None


def _depth_exceeds(data: Any, limit: int) -> bool:
    """True when tables/arrays nest deeper than `limit` (an iterative walk: no recursion)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values() if isinstance(v, dict | list))
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value if isinstance(v, dict | list))
    return False


def fail(shown: str, key: str, problem: str, hint: str) -> BadInput:
    """The one refusal of an input: file, key, problem; the fix as the hint (exit 2)."""
    return BadInput(f"{shown}: {key}: {problem}", hint=hint, details={"file": shown, "key": key})


class Checker:
    """Reads and parses one TOML file, bounded; every error names the file."""

    def __init__(self, shown: str) -> None:
        self.shown = shown

    def parse(self, raw: bytes, *, limit: int = MAX_BYTES) -> dict[str, Any]:
        """TOML bytes to a dict: bad encoding, bad syntax, too big or too deep is exit 2."""
        if len(raw) > limit:
            raise fail(
                self.shown,
                "(file)",
                f"{len(raw)} bytes, over the {limit}-byte limit",
                "this is not our input",
            )
        kept = _PARSED.get(raw)
        if kept is not None:
            copy: dict[str, Any] = marshal.loads(kept)
            return copy
        data = self._parse(raw)
        if len(raw) <= _PARSED_MAX_BYTES:
            try:
                kept = marshal.dumps(data)
            except ValueError:  # a datetime: not marshal data
                return data
            if len(_PARSED) >= _PARSED_MAX:
                del _PARSED[next(iter(_PARSED))]  # the oldest
            _PARSED[raw] = kept
        return data

    def _parse(self, raw: bytes) -> dict[str, Any]:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise fail(
                self.shown,
                "(file)",
                f"not UTF-8 ({err.reason} at byte {err.start})",
                "save as UTF-8",
            ) from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise fail(
                self.shown, "(syntax)", f"invalid TOML: {err}", "fix the TOML syntax at that line"
            ) from None
        except RecursionError:  # tomllib recurses once per nested array / inline table
            data = None
        except ValueError:  # Python's own int limit: a number of thousands of digits
            line = _long_number_line(text)
            where = f"line {line}" if line else "(file)"
            raise fail(
                self.shown,
                where,
                "a number with thousands of digits (over Python's limit)",
                "no value the forge reads is that large: fix the number at that line",
            ) from None
        if data is None or _depth_exceeds(data, MAX_DEPTH):
            raise fail(
                self.shown,
                "(file)",
                f"tables or arrays nested more than {MAX_DEPTH} levels deep",
                "this is not a schema the forge reads: restore the file from the repository",
            )
        return data

    def load(
        self, path: Path, *, what: str, hint: str, root: Path | None, limit: int = MAX_BYTES
    ) -> tuple[bytes, dict[str, Any]]:
        """Read and parse `path`: its bytes (for hashing) and the document; `root`: the
        forge root it may lie under (no link below it is followed, see `read_bytes`)."""
        raw = read_bytes(path, what=what, hint=hint, shown=self.shown, limit=limit, root=root)
        return raw, self.parse(raw, limit=limit)
