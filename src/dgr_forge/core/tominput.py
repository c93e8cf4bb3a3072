"""The TOML inputs: one bounded reader (`MAX_BYTES`, `MAX_DEPTH`, no huge numbers) and one
decoder into a `Record`, which turns msgspec's first complaint into ``<file>: <key>:
<problem>`` with the fix as the hint (exit 2); a field's fix lives beside its type (`about`).
The same bytes are parsed once per process: later loads get a `marshal` copy (0.06 ms
against 2.7 ms to parse toolchains/probes.toml).
"""

from __future__ import annotations

import marshal
import re
import reprlib
import tomllib
import types
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar, Union, cast, get_args, get_origin

import msgspec

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

# a bounded repr for messages: never megabytes of a hostile value, never recursion
_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 80
_repr.maxlevel = 2
shown_value = _repr.repr


# the TOML names of a parsed value's type, as messages show them
_TOML_TYPES = {bool: "boolean", int: "integer", float: "float", str: "string"}
_TOML_TYPES |= {list: "array", dict: "table"}


def _too_deep(data: Any) -> bool:
    stack: list[tuple[Any, int]] = [(data, 1)]  # iterative: no recursion
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values() if isinstance(v, dict | list))
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value if isinstance(v, dict | list))
    return False


def fail(shown: str, key: str, problem: str, hint: str) -> BadInput:
    return BadInput(f"{shown}: {key}: {problem}", hint=hint, details={"file": shown, "key": key})


class Checker:
    """Reads and parses one TOML file, bounded; every error names `shown`."""

    def __init__(self, shown: str) -> None:
        self.shown = shown

    def parse(self, raw: bytes, *, limit: int = MAX_BYTES) -> dict[str, Any]:
        def refuse(problem: str, hint: str, where: str = "(file)") -> BadInput:
            return fail(self.shown, where, problem, hint)

        if len(raw) > limit:
            raise refuse(f"{len(raw)} bytes, over the {limit}-byte limit", "this is not our input")
        if (kept := _PARSED.get(raw)) is not None:
            return cast(dict[str, Any], marshal.loads(kept))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise refuse(f"not UTF-8 ({err.reason} at byte {err.start})", "save as UTF-8") from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise refuse(
                f"invalid TOML: {err}", "fix the TOML syntax at that line", "(syntax)"
            ) from None
        except RecursionError:  # tomllib recurses once per nested array / inline table
            data = None
        except ValueError:  # Python's own int limit: a number of thousands of digits
            m = re.search(r"[0-9_]{1000,}", text)
            line = text.count("\n", 0, m.start()) + 1 if m else 0
            raise refuse(
                "a number with thousands of digits (over Python's limit)",
                "no value the forge reads is that large: fix the number at that line",
                f"line {line}" if m else "(file)",
            ) from None
        if data is None or _too_deep(data):
            raise refuse(
                f"tables or arrays nested more than {MAX_DEPTH} levels deep",
                "this is not a schema the forge reads: restore the file from the repository",
            )
        if len(raw) <= _PARSED_MAX_BYTES:
            try:
                kept = marshal.dumps(data)
            except ValueError:  # a datetime: not marshal data
                return data
            if len(_PARSED) >= _PARSED_MAX:
                del _PARSED[next(iter(_PARSED))]  # the oldest
            _PARSED[raw] = kept
        return data

    def load(
        self, path: Path, *, what: str, hint: str, root: Path | None
    ) -> tuple[bytes, dict[str, Any]]:
        """Its bytes (to hash) and the document; under `root` no link is followed."""
        raw = read_regular(path, what=what, hint=hint, shown=self.shown, limit=MAX_BYTES, root=root)
        return raw, self.parse(raw)


class Record(msgspec.Struct, forbid_unknown_fields=True, frozen=True, dict=True):
    """An input as written: an unknown key is refused. `LOADED` names the fields the loader
    sets (path, hash), never the file's keys; the schemas leave them out."""

    LOADED: ClassVar[tuple[str, ...]] = ()


S = TypeVar("S", bound=msgspec.Struct)


def about(
    meaning: str, *, fix: str | None = None, problem: str | None = None, **rules: Any
) -> msgspec.Meta:
    """A key's meaning (the schemas' description), bounds (`ge`, `pattern`...), its refusals'
    `fix`, and `problem` for a wrong value (``{value}``, ``{type}``, ``{name}``: the key's)."""
    extra = {k: v for k, v in (("fix", fix), ("problem", problem)) if v is not None}
    return msgspec.Meta(description=meaning, extra=extra or None, **rules)


