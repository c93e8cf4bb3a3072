"""The one schema reader for every TOML input: manifest, model manifests, recipes, probes,
worker manifest.

Each loader describes its schema with a `Checker`; every malformed input is a `BadInput`
(exit 2) reading ``<file>: <key>: <problem>`` with a fix, and no input makes a loader raise
anything else. Types are exact: a bool is not an integer (``schema = true``) and a float is
not one (``schema = 1.0``). Parsing is bounded: a file over `MAX_BYTES` is refused by its
size before a byte is parsed, and nesting deeper than `MAX_DEPTH` (tables or arrays) is
refused instead of exhausting the stack.
"""

from __future__ import annotations

import re
import reprlib
import tomllib
from collections.abc import Iterable
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
    path: Path, *, what: str, hint: str, shown: str | None = None, limit: int = MAX_BYTES
) -> bytes:
    """The bytes of an input file, refused by its size before reading when over `limit`.

    Missing, unreadable, not a regular file, a NUL in the path, or too big: exit 2 naming
    the file (`core.fsutil.read_regular`, the one bounded reader)."""
    return read_regular(path, what=what, hint=hint, limit=limit, shown=shown)


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


class Checker:
    """Reads one TOML file against its schema; every error names the file and the key."""

    def __init__(self, shown: str) -> None:
        self.shown = shown

    # -- errors

    def fail(self, key: str, problem: str, fix: str) -> BadInput:
        return BadInput(
            f"{self.shown}: {key}: {problem}", hint=fix, details={"file": self.shown, "key": key}
        )

    @staticmethod
    def key(where: str, key: str) -> str:
        return f"{where}.{key}" if where else key

    # -- reading

    def read(self, path: Path, *, what: str, hint: str, limit: int = MAX_BYTES) -> bytes:
        return read_bytes(path, what=what, hint=hint, shown=self.shown, limit=limit)

    def parse(self, raw: bytes, *, limit: int = MAX_BYTES) -> dict[str, Any]:
        """TOML bytes to a dict: bad encoding, bad syntax, too big or too deep is exit 2."""
        if len(raw) > limit:
            raise self.fail(
                "(file)", f"{len(raw)} bytes, over the {limit}-byte limit", "this is not our input"
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise self.fail(
                "(file)", f"not UTF-8 ({err.reason} at byte {err.start})", "save as UTF-8"
            ) from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise self.fail(
                "(syntax)", f"invalid TOML: {err}", "fix the TOML syntax at that line"
            ) from None
        except RecursionError:  # tomllib recurses once per nested array / inline table
            data = None
        except ValueError:  # Python's own int limit: a number of thousands of digits
            line = _long_number_line(text)
            where = f"line {line}" if line else "(file)"
            raise self.fail(
                where,
                "a number with thousands of digits (over Python's limit)",
                "no value the forge reads is that large: fix the number at that line",
            ) from None
        if data is None or _depth_exceeds(data, MAX_DEPTH):
            raise self.fail(
                "(file)",
                f"tables or arrays nested more than {MAX_DEPTH} levels deep",
                "this is not a schema the forge reads: restore the file from the repository",
            )
        return data

    def load(
        self, path: Path, *, what: str, hint: str, limit: int = MAX_BYTES
    ) -> tuple[bytes, dict[str, Any]]:
        """Read and parse `path`: its bytes (for hashing) and the document."""
        raw = self.read(path, what=what, hint=hint, limit=limit)
        return raw, self.parse(raw, limit=limit)

    # -- structure

    def schema(self, data: dict[str, Any], expected: int) -> None:
        """`schema = <expected>`, an integer: not `true`, not `1.0`, not `"1"`."""
        value = data.get("schema")
        if type(value) is not int or value != expected:
            got = "nothing" if value is None else f"{type_name(value)} {shown_value(value)}"
            raise self.fail("schema", f"expected {expected}, got {got}", f"set schema = {expected}")

    def table(self, value: Any, key: str, *, fix: str | None = None) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(
                key, f"must be a table, got {type_name(value)}", fix or f"write [{key}]"
            )
        return value

    def known_keys(self, data: dict[str, Any], allowed: Iterable[str], where: str) -> None:
        allowed = set(allowed)
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise self.fail(
                self.key(where, unknown[0]),
                "unknown key",
                f"remove it; allowed keys{' in ' + where if where else ''}: "
                + ", ".join(sorted(allowed)),
            )

    def section(
        self, data: dict[str, Any], key: str, allowed: Iterable[str], *, required: bool = False
    ) -> dict[str, Any]:
        """The table `data[key]` (empty when absent and optional) with only `allowed` keys."""
        if key not in data and not required:
            return {}
        table = self.table(data.get(key), key)
        self.known_keys(table, allowed, key)
        return table

    # -- values

    def string(
        self,
        data: dict[str, Any],
        key: str,
        where: str,
        required: bool = True,
        *,
        nonempty: bool = False,
        fix: str | None = None,
    ) -> str | None:
        full = self.key(where, key)
        if key not in data:
            if required:
                under = f" under [{where}]" if where else ""
                raise self.fail(full, "missing", fix or f'add {key} = "..."{under}')
            return None
        value = data[key]
        if not isinstance(value, str):
            raise self.fail(
                full, f"must be a string, got {type_name(value)}", fix or "quote the value"
            )
        if "\x00" in value:  # never meaningful, and a path with one makes os calls raise
            raise self.fail(full, "contains a NUL byte (a control character)", "remove it")
        if nonempty and not value.strip():
            raise self.fail(full, "empty", fix or "give it a value")
        return value

    def integer(
        self,
        data: dict[str, Any],
        key: str,
        where: str,
        required: bool = True,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
        fix: str | None = None,
    ) -> int | None:
        """An integer: `true` and `1.0` are refused (type check, not equality)."""
        full = self.key(where, key)
        if key not in data:
            if required:
                raise self.fail(full, "missing", fix or f"add {key} = <integer>")
            return None
        value = data[key]
        if type(value) is not int:
            raise self.fail(
                full,
                f"{shown_value(value)} is not an integer (a {type_name(value)})",
                fix or f"write {key} as a whole number without quotes or a decimal point",
            )
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            bounds = (
                f"between {minimum} and {maximum}"
                if minimum is not None and maximum is not None
                else f"at least {minimum}"
                if minimum is not None
                else f"at most {maximum}"
            )
            raise self.fail(full, f"{value} is out of range: must be {bounds}", fix or bounds)
        return value

    def boolean(
        self, data: dict[str, Any], key: str, where: str, default: bool, *, fix: str | None = None
    ) -> bool:
        value = data.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(
                self.key(where, key),
                f"must be true or false, got {type_name(value)}",
                fix or f"{key} = {str(default).lower()}",
            )
        return value

    def strings(
        self,
        data: dict[str, Any],
        key: str,
        where: str,
        default: Iterable[str] = (),
        *,
        fix: str | None = None,
    ) -> tuple[str, ...]:
        """An array of strings (`default` when absent)."""
        value = data.get(key, list(default))
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(
                self.key(where, key), "must be an array of strings", fix or f'write {key} = ["..."]'
            )
        if any("\x00" in v for v in value):
            raise self.fail(
                self.key(where, key), "contains a NUL byte (a control character)", "remove it"
            )
        return tuple(value)