# a string that is neither empty nor only whitespace
NonEmpty = Annotated[str, msgspec.Meta(pattern=r"\S")]
# every input's `schema = 1`: the format's version, an integer (not `true`, `1.0`, `"1"`)
Version1 = Annotated[Literal[1], about("the file format's version", fix="set schema = 1")]


class CheckedStr(str):
    """A string checked as it is decoded (named before a key missing beside it): a subclass
    says its `problem` (None: fine)."""

    fix: ClassVar[str] = "fix it"

    @classmethod
    def problem(cls, value: str) -> str | None:
        raise NotImplementedError


def _dec_hook(t: type, value: Any) -> Any:
    if isinstance(t, type) and issubclass(t, CheckedStr):
        if not isinstance(value, str):
            raise TypeError(f"Expected `str`, got `{type(value).__name__}`")
        if (problem := t.problem(value)) is not None:
            raise ValueError(problem)
        return t(value)
    raise NotImplementedError(t)


_NUL = "contains a NUL byte (a control character)"
_MAX_KEY = 80  # no key we read is longer; a longer one is shown cut


def decode(shown: str, data: dict[str, Any], shape: type[S], /, **loaded: Any) -> S:
    """`data` as `shape` (`loaded`: its `LOADED` fields), or exit 2 naming file and key."""
    if set(data) & set(getattr(shape, "LOADED", ())):  # the loader's, never the file's
        raise _explain(shown, data, shape, "Object contains unknown field")
    try:
        value = msgspec.convert(data, shape, strict=True, dec_hook=_dec_hook)
    except msgspec.ValidationError as err:
        raise _explain(shown, data, shape, str(err)) from None
    value = msgspec.structs.replace(value, **loaded) if loaded else value
    where = _nul_at(data)
    if where is not None:  # never meaningful, and a path with one makes os calls raise
        try:
            spot = _walk(shape, data, where)
            key, own = spot.key, _extra(spot, "fix")
        except _UNFOLLOWED:
            key, own = "", None
            for segment in where:
                key = f"{key}[{segment}]" if isinstance(segment, int) else _key(key, str(segment))
        raise fail(shown, key, _NUL, f"remove it; {own}" if own else "remove it")
    return value


def _key(where: str, key: str) -> str:
    key = key if key.isprintable() else ascii(key)  # a control character is shown escaped
    key = key if len(key) <= _MAX_KEY else f"{key[:_MAX_KEY]}..."  # a hostile key, bounded
    return f"{where}.{key}" if where else key


Segment = str | int | None  # a key, an array index, or "the failing key" of a table


def _nul_at(data: Any) -> list[Segment] | None:
    stack: list[tuple[list[Segment], Any]] = [([], data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            for k, v in reversed(value.items()):
                if "\x00" in k:
                    return [*where, k]
                stack.append(([*where, k], v))
        elif isinstance(value, list):
            stack.extend(([*where, i], v) for i, v in reversed(list(enumerate(value))))
        elif isinstance(value, str) and "\x00" in value:
            return where
    return None


_AT = r"(?s)^(?P<what>.*) - at `(?P<path>\$[^`]*)`$"
# msgspec's `$.a.b[0][...].c` (`[...]`: a key msgspec does not name)
_SEGMENT = r"\.([^.\[]+)|\[(\d+)\]|(\[\.\.\.\])"
_ABSENT = object()
_ABSENT_TYPES = (type(None), msgspec.UnsetType)  # an absent key's value: TOML has no null
# what following a path this reader cannot follow raises (it then names the path as is)
_UNFOLLOWED = (LookupError, TypeError, AttributeError)
_TYPE_WORDS = {str: "a string", int: "an integer", bool: "a boolean", float: "a number"}


class _Spot(msgspec.Struct):  # where a complaint points
    type: Any
    value: Any
    key: str = ""
    leaf: str = ""  # the last key, as a fix names it
    metas: list[msgspec.Meta] = []
    default: Any = _ABSENT  # the field's default, when it has one
    container: Any = None  # the array a scalar element belongs to, when the error is one


def _unwrap(t: Any, value: Any, metas: list[msgspec.Meta]) -> Any:
    """`t` without Annotated (its Meta kept), None and UNSET; a union narrowed to the one
    member of the value's kind, if one."""
    while True:
        if (origin := get_origin(t)) is Annotated:
            base, *extra = get_args(t)
            metas.extend(m for m in extra if isinstance(m, msgspec.Meta))
            t = base
            continue
        if origin is Union or origin is types.UnionType:
            members = [m for m in get_args(t) if m not in _ABSENT_TYPES]
            fitting = [m for m in members if _kind(m) == _kind(type(value))]
            if len(members) == 1 or len(fitting) == 1:
                t = members[0] if len(members) == 1 else fitting[0]
                continue
        return t


def _kind(t: Any) -> str:
    t = get_args(t)[0] if get_origin(t) is Annotated else t
    origin = get_origin(t) or t
    if (isinstance(origin, type) and issubclass(origin, msgspec.Struct)) or origin is dict:
        return "table"
    return "array" if origin in (list, tuple) else "scalar"


def _is_struct(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, msgspec.Struct)


def _walk(shape: type[msgspec.Struct], data: Any, path: list[Segment]) -> _Spot:
    spot = _Spot(type=shape, value=data)
    for segment in path:
        t = _unwrap(spot.type, spot.value, spot.metas)
        if isinstance(segment, int):
            elem = Any if t is Any else get_args(t)[0]
            whole = spot
            spot = _Spot(
                type=elem, value=spot.value[segment], key=f"{spot.key}[{segment}]", leaf=spot.leaf
            )
            if _unwrap(elem, _ABSENT, []) is str or (elem is Any and isinstance(spot.value, str)):
                spot.container = whole
        elif _is_struct(t):
            assert segment is not None
            info = {f.encode_name: f for f in msgspec.structs.fields(t)}[segment]
            spot = _Spot(
                type=info.type,
                value=spot.value.get(segment, _ABSENT),
                key=_key(spot.key, segment),
                leaf=segment,
                default=info.default,
            )
        else:  # a table of user-named keys
            value_type = Any if t is Any else get_args(t)[1]
            name = segment if segment is not None else _failing_key(spot.value, value_type)
            spot = _Spot(
                type=value_type, value=spot.value[name], key=_key(spot.key, name), leaf=name
            )
    if spot.container is not None:  # an array of strings is right or wrong as a whole
        spot = spot.container
    spot.type = _unwrap(spot.type, spot.value, spot.metas)
    return spot


def _failing_key(table: dict[str, object], value_type: Any) -> str:
    """The key msgspec complained of: the first whose value is not `value_type`."""
    for k, v in table.items():
        try:
            msgspec.convert(v, value_type, strict=True, dec_hook=_dec_hook)
        except msgspec.ValidationError:
            return k
    raise LookupError("no failing key")


def _extra(spot: _Spot, name: str) -> str | None:
    for meta in reversed(spot.metas):
        if meta.extra and name in meta.extra:
            return str(meta.extra[name])
    return None


def _fix(spot: _Spot, default: str) -> str:
    return _extra(spot, "fix") or default


_BOUND = r"Expected `(int|float)` (>=|<=|>|<) "


def _bounds(metas: list[msgspec.Meta]) -> str:  # `between 1 and 9`, `at least 0`, `over 0`
    low = next((m.ge for m in metas if m.ge is not None), None)
    above = next((m.gt for m in metas if m.gt is not None), None)
    high = next((m.le for m in metas if m.le is not None), None)
    below = next((m.lt for m in metas if m.lt is not None), None)
    if low is not None and high is not None:
        return f"between {low} and {high}"
    words = [
        f"at least {low}" if low is not None else f"over {above}" if above is not None else "",
        f"at most {high}" if high is not None else f"under {below}" if below is not None else "",
    ]
    return " and ".join(w for w in words if w)


def _literal(t: Any) -> str:
    return " or ".join(repr(v) if isinstance(v, str) else str(v) for v in get_args(t))


def _explain(
    shown: str, data: dict[str, Any], shape: type[msgspec.Struct], message: str
) -> BadInput:
    m = re.match(_AT, message)
    what, path = (m["what"], m["path"]) if m else (message, "$")
    try:
        found = re.findall(_SEGMENT, path[1:])
        spot = _walk(shape, data, [n or (int(i) if i else None) for n, i, _ in found])
    except _UNFOLLOWED:
        return fail(shown, path[2:] or "(file)", what, "see the documentation of this file")
    if what.startswith("Object missing required field"):
        return _missing(shown, spot)
    if what.startswith("Object contains unknown field"):
        loaded = getattr(spot.type, "LOADED", ())
        allowed = sorted(
            f.encode_name for f in msgspec.structs.fields(spot.type) if f.name not in loaded
        )
        return fail(
            shown,
            _key(spot.key, next(k for k in spot.value if k not in allowed)),
            "unknown key",
            f"remove it; allowed keys{' in ' + spot.key if spot.key else ''}: "
            + ", ".join(allowed),
        )
    return fail(shown, spot.key or "(file)", *_problem(spot, what))


def _missing(shown: str, spot: _Spot) -> BadInput:
    present = spot.value
    field = next(
        f for f in msgspec.structs.fields(spot.type) if f.required and f.encode_name not in present
    )
    name = field.encode_name
    inner = _Spot(type=field.type, value=_ABSENT, key=_key(spot.key, name), leaf=name)
    t = _unwrap(inner.type, _ABSENT, inner.metas)
    if get_origin(t) is Literal:
        problem, default = f"expected {_literal(t)}, got nothing", f"set {name} = {_literal(t)}"
    elif t is str:
        under = f" under [{spot.key}]" if spot.key else ""
        problem, default = "missing", f'add {name} = "..."{under}'
    elif t is int:
        problem, default = "missing", f"add {name} = <integer>"
    elif _kind(t) == "table":
        problem, default = "must be a table, got nothing", f"add a [{inner.key}] table"
    else:
        problem, default = "missing", f"add {name} = ..."
    return fail(shown, inner.key, problem, _fix(inner, default))


def _problem(spot: _Spot, what: str) -> tuple[str, str]:
    t, value, name = spot.type, spot.value, spot.leaf
    got = _TOML_TYPES.get(type(value), type(value).__name__)
    if isinstance(t, type) and issubclass(t, CheckedStr):
        if not what.startswith("Expected `str`"):
            return what, t.fix
        t = str
    own = _extra(spot, "problem")
    if own is not None:  # the field words its own refusals (of type and of range)
        for token, text in (("{value}", shown_value(value)), ("{type}", got), ("{name}", name)):
            own = own.replace(token, text)
        return own, _fix(spot, "fix it").replace("{name}", name)
    if get_origin(t) is Literal:
        return (
            f"expected {_literal(t)}, got {got} {shown_value(value)}",
            _fix(spot, f"set {name} = {_literal(t)}"),
        )
    if re.match(_BOUND, what):
        bounds = _bounds(spot.metas)
        return f"{shown_value(value)} is out of range: must be {bounds}", _fix(spot, bounds)
    if "matching regex" in what:
        pattern = next((m.pattern for m in spot.metas if m.pattern), "")
        if pattern == r"\S":
            return "empty", _fix(spot, "give it a value")
        return f"{shown_value(value)} does not match {pattern}", _fix(spot, f"fix {name}")
    if t is str:
        return f"must be a string, got {got}", _fix(spot, "quote the value")
    if t is bool:
        default = spot.default if isinstance(spot.default, bool) else False
        return f"must be true or false, got {got}", _fix(spot, f"{name} = {str(default).lower()}")
    if t is int:
        return (
            f"{shown_value(value)} is not an integer ({'an' if got[:1] in 'aeiou' else 'a'} {got})",
            _fix(spot, f"write {name} as a whole number without quotes or a decimal point"),
        )
    kind = _kind(t)
    if kind == "array":
        if (elem := _unwrap(get_args(t)[0], _ABSENT, [])) is str:
            return "must be an array of strings", _fix(spot, f'write {name} = ["..."]')
        if _is_struct(elem):
            return "must be an array of tables", _fix(spot, f"write [[{spot.key}]]")
        return f"must be an array, got {got}", _fix(spot, f"write {name} = [...]")
    if kind == "table":
        return f"must be a table, got {got}", _fix(spot, f"write [{spot.key}]")
    if t is float:
        return f"must be a number, got {got}", _fix(spot, f"write {name} as a number")
    members: list[Any] = []
    fixes: list[msgspec.Meta] = []
    todo = [m for m in get_args(t) if m not in _ABSENT_TYPES] or [t]
    while todo:  # a union of unions (an option: a word or an array of words), flattened
        base = _unwrap(todo.pop(0), _ABSENT, fixes)
        if get_origin(base) in (Union, types.UnionType):
            todo[:0] = [m for m in get_args(base) if m not in _ABSENT_TYPES]
        else:
            members.append(base)
    words = list(dict.fromkeys(
        "an array" if _kind(m) == "array" else "a table" if _kind(m) == "table"
        else _TYPE_WORDS.get(m, getattr(m, "__name__", str(m)))
        for m in members
    ))  # fmt: skip
    either = f"{', '.join(words[:-1])} or {words[-1]}" if len(words) > 1 else words[0]
    own_fix = _extra(_Spot(type=t, value=value, metas=fixes), "fix")
    return f"must be {either}, got {got}", _fix(spot, own_fix or "fix it")
